"""The gate's worker, paired: several revisions' kernels in one process, launched in turn;
writes a ``records.PairedRun`` (or ``records.Fatal``, naming the side that failed).

    python harness/gate/worker/paired.py --side base=TREE_A --side head=TREE_B --out pair.json

Each side's suite is imported from its own tree in turn (the modules of one side are
dropped from ``sys.modules`` before the next is imported, while its compiled kernels and
inputs stay alive), every combination's kernel is built by discovery's one walk through
that side's own operator registry (``common.prepare``; a revision from before the
operator contract by its suite's ``prepare``), and then the sides' kernels are launched
in turn, launch by launch, by ``harness/measure/interleave.py``. Clock and power drift
then reaches every side alike, and each trial gives one ratio per side against the first.
``--launch-scale FILE`` gives a noisy benchmark more launches per trial (its calibration's
launch scale times the worker's own sizing).

Test-only (the gate self-test): ``--inject SIDE=FRACTION`` launches that side's kernel
with a delay calibrated to the fraction, measured on the trials themselves, every side
launched in their rotation (``injection.py``); ``--inject-cycles FILE`` sets calibrated
cycles instead and measures none.
"""

import importlib
import json
import sys
from functools import partial
from pathlib import Path

import common
import injection

records = common.records
interleave = common.interleave
inject = common.inject
INPUTS = ("a", "b", "out")


def _places(module) -> list[str]:
    """Where a module was loaded from: its file, and a package's folders."""
    out = [getattr(module, "__file__", None)]
    try:
        out += list(getattr(module, "__path__", None) or [])
    except TypeError:  # some extension modules expose a __path__ that is not a list
        pass
    return [p for p in out if isinstance(p, str) and p]


def _modules_in(trees: list[Path]) -> list[str]:
    """Names of the loaded modules that live in any of ``trees``."""
    return [
        name
        for name, module in list(sys.modules.items())
        if any(Path(p).resolve().is_relative_to(t) for p in _places(module) for t in trees)
    ]


def enter_tree(tree: Path, trees: list[Path]) -> None:
    """Make ``tree`` the one whose ``kernels``, ``harness`` and suite an import finds:
    forget every module any of ``trees`` gave (objects already made keep theirs)."""
    for name in _modules_in(trees):
        del sys.modules[name]
    sys.path[:] = [str(tree)] + [p for p in sys.path if Path(p or ".").resolve() not in trees]
    importlib.invalidate_caches()
    import kernels

    if not Path(kernels.__file__).resolve().is_relative_to(tree):
        raise RuntimeError(f"kernels imported from {kernels.__file__}, not from {tree}")


def prepare_side(
    tree: Path,
    trees: list[Path],
    pattern: str | None,
    only: set[str] | None,
    delayed: bool = False,
):
    """``{name: common.prepare(...)}`` (or ``{name: records.Side}`` where it was skipped
    or failed) for every GPU combination of ``tree``'s suite: its inputs and kernel made
    by that revision's own code, compiled (or loaded from TileLang's disk cache) now; with
    ``delayed`` (test-only) also its delayed build, under ``"delayed"``."""
    enter_tree(tree, trees)
    out = {}
    for name, family, params in common.discover(tree, pattern):
        if only is not None and name not in only:
            continue
        try:
            out[name] = common.prepare(family, params)
            if delayed:
                got = out[name]
                got["delayed"] = injection.delayed_kernel(got["data"], got["config"])
        except NotImplementedError as skip:
            out[name] = records.Side(skipped=str(skip))
        except Exception as err:  # this side of this combination fails alone
            out[name] = records.Side(error=inject.error_text(err))
    return out


def same_inputs(data, ref) -> bool:
    """Whether ``data`` and ``ref`` hold tensors of the same shapes and dtypes."""
    try:
        return all(
            getattr(data, k).shape == getattr(ref, k).shape
            and getattr(data, k).dtype == getattr(ref, k).dtype
            for k in INPUTS
        )
    except AttributeError:
        return False


def share_inputs(data, ref) -> bool:
    """Point ``data``'s inputs and output at ``ref``'s when both hold tensors of the same
    shapes and dtypes, so every side's kernel reads and writes the same memory and where
    the buffers landed cannot tell the sides apart. False (each keeps its own) otherwise."""
    if data is ref:
        return True
    same = same_inputs(data, ref)
    if same:
        for k in INPUTS:
            setattr(data, k, getattr(ref, k))
    return same


