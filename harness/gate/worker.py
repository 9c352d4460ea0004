"""Measure the GPU combinations of one or more revisions' asv suites in this process and
write their samples. The gate starts this file as a script from its own checkout.

Two modes:

- ``--tree WORKTREE`` (per revision): that tree goes first on ``sys.path``, so the suite,
  the kernels and the timing path all come from the revision being measured; per
  combination the suite's own one-combination ``measure`` (the code its asv
  ``setup_cache`` runs), then an NVML reading. The gate runs one such process per side
  and round.
- ``--side NAME=WORKTREE`` given two or more times (paired): each side's suite is
  imported from its own tree in turn (the modules of one side are dropped from
  ``sys.modules`` before the next is imported, while its compiled kernels and inputs stay
  alive), every combination's kernel is built by that side's own ``prepare``, and then
  the sides' kernels are launched in turn, launch by launch, by
  ``harness/measure/interleave.py``. Clock and power drift then reaches every side alike,
  and each trial gives one ratio per side against the first.

    python harness/gate/worker.py --tree WORKTREE --out samples.json [--bench REGEX]
    python harness/gate/worker.py --side base=TREE_A --side head=TREE_B --out pair.json

Test-only (the gate self-test): ``--inject SIDE=FRACTION`` (paired) or
``--inject-slowdown FRACTION`` launches that side's kernel with a delay calibrated to the
fraction (paired: measured on the trials themselves, every side launched in their
rotation), one progress line per calibration step; ``--inject-cycles FILE``
(``inject.cycles_record``) sets calibrated cycles instead and measures none.
"""

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
# Run as a script, this folder comes first on sys.path, and its bisect.py would stand in
# for the standard library's (which `statistics` and `random` import): drop it first.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != HERE]

import argparse  # noqa: E402
import importlib  # noqa: E402
import inspect  # noqa: E402
import json  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402
import traceback  # noqa: E402
from functools import partial  # noqa: E402

TRACKS = ("track_latency", "track_vs_torch")


def _load_by_path(name: str, path: Path):
    """A module of this (the gate's) checkout, loaded by file path under a private name:
    the tree on ``sys.path`` is the revision under test, whose harness may be laid out
    differently."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up by name
    spec.loader.exec_module(module)
    return module


discovery = _load_by_path("_gate_discovery", HERE.parent / "suite" / "discovery.py")
interleave = _load_by_path("_gate_interleave", HERE.parent / "measure" / "interleave.py")
inject = _load_by_path("_gate_inject", HERE / "inject.py")


def _tree_module(*names: str):
    """The first of ``names`` the revision under test has: a module moved between
    revisions (``harness.measure.timing`` was ``harness.timing``)."""
    for name in names[:-1]:
        try:
            return importlib.import_module(name)
        except ModuleNotFoundError as err:
            if err.name is None or not name.startswith(err.name):
                raise
    return importlib.import_module(names[-1])


def discover(tree: Path, pattern: str | None):
    """(name, class, params) of every GPU combination of the suite in ``tree`` that
    ``pattern`` selects by the suite runner's rule (``discovery.selected``: asv's name of
    any of its benchmarks, or the gate's name of the combination)."""
    found = []
    regexes = [] if pattern is None else [pattern]
    for family in discovery.families(tree):
        if not family.has_tracks(TRACKS):
            continue
        for params in family.combinations():
            name = family.combination_name(params)
            if discovery.selected(discovery.aliases(family, params), regexes):
                found.append((name, family.cls, params))
    return found


def sleep_cycles_per_ms(median_ms) -> float:
    """GPU clock cycles that ``torch.cuda._sleep`` spins per millisecond, timed now by
    ``median_ms(fn)``: the SM clock the kernels' test-only delay counts in."""
    import torch

    cycles = 2_000_000
    return cycles / median_ms(lambda: torch.cuda._sleep(cycles))


def _tree_median_ms(fn, repeat: int = 5) -> float:
    """Median of ``repeat`` launches on the timing path of the revision under test."""
    measure = _tree_module("harness.measure.timing", "harness.timing").measure
    return measure(fn, warmup=1, repeat=repeat).median_ms


# The paired loop's timer: each kernel's own time from CUPTI's records, or CUDA events
# where this process cannot record kernel activity (said once, and in the payload).
TIMER = {"name": "cupti", "why": None}


