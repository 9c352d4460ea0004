"""The gate's worker, resources: the compiled resources (sm_90a) of the kernels of the
``--only`` combinations of WORKTREE, read by the revision's own code (the one its static
tracks use), as a ``records.Resources`` (or ``records.Fatal``); no GPU needed.

    python harness/gate/worker/resources.py --tree WORKTREE --only names.json --out res.json
"""

import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import common


def sm90a_kernel(family, params):
    """The sm_90a build of one combination by the revision's own code: through its
    operator (``kernel``, what its static tracks read) where the suite has the operator
    contract, else (an older suite) its GEMM's ``compile_gemm``."""
    if not hasattr(family.cls, "combination"):  # a suite from before the operator contract
        from kernels import compile_gemm

        return compile_gemm(*family.cls().case(*params), arch="sm_90a")
    from harness.ops.contract import CompileTarget
    from harness.ops.registry import operator

    combo = common.discovery.combination(family, params)
    if combo.config is None:
        raise RuntimeError(
            f"{combo.name}: no config to build here (the family picks it from the GPU it "
            "runs on, and none is visible)"
        )
    # A fixed config: the SM count sizes nothing (as in the static tracks).
    return operator(combo.operator).kernel(combo.shape, combo.config, CompileTarget(sm_count=1))


def resources_of(tree: Path, only: set[str]) -> dict:
    """``{name: {registers, smem_bytes, spill_bytes, has_wgmma, has_tma} | {"error": why}}``
    of the kernels of the combinations ``only``, built by the revision on ``sys.path``."""
    read = common.tree_module("harness.measure.resources", "harness.resources").sm90a_resources
    kernels, out = {}, {}
    for name, family, params in common.discover(tree, None):
        if name not in only:
            continue
        try:
            kernels[name] = sm90a_kernel(family, params)
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