def side_launch(got: dict, ref: dict):
    """(launch, the inputs it runs on, whether they are ``ref``'s) of one side's prepared
    combination: a kernel built by the walk is bound to the first side's inputs where
    those are of the same operator and shape; an older suite's inputs are pointed at them
    (``share_inputs``)."""
    data, ref_data = got["data"], ref["data"]
    if "bind" in got:
        same = same_inputs(data, ref_data) and got["key"] == ref.get("key", got["key"])
        shared = data is ref_data or same
        use = ref_data if shared else data
        return got["bind"](use), use, shared
    shared = share_inputs(data, ref_data)
    return data.tilelang_fn(got["config"]), data, shared


def paired_seen(fns, index: int, trials: int, launches: int) -> float:
    """The slowdown of side ``index`` of ``fns`` as the paired gate will see it: the same
    sides in the same rotation (``common.paired_trials``), read by the gate's statistic,
    the median of the per-trial ratios to the first side (``inject.trial_seen``)."""
    if index == 0:
        raise RuntimeError(
            "the injected side is this benchmark's first side, the one every ratio is "
            "taken against: inject a later side"
        )
    return inject.trial_seen(common.paired_trials(fns, trials, launches)[1][index])


def measure_one(name, prepared, runnable, injected, setting, found: dict):
    """Each ``runnable`` side's ``records.Side`` of benchmark ``name``, measured; the
    other fields of its ``records.Paired`` go to ``found`` as they are known (so a failed
    launch keeps the injection calibrated before it). ``setting``: the nvml reader,
    trials, launches (None: sized to the kernel), calibration clock, flush ms, given
    cycles and launch scales (benchmark -> scale of the sizing)."""
    nvml, trials, launches, clock, flush, cycles, scales = setting
    fns, delayed = [], {}
    ref = prepared[runnable[0]][name]
    shared = True
    for side in runnable:
        fn, data, same = side_launch(prepared[side][name], ref)
        shared = same and shared
        if injected.get(side):
            kernel = prepared[side][name]["delayed"]
            delayed[side] = (kernel, fn)
            fn = partial(kernel, data.a, data.b, data.out)
        fns.append(fn)
    n = launches
    if n is None:
        ms = common.paired_median_ms(fns[0], launches=6)
        n = interleave.launches_for(ms, flush, scale=scales.get(name, 1))
    # Calibrated on the trials the gate runs next: every side, delayed one included.
    found.update(shared_inputs=shared, launches=n, injection={})
    order = [(i, side) for i, side in enumerate(runnable) if side in delayed]
    # Several delayed sides: each but the last was calibrated while a later one had no
    # delay yet, and the mix the gate runs moved what it saw (H200: a 2% side calibrated
    # at +2.08% was seen at +1.74% once a 1% side ran its delay). Those are rechecked
    # with every delay set, and calibrated on where they moved.
    again = order[:-1] if cycles is None else []
    for k, (i, side) in enumerate([*order, *again]):
        kernel, plain = delayed[side]
        seen_of = partial(paired_seen, fns, i, launches=n)
        steps = {"sides": len(fns), "unit": n}
        before = found["injection"][side] if k >= len(order) else None
        found["injection"][side] = injection.set_delay(
            kernel, plain, injected[side], seen_of, clock, name, cycles, **steps, before=before
        )
    timed = partial(common.paired_trials, fns, trials, n)
    if nvml is None:
        ms, ratios = timed()
    else:
        (ms, ratios), state = nvml.during(timed, interval_s=0.01)
        found["gpu"] = common.gpu_of(state)
    sides = {
        side: records.Side(latency=tuple(x * 1e-3 for t in ms[i] for x in t))
        for i, side in enumerate(runnable)
    }
    found["ratios"] = {side: tuple(ratios[i]) for i, side in enumerate(runnable)}
    return sides


