"""Run the GPU tracks of one revision's asv suite in this process and write their samples.

The gate starts this file as a script from its own checkout, with ``--tree`` pointing at
a worktree of the revision under test. That tree goes first on ``sys.path``, so the suite,
the kernels and the timing path all come from the revision being measured; only this
loop is the gate's: per combination, the suite's own one-combination ``measure`` (the
code its asv ``setup_cache`` runs), then an NVML reading.

    python harness/gate/worker.py --tree WORKTREE --out samples.json [--bench REGEX]
"""

import argparse
import importlib
import json
import re
import sys
import time
import traceback
from functools import partial
from pathlib import Path

TRACKS = ("track_latency", "track_vs_torch")


def _load_discovery():
    """The suite walker from this (the gate's) checkout, loaded by file path: the tree on
    ``sys.path`` is the revision under test, whose harness may be laid out differently."""
    import importlib.util

    path = Path(__file__).resolve().parent.parent / "suite" / "discovery.py"
    spec = importlib.util.spec_from_file_location("_gate_discovery", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up by name
    spec.loader.exec_module(module)
    return module


discovery = _load_discovery()


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
    """(name, class, params) of every GPU combination of the suite in ``tree`` whose name
    matches ``pattern``."""
    found = []
    for family in discovery.families(tree):
        if not family.has_tracks(TRACKS):
            continue
        for params in family.combinations():
            name = family.combination_name(params)
            if pattern is None or re.search(pattern, name):
                found.append((name, family.cls, params))
    return found


def sleep_cycles_per_ms() -> float:
    """GPU clock cycles that ``torch.cuda._sleep`` spins per millisecond, measured now on
    the project's one timing path."""
    import torch

    measure = _tree_module("harness.measure.timing", "harness.timing").measure
    cycles = 2_000_000
    return cycles / measure(lambda: torch.cuda._sleep(cycles), warmup=1, repeat=5).median_ms


def inject_slowdown(bench, fraction: float, cycles_per_ms: float, entry: dict) -> None:
    """Test-only (``--inject-slowdown``, used by the gate self-test): every timed launch of
    this benchmark's kernel also spins the GPU for ``fraction`` of the kernel's median
    latency, on the same stream, inside the timed region. Only this instance's
    ``prepare`` is wrapped, and it hands ``measure`` a copy of the shared inputs whose
    kernel launch is slowed: the suite's code and other combinations are untouched.
    The added milliseconds go to ``entry["injected_ms"]``."""
    import copy

    import torch

    prepare = bench.prepare

    def slowed_prepare(*params):
        data, config = prepare(*params)
        base_ms = data.time_tilelang(config, warmup=5, repeat=20).median_ms
        entry["injected_ms"] = fraction * base_ms
        cycles = max(1, int(entry["injected_ms"] * cycles_per_ms))

        def slowed_fn(cfg):
            fn = data.tilelang_fn(cfg)
            return lambda: (fn(), torch.cuda._sleep(cycles))

        slowed = copy.copy(data)
        slowed.tilelang_fn = slowed_fn
        return slowed, config

    bench.prepare = slowed_prepare


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


def run(tree: Path, pattern: str | None, inject: float = 0.0, only: set[str] | None = None) -> dict:
    open_nvml = _tree_module("harness.measure.gpu_state", "harness.gpu_state").open_nvml
    nvml = open_nvml()
    cycles_per_ms = sleep_cycles_per_ms() if inject else 0.0
    results = {}
    for name, cls, params in discover(tree, pattern):
        if only is not None and name not in only:
            continue  # another GPU's shard
        entry: dict = {}
        try:
            bench = cls()
            if inject:
                if not hasattr(bench, "prepare"):
                    raise RuntimeError("--inject-slowdown needs a suite with prepare/measure")
                inject_slowdown(bench, inject, cycles_per_ms, entry)
            if nvml is None:
                entry.update(measure(bench, params))
            else:  # the GPU's state while this benchmark ran, not after it
                samples, state = nvml.during(partial(measure, bench, params), interval_s=0.01)
                entry.update(samples)
                entry["gpu"] = {"sm_mhz": state.sm_clock_mhz, "throttle": state.throttled()}
        except NotImplementedError as skip:
            entry = {"skipped": str(skip)}
        except Exception as err:  # recorded per benchmark; the gate reports it (exit 2)
            last = traceback.format_exception_only(type(err), err)[-1].strip()
            entry = {"error": last[:500]}
        results[name] = entry
        status = "error" if "error" in entry else "skipped" if "skipped" in entry else "ok"
        print(f"  {name}: {status}", file=sys.stderr, flush=True)
    return results


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--tree", type=Path, required=True, help="worktree of the revision")
    parser.add_argument("--out", type=Path, required=True, help="where to write the samples")
    parser.add_argument("--bench", default=None, help="regex on combination names")
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
        "--inject-slowdown",
        type=float,
        default=0.0,
        metavar="FRACTION",
        help="test-only: add GPU work of this fraction of each kernel's latency (self-test)",
    )
    args = parser.parse_args()
    tree = args.tree.resolve()
    # The revision's own code, never this checkout's.
    here = Path(__file__).resolve().parent
    sys.path[:] = [str(tree)] + [p for p in sys.path if Path(p or ".").resolve() != here]
    start = time.perf_counter()
    try:
        import kernels

        if not Path(kernels.__file__).resolve().is_relative_to(tree):
            raise RuntimeError(f"kernels imported from {kernels.__file__}, not from {tree}")
        if args.list:
            payload = {"names": [name for name, _, _ in discover(tree, args.bench)]}
        else:
            only = None if args.only is None else set(json.loads(args.only.read_text()))
            payload = {"results": run(tree, args.bench, args.inject_slowdown, only)}
    except Exception as err:  # the whole side failed to import or discover
        payload = {"fatal": "".join(traceback.format_exception_only(type(err), err)).strip()}
    payload["seconds"] = time.perf_counter() - start
    args.out.write_text(json.dumps(payload))
    return 0


if __name__ == "__main__":
    sys.exit(main())
