"""What every mode of the gate's worker shares: this checkout's modules loaded by path,
the revision's own modules found by name, discovery of the suite's GPU combinations and
the one walk that builds them (``prepare``), the paired timer, the GPU reading of a
benchmark, and writing the mode's record.

The worker's entry points (``process.py``, ``paired.py``, ``listing.py``,
``resources.py``) run as scripts from the gate's checkout, so this folder comes first on
``sys.path``: no module here shares a name with the standard library. The revision being
measured then goes first, and its harness may be laid out differently from this one, so
the gate's own modules are loaded by file path under private names (``load_by_path``).
"""

import argparse
import importlib
import importlib.util
import statistics
import sys
import time
import traceback
from dataclasses import replace
from pathlib import Path

HERE = Path(__file__).resolve().parent
HARNESS = HERE.parent.parent
TRACKS = ("track_latency", "track_vs_torch")


def load_by_path(name: str, path: Path):
    """A module of this (the gate's) checkout, loaded by file path under a private name:
    the tree on ``sys.path`` is the revision under test, whose harness may be laid out
    differently."""
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up by name
    spec.loader.exec_module(module)
    return module


discovery = load_by_path("_gate_discovery", HARNESS / "suite" / "discovery.py")
interleave = load_by_path("_gate_interleave", HARNESS / "measure" / "interleave.py")
inject = load_by_path("_gate_inject", HARNESS / "gate" / "inject.py")
records = load_by_path("_gate_records", HARNESS / "revisions" / "records.py")
device = load_by_path("_gate_device", HARNESS / "measure" / "device.py")


def tree_module(*names: str):
    """The first of ``names`` the revision under test has: a module moved between
    revisions (``harness.measure.timing`` was ``harness.timing``)."""
    for name in names[:-1]:
        try:
            return importlib.import_module(name)
        except ModuleNotFoundError as err:
            if err.name is None or not name.startswith(err.name):
                raise
    return importlib.import_module(names[-1])


def use_tree(tree: Path) -> None:
    """Put ``tree`` first on ``sys.path``, so the suite, the kernels and the timing path
    all come from the revision being measured, never from this checkout."""
    sys.path.insert(0, str(tree))
    import kernels

    if not Path(kernels.__file__).resolve().is_relative_to(tree):
        raise RuntimeError(f"kernels imported from {kernels.__file__}, not from {tree}")