def run_paired(
    sides: dict[str, Path],
    pattern: str | None,
    injected: dict[str, float],
    only: set[str] | None = None,
    trials: int = 20,
    launches: int | None = None,
    cycles: dict[str, int] | None = None,
    scales: dict[str, int] | None = None,
) -> dict:
    """``{name: records.Paired}``: per combination every side's latencies (or why none),
    the per-trial ratios to the first side, the launches per side and trial, the GPU's
    state and whether the sides shared inputs; an ``injected`` side (test-only, side ->
    fraction) launches its kernel's delayed build, calibrated to that fraction, or with
    ``cycles[name]`` where ``cycles`` are given. ``launches`` None: each benchmark's from
    its kernel's time (``interleave.launches_for``), times its launch scale in
    ``scales`` (a noisy benchmark's, from the calibration)."""
    trees = list(dict.fromkeys(t.resolve() for t in sides.values()))
    prepared = {}
    for side, tree in sides.items():
        try:
            prepared[side] = prepare_side(
                tree, trees, pattern, only, delayed=bool(injected.get(side))
            )
        except Exception as err:  # that revision's suite does not import: its failure alone
            raise common.SideFailed(side) from err
    nvml = common.open_nvml()
    calibrating = any(injected.values()) and cycles is None
    clock = injection.injection_clock(common.paired_median_ms) if calibrating else None
    flush = None if launches is not None else clock[2] if clock else injection.flush_ms()
    setting = (nvml, trials, launches, clock, flush, cycles, scales or {})
    names = list(dict.fromkeys(n for p in prepared.values() for n in p))
    results = {}
    for name in names:
        got = {side: p[name] for side, p in prepared.items() if name in p}
        outcome = {side: v for side, v in got.items() if isinstance(v, records.Side)}
        runnable = [side for side in got if side not in outcome]
        found: dict = {}
        if runnable:
            try:
                outcome.update(measure_one(name, prepared, runnable, injected, setting, found))
            except Exception as err:  # a launch failed: every side of this combination fails
                failed = records.Side(error=inject.error_text(err))
                outcome.update(dict.fromkeys(runnable, failed))
                found.pop("ratios", None)
        order = [side for side in got if side in outcome]
        results[name] = records.Paired(sides={s: outcome[s] for s in order}, **found)
        status = ", ".join(
            f"{side} {'error' if v.error else 'skipped'}: {inject.first_line(v.error or v.skipped)}"
            for side, v in results[name].sides.items()
            if v.error or v.skipped
        )
        print(f"  {name}: {status or 'ok'}", file=sys.stderr, flush=True)
    return results


def launch_scales(parser, path: Path | None) -> dict[str, int]:
    """``--launch-scale FILE``'s ``{benchmark: scale}``; a usage error naming the option
    where the file is unreadable or not an object of integers >= 1."""
    if path is None:
        return {}
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as err:
        parser.error(f"--launch-scale={path}: cannot read it as JSON ({err})")
    bad = not isinstance(data, dict) or any(
        isinstance(v, bool) or not isinstance(v, int) or v < 1 for v in data.values()
    )
    if bad:
        parser.error(f"--launch-scale={path}: must be an object of benchmark -> integer >= 1")
    return data


def main() -> int:
    parser = common.parser(__doc__)
    parser.add_argument(
        "--side",
        action="append",
        required=True,
        type=lambda t: common.named(t, "WORKTREE", Path),
        help="NAME=WORKTREE, two or more times: measure these sides paired, in this process",
    )
    common.only_option(parser, "JSON list of combination names: just these (a GPU's shard)")
    parser.add_argument(
        "--inject",
        action="append",
        type=lambda t: common.named(t, "FRACTION", common.fraction),
        default=[],
        help="test-only: SIDE=FRACTION slows that side's launches (self-test)",
    )
    injection.cycles_option(parser)
    parser.add_argument("--trials", type=common.positive, default=20, help="trials (ratios)")
    parser.add_argument(
        "--launches",
        type=common.positive,
        default=None,
        help="launches per side and trial (default: per benchmark, as many rounds "
        f"of {interleave.LAUNCH_ROUND} as fit {interleave.TRIAL_BUDGET_MS:g} ms of GPU time "
        f"a side, at most {interleave.MAX_TRIAL_LAUNCHES}: short kernels get more)",
    )
    parser.add_argument(
        "--launch-scale",
        type=Path,
        default=None,
        metavar="FILE",
        help="JSON object of benchmark -> integer >= 1: that benchmark's launches per trial "
        "are its own sizing times this (the calibration's, for a noisy benchmark)",
    )
    args = parser.parse_args()
    scales = launch_scales(parser, args.launch_scale)
    first = args.side[0][0]
    if first in dict(args.inject):
        parser.error(
            f"--inject {first}=...: {first} is the first --side, the one every ratio is taken "
            "against; inject a later side"
        )
    cycles = injection.cycles_of(parser, args.inject_cycles, [f for _, f in args.inject])
    sides = {name: tree.resolve() for name, tree in args.side}

    def make():
        only = common.names_in(args.only)
        inj = dict(args.inject)
        results = run_paired(
            sides, args.bench, inj, only, args.trials, args.launches, cycles, scales
        )
        return records.PairedRun(
            tuple(sides), results, timer=common.timer_text(), tilelang=common.tilelang_version()
        )

    return common.write(args.out, make)


if __name__ == "__main__":
    sys.exit(main())