def paired_times(fns, **kwargs) -> list[list[list[float]]]:
    """``interleave.interleaved`` on the paired timer, falling back to events for the
    rest of the process where CUPTI records nothing."""
    if TIMER["name"] == "cupti":
        try:
            return interleave.interleaved(fns, timer="cupti", **kwargs)
        except interleave.kernel_timer.CuptiUnavailable as err:
            TIMER.update(name="event", why=str(err))
            print(f"  note: timing with CUDA events: {err}", file=sys.stderr, flush=True)
    return interleave.interleaved(fns, timer="event", **kwargs)


def _paired_median_ms(fn, launches: int = 5) -> float:
    """Median of a few launches timed as the paired loop times them."""
    return statistics.median(paired_times([fn], trials=1, launches=launches)[0][0])


def paired_trials(fns, trials: int, launches: int):
    """The paired gate's trials: ``fns`` launched in turn (``paired_times``), ``trials``
    trials of ``launches`` launches a side; ``(ms, ratios)``, the latencies and each
    side's per-trial ratios to the first side (``interleave.trial_ratios``). The gate's
    comparison and the injection's calibration both measure through this."""
    ms = paired_times(fns, trials=trials, launches=launches)
    return ms, interleave.trial_ratios(ms)


def _paired_seen(fns, index: int, trials: int, launches: int) -> float:
    """The slowdown of side ``index`` of ``fns`` as the paired gate will see it: the same
    sides in the same rotation (``paired_trials``), read by the gate's statistic, the
    median of the per-trial ratios to the first side (``inject.trial_seen``)."""
    if index == 0:
        raise RuntimeError(
            "the injected side is this benchmark's first side, the one every ratio is "
            "taken against: inject a later side"
        )
    return inject.trial_seen(paired_trials(fns, trials, launches)[1][index])


TREE_BLOCK = 10  # launches per block when the revision's timer times the two in turn


