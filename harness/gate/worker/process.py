"""The gate's worker, one revision per process: measure the GPU combinations of the asv
suite in WORKTREE and write a ``records.ProcessRun`` (or ``records.Fatal``). The gate
runs one such process per side and round.

    python harness/gate/worker/process.py --tree WORKTREE --out run.json [--bench REGEX]

That tree goes first on ``sys.path``, so the suite, the kernels and the timing path all
come from the revision being measured; per combination the suite's own one-combination
``measure`` (the code its asv ``setup_cache`` runs), then an NVML reading.

Test-only (the gate self-test): ``--inject-slowdown FRACTION`` launches every kernel with
a delay calibrated to the fraction on the revision's timing path (``injection.py``);
``--inject-cycles FILE`` (``inject.cycles_record``) sets calibrated cycles instead.
"""

import copy
import sys
from dataclasses import replace
from functools import partial
from pathlib import Path

import common
import injection

records = common.records
TREE_BLOCK = 10  # launches per block when the revision's timer times the two in turn


def tree_seen(plain, slowed, pairs: int) -> float:
    """The slowdown of ``slowed`` over ``plain`` on the revision's timing path, which
    times one function at a time: blocks of ``TREE_BLOCK`` launches each in turn, the
    median of the blocks' ratios, about ``pairs`` launches a side."""
    blocks = max(3, pairs // TREE_BLOCK)
    plain_ms, slowed_ms = [], []
    for _ in range(blocks):
        plain_ms.append(common.tree_median_ms(plain, TREE_BLOCK))
        slowed_ms.append(common.tree_median_ms(slowed, TREE_BLOCK))
    return common.inject.pair_seen(plain_ms, slowed_ms)


def inject_slowdown(
    bench, fraction: float, clock, entry: dict, name: str = "", cycles=None
) -> None:
    """Test-only (``--inject-slowdown``): this benchmark's kernel is replaced by its
    delayed build, its delay calibrated on the revision's timing path to ``fraction`` of
    the plain kernel's latency. Only this instance's ``prepare`` is wrapped, and it hands
    ``measure`` a copy of the shared inputs whose kernel is the delayed one: the suite's
    code and other combinations are untouched. The ``records.Injection`` (calibrated, or
    ``cycles[name]`` given) goes to ``entry["injection"]``."""
    prepare = bench.prepare

    def slowed_prepare(*params):
        got = prepare(*params)
        # A suite from before the operator contract hands (inputs, config); one on it a
        # prepared combination with its inputs, config and launch.
        old = isinstance(got, tuple)
        data, config = got if old else (got.inputs, got.config)
        kernel = injection.delayed_kernel(data, config)
        plain = data.tilelang_fn(config) if old else got.launch
        launch = partial(kernel, data.a, data.b, data.out)
        seen_of = partial(tree_seen, plain, launch)
        entry["injection"] = injection.set_delay(
            kernel, plain, fraction, seen_of, clock, name, cycles
        )
        if not old:
            return replace(got, launch=launch)
        slowed = copy.copy(data)
        slowed.tilelang_fn = lambda cfg: launch
        return slowed, config

    bench.prepare = slowed_prepare


def measure(bench, params: tuple) -> dict[str, tuple[float, ...]]:
    """The GPU tracks' samples of one combination."""
    if hasattr(bench, "measure"):
        samples = bench.measure(*params)
    else:
        # A revision from before families were measured in setup_cache (a base that
        # predates it): asv's own order, setup then each track.
        bench.setup(*params)
        samples = {t: getattr(bench, t)(*params)["samples"] for t in common.TRACKS}
    return {t: tuple(samples[t]) for t in common.TRACKS}


def measure_one(cls, params, nvml, slowdown, clock, name, cycles):
    """One combination's ``records.Measured``: its samples, or why none."""
    entry: dict = {}
    try:
        bench = cls()
        if slowdown:
            if not hasattr(bench, "prepare"):
                raise RuntimeError("--inject-slowdown needs a suite with prepare/measure")
            inject_slowdown(bench, slowdown, clock, entry, name, cycles)
        if nvml is None:
            entry.update(measure(bench, params))
        else:  # the GPU's state while this benchmark ran, not after it
            samples, state = nvml.during(partial(measure, bench, params), interval_s=0.01)
            entry.update(samples, gpu=common.gpu_of(state))
    except NotImplementedError as skip:
        return records.Measured(skipped=str(skip))
    except Exception as err:  # recorded per benchmark; the gate reports it (exit 2)
        return records.Measured(error=common.error_line(err)[:500])
    return records.Measured(**entry)


def run(
    tree: Path,
    pattern: str | None,
    slowdown: float = 0.0,
    only: set[str] | None = None,
    cycles: dict[str, int] | None = None,
) -> dict:
    """``{name: records.Measured}`` of every selected combination of ``tree``'s suite."""
    nvml = common.open_nvml()
    calibrating = slowdown and cycles is None
    clock = injection.injection_clock(common.tree_median_ms) if calibrating else None
    results = {}
    for name, family, params in common.discover(tree, pattern):
        if only is not None and name not in only:
            continue  # another GPU's shard
        results[name] = measure_one(family.cls, params, nvml, slowdown, clock, name, cycles)
        got = results[name]
        status = "error" if got.error else "skipped" if got.skipped else "ok"
        print(f"  {name}: {status}", file=sys.stderr, flush=True)
    return results


def main() -> int:
    parser = common.parser(__doc__)
    parser.add_argument("--tree", type=Path, required=True, help="worktree of the revision")
    common.only_option(parser, "JSON list of combination names: just these (a GPU's shard)")
    parser.add_argument(
        "--inject-slowdown",
        type=float,
        default=0.0,
        metavar="FRACTION",
        help="test-only: add GPU work of this fraction of each kernel's latency (self-test)",
    )
    injection.cycles_option(parser)
    args = parser.parse_args()
    fractions = [args.inject_slowdown] * bool(args.inject_slowdown)
    cycles = injection.cycles_of(parser, args.inject_cycles, fractions)
    tree = args.tree.resolve()

    def make():
        common.use_tree(tree)
        only = common.names_in(args.only)
        results = run(tree, args.bench, args.inject_slowdown, only, cycles)
        return records.ProcessRun(results, tilelang=common.tilelang_version())

    return common.write(args.out, make)


if __name__ == "__main__":
    sys.exit(main())