def discover(tree: Path, pattern: str | None):
    """(name, family, params) of every GPU combination of the suite in ``tree`` that
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
                found.append((name, family, params))
    return found


def prepare(family, params) -> dict:
    """One combination of the revision on ``sys.path``, built by discovery's walk
    (``discovery.combination``, ``discovery.build`` through that revision's operator
    registry): ``{"data": inputs (the operator's, seed 0), "config": config, "bind":
    inputs -> launch, "key": (operator, shape id)}``. A suite from before the operator
    contract (its families have no ``combination``) builds by its own ``prepare``:
    ``{"data": its inputs, "config": config}``. An invalid combination raises
    ``NotImplementedError`` with the rule; a failed build, the error naming it."""
    bench = family.cls()
    if not hasattr(bench, "combination"):
        if not hasattr(bench, "prepare"):
            raise RuntimeError("paired mode needs a suite with prepare(); use --method process")
        data, config = bench.prepare(*params)
        return {"data": data, "config": config}
    combo = discovery.combination(family, params)
    bind = discovery.build(combo)
    data = discovery.operator_of(combo).inputs(combo.shape, 0)
    return {
        "data": data,
        "config": combo.config,
        "bind": bind,
        "key": (combo.operator, combo.shape.id),
    }


def tree_median_ms(fn, repeat: int = 5) -> float:
    """Median of ``repeat`` launches on the timing path of the revision under test."""
    measure = tree_module("harness.measure.timing", "harness.timing").measure
    return measure(fn, warmup=1, repeat=repeat).median_ms


def open_nvml():
    """The revision's NVML reader (None where there is none)."""
    return tree_module("harness.measure.gpu_state", "harness.gpu_state").open_nvml()


# The paired loop's timer: each kernel's own time from CUPTI's records, or CUDA events
# where this process cannot record kernel activity (said once, and in the record).
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


def timer_text() -> str:
    return TIMER["name"] + (f" ({TIMER['why']})" if TIMER["why"] else "")


def paired_median_ms(fn, launches: int = 5) -> float:
    """Median of a few launches timed as the paired loop times them."""
    return statistics.median(paired_times([fn], trials=1, launches=launches)[0][0])


def paired_trials(fns, trials: int, launches: int):
    """The paired gate's trials: ``fns`` launched in turn (``paired_times``), ``trials``
    trials of ``launches`` launches a side; ``(ms, ratios)``, the latencies and each
    side's per-trial ratios to the first side (``interleave.trial_ratios``). The gate's
    comparison and the injection's calibration both measure through this."""
    ms = paired_times(fns, trials=trials, launches=launches)
    return ms, interleave.trial_ratios(ms)


def gpu_of(state):
    """The GPU's state while a benchmark's launches ran, for the record: the clock the
    kernels ran at (the highest reading), the lowest, and a throttle warning only where
    the readings taken at work clocks say so."""
    return records.Gpu(
        sm_mhz=state.sm_clock_mhz,
        sm_mhz_min=getattr(state, "min_sm_clock_mhz", None),
        throttle=state.throttled(),
    )


def error_line(err: BaseException) -> str:
    return traceback.format_exception_only(type(err), err)[-1].strip()


def tilelang_version() -> str | None:
    """The TileLang this process imported (the dependency A/B checks it per side)."""
    module = sys.modules.get("tilelang")
    return getattr(module, "__version__", None) if module is not None else None


class SideFailed(Exception):
    """One side of a paired run failed as a whole (its suite does not import or list)."""

    def __init__(self, side: str):
        super().__init__(side)
        self.side = side


def fatal(err: BaseException):
    """The record of a run that failed as a whole: a paired side's failure names it."""
    cause = err.__cause__ if isinstance(err, SideFailed) else err
    why = "".join(traceback.format_exception_only(type(cause), cause)).strip()
    return records.Fatal(why, side=err.side if isinstance(err, SideFailed) else None)


def write(out: Path, make) -> int:
    """Write the record ``make()`` gives to ``out`` (``records.to_json``), or the
    ``Fatal`` one where it raises, with the seconds it took; exit status 0 either way (the
    record says what failed)."""
    start = time.perf_counter()
    try:
        record = make()
    except Exception as err:  # the whole run failed: its record says why
        record = fatal(err)
    out.write_text(records.to_json(replace(record, seconds=time.perf_counter() - start)))
    return 0


def named(text: str, what: str, convert):
    name, sep, value = text.partition("=")
    if not sep or not name or not value:
        raise argparse.ArgumentTypeError(f"{text!r}: must be NAME={what}")
    try:
        return name, convert(value)
    except ValueError as err:
        raise argparse.ArgumentTypeError(f"{text!r}: {err}") from None


def fraction(text: str) -> float:
    value = float(text)
    if not 0 < value < 1:
        raise ValueError(f"{value} must be a fraction between 0 and 1")
    return value


def positive(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"{text!r} must be an integer >= 1")
    return int(text)


def parser(doc: str, bench: bool = True) -> argparse.ArgumentParser:
    """An entry point's parser with the options every mode takes."""
    p = argparse.ArgumentParser(description=doc)
    p.add_argument("--out", type=Path, required=True, help="where to write the record")
    if bench:
        p.add_argument("--bench", default=None, help="regex on asv or gate names")
    return p


def only_option(p: argparse.ArgumentParser, help: str) -> None:
    p.add_argument("--only", type=Path, default=None, help=help)


def names_in(path: Path | None) -> set[str] | None:
    """The combination names of an ``--only`` file (a JSON list); None without one."""
    import json

    return None if path is None else set(json.loads(path.read_text()))
