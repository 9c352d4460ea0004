"""The gate's worker, resources: the compiled resources (sm_90a) of the kernels of the
``--only`` combinations of WORKTREE, read by the revision's own code (the one its static
tracks use), as a ``records.Resources`` (or ``records.Fatal``); no GPU needed.

    python harness/gate/worker/resources.py --tree WORKTREE --only names.json --out res.json
"""

import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import common


def resources_of(tree: Path, only: set[str]) -> dict:
    """``{name: {registers, smem_bytes, spill_bytes, has_wgmma, has_tma} | {"error": why}}``
    of the kernels of the combinations ``only``, built by the revision on ``sys.path``."""
    from kernels import compile_gemm

    read = common.tree_module("harness.measure.resources", "harness.resources").sm90a_resources
    kernels, out = {}, {}
    for name, family, params in common.discover(tree, None):
        if name not in only:
            continue
        try:
            if hasattr(family.cls, "combination"):
                combo = common.discovery.combination(family, params)
                shape, config = combo.shape, combo.config
            else:  # a suite from before the operator contract
                shape, config = family.cls().case(*params)
            kernels[name] = compile_gemm(shape, config, arch="sm_90a")
        except Exception as err:
            out[name] = {"error": common.error_line(err)}

    def one(kernel):
        try:
            r = read(kernel)
        except Exception as err:
            return {"error": common.error_line(err)}
        return {
            "registers": r.registers,
            "smem_bytes": r.smem_bytes,
            "spill_bytes": r.spill_bytes,
            "has_wgmma": r.has_wgmma,
            "has_tma": r.has_tma,
        }

    with ThreadPoolExecutor() as pool:  # nvcc runs as a child process per kernel
        out.update(zip(kernels, pool.map(one, kernels.values()), strict=True))
    return out


def main() -> int:
    parser = common.parser(__doc__, bench=False)
    parser.add_argument("--tree", type=Path, required=True, help="worktree of the revision")
    common.only_option(parser, "JSON list of the combination names whose kernels to read")
    args = parser.parse_args()
    tree = args.tree.resolve()

    def make():
        common.use_tree(tree)
        return common.records.Resources(resources_of(tree, common.names_in(args.only) or set()))

    return common.write(args.out, make)


if __name__ == "__main__":
    sys.exit(main())