def _tree_seen(plain, slowed, pairs: int) -> float:
    """The slowdown of ``slowed`` over ``plain`` on the revision's timing path, which
    times one function at a time: blocks of ``TREE_BLOCK`` launches each in turn, the
    median of the blocks' ratios, about ``pairs`` launches a side."""
    blocks = max(3, pairs // TREE_BLOCK)
    plain_ms, slowed_ms = [], []
    for _ in range(blocks):
        plain_ms.append(_tree_median_ms(plain, TREE_BLOCK))
        slowed_ms.append(_tree_median_ms(slowed, TREE_BLOCK))
    return inject.pair_seen(plain_ms, slowed_ms)


def delayed_kernel(data, config):
    """The test-only delayed build of ``data``'s kernel under ``config``, by the
    revision's own ``kernels`` (the one on ``sys.path`` now)."""
    compile_gemm = getattr(importlib.import_module("kernels"), "compile_gemm", None)
    if compile_gemm is None or "delay" not in inspect.signature(compile_gemm).parameters:
        raise RuntimeError("this revision's kernels have no test-only delay to inject with")
    return compile_gemm(data.shape, config, delay=True)


def sm_count() -> int:
    import torch

    return torch.cuda.get_device_properties(torch.cuda.current_device()).multi_processor_count


def flush_ms() -> float:
    """GPU time (ms) of one L2 flush as the paired timer does it before every launch,
    timed now with CUDA events over a few flushes."""
    import torch

    cache = torch.empty(interleave.FLUSH_BYTES // 4, dtype=torch.int, device="cuda")
    interleave.kernel_timer.flush(cache)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(10):
        interleave.kernel_timer.flush(cache)
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / 10


def calibrate_delay(
    kernel, plain, fraction: float, seen_of, clock, name: str, sides: int = 2, unit: int = 1
) -> dict:
    """Set ``kernel.delay_cycles`` so that the delayed kernel is slower than ``plain`` by
    ``fraction`` as ``seen_of(count)`` measures it, ``count`` steps of ``unit`` launches
    a side (paired: trials) with ``sides`` kernels launched in turn, within the budget of
    ``inject.step_trials`` (``inject.calibrate``); ``clock`` is (cycles per ms, SMs,
    flush ms). Each step prints a line (benchmark ``name``, step, cycles, what it saw,
    how long it took), so a long calibration shows itself."""
    cycles_per_ms, sms, flush = clock
    base_ms = _paired_median_ms(plain, launches=20)
    count = inject.step_trials(base_ms, flush, sides, unit)
    done = []

    def seen() -> float:
        start = time.perf_counter()
        got = seen_of(count)
        done.append(got)
        print(
            f"  {name}: injection step {len(done)}/{inject.MAX_STEPS}: "
            f"{kernel.delay_cycles} cycles, {count * unit} launches a side, seen {got:+.3%} "
            f"for {fraction:+.2%} ({time.perf_counter() - start:.2f} s)",
            file=sys.stderr,
            flush=True,
        )
        return got

    return inject.calibrate(kernel, fraction, base_ms, (cycles_per_ms, sms), seen)


def injection_clock(median_ms) -> tuple[float, int, float]:
    """What calibrating a delay needs of the GPU, read once per process: its SM clock in
    cycles per ms (``median_ms`` times the spin), its SMs, and one flush's ms."""
    return sleep_cycles_per_ms(median_ms), sm_count(), flush_ms()


def set_delay(kernel, plain, fraction, seen_of, clock, name, cycles, sides=2, unit=1) -> dict:
    """The injection record of benchmark ``name``: its ``cycles`` as given
    (``--inject-cycles``), or calibrated now where none are given (``calibrate_delay``)."""
    if cycles is not None:
        return inject.given(kernel, name, fraction, cycles)
    return calibrate_delay(kernel, plain, fraction, seen_of, clock, name, sides, unit)


def inject_slowdown(
    bench, fraction: float, clock, entry: dict, name: str = "", cycles=None
) -> None:
    """Test-only (``--inject-slowdown``, used by the gate self-test): this benchmark's
    kernel is replaced by its delayed build (``kernels.gemm.make_gemm(delay=True)``), its
    delay calibrated on the revision's timing path to ``fraction`` of the plain kernel's
    latency. Only this instance's ``prepare`` is wrapped, and it hands ``measure`` a copy
    of the shared inputs whose kernel is the delayed one: the suite's code and other
    combinations are untouched. The calibration (or ``cycles[name]``, given) goes to
    ``entry["injection"]``."""
    import copy

    prepare = bench.prepare

    def slowed_prepare(*params):
        data, config = prepare(*params)
        kernel = delayed_kernel(data, config)
        plain = data.tilelang_fn(config)
        launch = partial(kernel, data.a, data.b, data.out)
        seen_of = partial(_tree_seen, plain, launch)
        entry["injection"] = set_delay(kernel, plain, fraction, seen_of, clock, name, cycles)
        slowed = copy.copy(data)
        slowed.tilelang_fn = lambda cfg: launch
        return slowed, config

    bench.prepare = slowed_prepare


def gpu_entry(state) -> dict:
    """The GPU's state while a benchmark's launches ran, for the payload: the clock the
    kernels ran at (the highest reading), the lowest, and a throttle warning only where
    the readings taken at work clocks say so."""
    return {
        "sm_mhz": state.sm_clock_mhz,
        "sm_mhz_min": getattr(state, "min_sm_clock_mhz", None),
        "throttle": state.throttled(),
    }


def measure(bench, params: tuple) -> dict[str, list[float]]:
    """The GPU tracks' samples of one combination."""
    if hasattr(bench, "measure"):
        samples = bench.measure(*params)
    else:
        # A revision from before families were measured in setup_cache (a base that
        # predates it): asv's own order, setup then each track.
        bench.setup(*params)
        samples = {t: getattr(bench, t)(*params)["samples"] for t in TRACKS}
    return {t: list(samples[t]) for t in TRACKS}


def run(
    tree: Path,
    pattern: str | None,
    slowdown: float = 0.0,
    only: set[str] | None = None,
    cycles: dict[str, int] | None = None,
) -> dict:
    open_nvml = _tree_module("harness.measure.gpu_state", "harness.gpu_state").open_nvml
    nvml = open_nvml()
    clock = injection_clock(_tree_median_ms) if slowdown and cycles is None else None
    results = {}
    for name, cls, params in discover(tree, pattern):
        if only is not None and name not in only:
            continue  # another GPU's shard
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
                entry.update(samples)
                entry["gpu"] = gpu_entry(state)
        except NotImplementedError as skip:
            entry = {"skipped": str(skip)}
        except Exception as err:  # recorded per benchmark; the gate reports it (exit 2)
            last = traceback.format_exception_only(type(err), err)[-1].strip()
            entry = {"error": last[:500]}
        results[name] = entry
        status = "error" if "error" in entry else "skipped" if "skipped" in entry else "ok"
        print(f"  {name}: {status}", file=sys.stderr, flush=True)
    return results


def resources_of(tree: Path, only: set[str]) -> dict:
    """The compiled resources (sm_90a) of the kernels of the combinations ``only``, read by
    the revision's own code, the one its static tracks use; no GPU needed."""
    from concurrent.futures import ThreadPoolExecutor

    from kernels import compile_gemm

    read = _tree_module("harness.measure.resources", "harness.resources").sm90a_resources
    kernels, out = {}, {}
    for name, cls, params in discover(tree, None):
        if name not in only:
            continue
        try:
            shape, config = cls().case(*params)
            kernels[name] = compile_gemm(shape, config, arch="sm_90a")
        except Exception as err:
            out[name] = {"error": traceback.format_exception_only(type(err), err)[-1].strip()}

    def one(kernel):
        try:
            r = read(kernel)
        except Exception as err:
            return {"error": traceback.format_exception_only(type(err), err)[-1].strip()}
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


# Paired mode: several trees' kernels in one process, launched in turn.


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


def _enter_tree(tree: Path, trees: list[Path]) -> None:
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
    """``{name: {"data": inputs, "config": config}}`` (or ``{"skipped"|"error": why}``)
    for every GPU combination of ``tree``'s suite: its inputs and kernel made by that
    revision's own ``prepare``, compiled (or loaded from TileLang's disk cache) now; with
    ``delayed`` (test-only) also its delayed build, under ``"delayed"``."""
    _enter_tree(tree, trees)
    out = {}
    for name, cls, params in discover(tree, pattern):
        if only is not None and name not in only:
            continue
        try:
            bench = cls()
            if not hasattr(bench, "prepare"):
                raise RuntimeError("paired mode needs a suite with prepare(); use --method process")
            data, config = bench.prepare(*params)
            out[name] = {"data": data, "config": config}
            if delayed:
                out[name]["delayed"] = delayed_kernel(data, config)
        except NotImplementedError as skip:
            out[name] = {"skipped": str(skip)}
        except Exception as err:  # this side of this combination fails alone
            out[name] = {"error": inject.error_text(err)}
    return out


INPUTS = ("a", "b", "out")


def share_inputs(data, ref) -> bool:
    """Point ``data``'s inputs and output at ``ref``'s when both hold tensors of the same
    shapes and dtypes, so every side's kernel reads and writes the same memory and where
    the buffers landed cannot tell the sides apart. False (each keeps its own) otherwise."""
    if data is ref:
        return True
    try:
        same = all(
            getattr(data, k).shape == getattr(ref, k).shape
            and getattr(data, k).dtype == getattr(ref, k).dtype
            for k in INPUTS
        )
    except AttributeError:
        return False
    if same:
        for k in INPUTS:
            setattr(data, k, getattr(ref, k))
    return same


class SideFailed(Exception):
    """One side of a paired run failed as a whole (its suite does not import or list)."""

    def __init__(self, side: str):
        super().__init__(side)
        self.side = side


def run_paired(
    sides: dict[str, Path],
    pattern: str | None,
    injected: dict[str, float],
    only: set[str] | None = None,
    trials: int = 20,
    launches: int | None = None,
    cycles: dict[str, int] | None = None,
) -> dict:
    """``{name: {"sides": {side: {"latency": [s...]} | {"error"|"skipped": why}},
    "ratios": {side: [per-trial ratio to the first side]}, "launches": per side and trial,
    "gpu": ..., "shared_inputs": bool}}``; an ``injected`` side (test-only, side ->
    fraction) launches its kernel's delayed build, calibrated to that fraction, or with
    ``cycles[name]`` where ``cycles`` are given (``"injection": {side: record}``).
    ``launches`` None: each benchmark's from its kernel's time (``interleave.launches_for``)."""
    trees = list(dict.fromkeys(t.resolve() for t in sides.values()))
    prepared = {}
    for side, tree in sides.items():
        try:
            prepared[side] = prepare_side(
                tree, trees, pattern, only, delayed=bool(injected.get(side))
            )
        except Exception as err:  # that revision's suite does not import: its failure alone
            raise SideFailed(side) from err
    open_nvml = _tree_module("harness.measure.gpu_state", "harness.gpu_state").open_nvml
    nvml = open_nvml()
    calibrating = any(injected.values()) and cycles is None
    clock = injection_clock(_paired_median_ms) if calibrating else None
    flush = None if launches is not None else clock[2] if clock else flush_ms()
    names = list(dict.fromkeys(n for p in prepared.values() for n in p))
    results = {}
    for name in names:
        entry: dict = {"sides": {}}
        runnable = []
        for side, got in prepared.items():
            if name not in got:
                continue  # that revision has no such combination
            if "data" not in got[name]:
                entry["sides"][side] = dict(got[name])
                continue
            runnable.append(side)
        try:
            fns, delayed = [], {}
            ref = prepared[runnable[0]][name]["data"] if runnable else None
            shared = True
            for side in runnable:
                data, config = prepared[side][name]["data"], prepared[side][name]["config"]
                shared = share_inputs(data, ref) and shared
                fn = data.tilelang_fn(config)
                if injected.get(side):
                    kernel = prepared[side][name]["delayed"]
                    delayed[side] = (kernel, fn)
                    fn = partial(kernel, data.a, data.b, data.out)
                fns.append(fn)
            n = launches
            if n is None and fns:
                n = interleave.launches_for(_paired_median_ms(fns[0], launches=6), flush)
            # Calibrated on the trials the gate runs next: every side, delayed one included.
            for i, side in enumerate(runnable):
                if side in delayed:
                    kernel, plain = delayed[side]
                    seen_of = partial(_paired_seen, fns, i, launches=n)
                    steps = {"sides": len(fns), "unit": n}
                    entry.setdefault("injection", {})[side] = set_delay(
                        kernel, plain, injected[side], seen_of, clock, name, cycles, **steps
                    )
            if fns:
                entry["shared_inputs"] = shared
                entry["launches"] = n
                timed = partial(paired_trials, fns, trials, n)
                if nvml is None:
                    ms, ratios = timed()
                else:
                    (ms, ratios), state = nvml.during(timed, interval_s=0.01)
                    entry["gpu"] = gpu_entry(state)
                for i, side in enumerate(runnable):
                    entry["sides"][side] = {"latency": [x * 1e-3 for t in ms[i] for x in t]}
                    entry.setdefault("ratios", {})[side] = ratios[i]
        except Exception as err:  # a launch failed: every side of this combination fails
            last = inject.error_text(err)
            for side in runnable:
                entry["sides"][side] = {"error": last}
            entry.pop("ratios", None)
        results[name] = entry
        status = ", ".join(
            f"{side} {kind}: {inject.first_line(why)}"
            for side, v in entry["sides"].items()
            if "latency" not in v
            for kind, why in list(v.items())[:1]
        )
        print(f"  {name}: {status or 'ok'}", file=sys.stderr, flush=True)
    return results


def _named(text: str, what: str, convert):
    name, sep, value = text.partition("=")
    if not sep or not name or not value:
        raise argparse.ArgumentTypeError(f"{text!r}: must be NAME={what}")
    try:
        return name, convert(value)
    except ValueError as err:
        raise argparse.ArgumentTypeError(f"{text!r}: {err}") from None


def _fraction(text: str) -> float:
    value = float(text)
    if not 0 < value < 1:
        raise ValueError(f"{value} must be a fraction between 0 and 1")
    return value


def _positive(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"{text!r} must be an integer >= 1")
    return int(text)


def _tilelang_version() -> str | None:
    """The TileLang this process imported (the dependency A/B checks it per side)."""
    module = sys.modules.get("tilelang")
    return getattr(module, "__version__", None) if module is not None else None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--tree", type=Path, help="worktree of the revision (one per process)")
    mode.add_argument(
        "--side",
        action="append",
        type=lambda t: _named(t, "WORKTREE", Path),
        help="NAME=WORKTREE, two or more times: measure these sides paired, in this process",
    )
    parser.add_argument("--out", type=Path, required=True, help="where to write the samples")
    parser.add_argument("--bench", default=None, help="regex on asv or gate names")
    parser.add_argument(
        "--only",
        type=Path,
        default=None,
        help="JSON list of combination names: run just these (one GPU's shard)",
    )
    parser.add_argument(
        "--list",
        action="store_true",
        help="write the matching names instead of measuring (no GPU needed)",
    )
    parser.add_argument(
        "--resources",
        action="store_true",
        help="write the --only combinations' compiled resources (sm_90a) instead of timing",
    )
    parser.add_argument(
        "--inject-slowdown",
        type=float,
        default=0.0,
        metavar="FRACTION",
        help="test-only: add GPU work of this fraction of each kernel's latency (self-test)",
    )
    parser.add_argument(
        "--inject",
        action="append",
        type=lambda t: _named(t, "FRACTION", _fraction),
        default=[],
        help="test-only, paired: SIDE=FRACTION slows that side's launches (self-test)",
    )
    parser.add_argument(
        "--inject-cycles",
        type=Path,
        default=None,
        metavar="FILE",
        help="test-only, with --inject or --inject-slowdown: the delay cycles per benchmark "
        "a calibration found (the self-test writes it); set them instead of calibrating",
    )
    parser.add_argument("--trials", type=_positive, default=20, help="paired: trials (ratios)")
    parser.add_argument(
        "--launches",
        type=_positive,
        default=None,
        help="paired: launches per side and trial (default: per benchmark, as many rounds "
        f"of {interleave.LAUNCH_ROUND} as fit {interleave.TRIAL_BUDGET_MS:g} ms of GPU time "
        f"a side, at most {interleave.MAX_TRIAL_LAUNCHES}: short kernels get more)",
    )
    args = parser.parse_args()
    start = time.perf_counter()
    if args.side and args.side[0][0] in dict(args.inject):
        first = args.side[0][0]
        parser.error(
            f"--inject {first}=...: {first} is the first --side, the one every ratio is taken "
            "against; inject a later side"
        )
    cycles = None
    if args.inject_cycles is not None:
        fractions = [f for _, f in args.inject] + (
            [args.inject_slowdown] * bool(args.inject_slowdown)
        )
        cycles = inject.cycles_option(parser, args.inject_cycles, fractions)
    if args.side:
        sides = {name: tree.resolve() for name, tree in args.side}
        try:
            only = None if args.only is None else set(json.loads(args.only.read_text()))
            results = run_paired(
                sides, args.bench, dict(args.inject), only, args.trials, args.launches, cycles
            )
            payload = {"mode": "paired", "sides": list(sides), "results": results}
            payload["timer"] = TIMER["name"] + (f" ({TIMER['why']})" if TIMER["why"] else "")
            payload["tilelang"] = _tilelang_version()
        except Exception as err:  # a side failed to import or discover
            cause = err.__cause__ if isinstance(err, SideFailed) else err
            payload = {
                "fatal": "".join(traceback.format_exception_only(type(cause), cause)).strip()
            }
            if isinstance(err, SideFailed):
                payload["side"] = err.side  # the other sides did not fail
        payload["seconds"] = time.perf_counter() - start
        args.out.write_text(json.dumps(payload))
        return 0
    tree = args.tree.resolve()
    # The revision's own code, never this checkout's.
    sys.path.insert(0, str(tree))
    try:
        import kernels

        if not Path(kernels.__file__).resolve().is_relative_to(tree):
            raise RuntimeError(f"kernels imported from {kernels.__file__}, not from {tree}")
        if args.list:
            payload = {"names": [name for name, _, _ in discover(tree, args.bench)]}
        elif args.resources:
            only = set(json.loads(args.only.read_text())) if args.only else set()
            payload = {"resources": resources_of(tree, only)}
        else:
            only = None if args.only is None else set(json.loads(args.only.read_text()))
            payload = {"results": run(tree, args.bench, args.inject_slowdown, only, cycles)}
            payload["tilelang"] = _tilelang_version()
    except Exception as err:  # the whole side failed to import or discover
        payload = {"fatal": "".join(traceback.format_exception_only(type(err), err)).strip()}
    payload["seconds"] = time.perf_counter() - start
    args.out.write_text(json.dumps(payload))
    return 0


if __name__ == "__main__":
    sys.exit(main())
