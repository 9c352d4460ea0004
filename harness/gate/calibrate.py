"""Calibrate the gate on this GPU: measure one commit against itself several times, take
each benchmark's run-to-run spread, and derive the smallest slowdown the gate can detect
there. The gate reads the result as per-benchmark thresholds, never below its floor.

    nox -s calibrate -- [--runs 5] [--method paired] [--bench REGEX] [--gpus all]
    # writes calibration/<machine>.json (committed: CI and the gate read it from there)

``--method paired`` (the gate's default) runs the paired worker on the tree against
itself: each run gives one median ratio per benchmark, whose spread across runs is what
a one-process paired verdict must clear. ``--method process`` runs the worker once per
run, as the process gate does, and takes the spread of the run medians.

The spread is robust: the median absolute deviation (scaled to a normal sd), so one slow
run cannot set a huge threshold. And a threshold is capped (``POLICY.cap``, ``harness.policy``): a
benchmark that would need more is written as too noisy, and the gate reports it so
instead of letting a slowdown that size through. Calibration itself then fails (exit 2),
naming each such benchmark and what to fix, as it does for a benchmark that was not
measured in every run: a calibration that leaves a benchmark ungated is not a success.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import math
import statistics
import sys
from pathlib import Path

from harness.cli import EXIT_FAILURE, fraction, gpu_list, positive_int, regex
from harness.gate import decide as gd
from harness.gate import revisions
from harness.policy import POLICY

MIN_RUNS = 3  # a median absolute deviation needs a middle


def robust_spread(values: list[float]) -> float:
    """Relative spread of ``values``: the scaled median absolute deviation over the
    median, which one outlier among three or more values cannot move far."""
    if len(values) < MIN_RUNS:
        raise ValueError(f"values: need at least {MIN_RUNS} runs, got {len(values)}")
    center = statistics.median(values)
    if center <= 0:
        raise ValueError(f"values: median {center!r} is not positive")
    mad = statistics.median(abs(x - center) for x in values)
    return POLICY.robust_sd(mad) / center


def spread_and_mde(run_values: list[float], paired: bool = False) -> tuple[float, float]:
    """Run-to-run spread (``robust_spread``) and the minimum detectable slowdown
    (``POLICY.mde``). A paired run's value is already a ratio of the two sides, so its
    spread is the difference's; the process gate compares two runs' medians, whose
    difference has sd sqrt(2) * spread."""
    spread = robust_spread(run_values)
    return spread, POLICY.mde((1.0 if paired else math.sqrt(2)) * spread)


def run_value(payload: dict, name: str, method: str) -> float | None:
    """One run's value of a benchmark: the median paired ratio, or the median latency."""
    entry = payload.get("results", {}).get(name, {})
    if method == "paired":
        ratios = entry.get("ratios", {}).get("head")
        return statistics.median(ratios) if ratios else None
    samples = entry.get("track_latency")
    return statistics.median(samples) if samples else None


def summarise(
    runs: list[dict], floor: float, method: str = "process", cap: float = gd.MAX_THRESHOLD
) -> dict[str, dict]:
    """Per benchmark: spread, detectable slowdown, the threshold the gate will apply and
    whether it is too noisy to gate (a threshold over ``cap``). A paired A/A should sit at
    1; where its median ratio does not (two loads of one kernel can differ by a few
    tenths of a percent on the smallest shapes), that offset is added to what the
    threshold must clear."""
    names = {n for payload in runs for n in payload.get("results", {})}
    out = {}
    for name in sorted(names):
        values = [v for p in runs if (v := run_value(p, name, method)) is not None]
        if len(values) < MIN_RUNS:
            continue
        paired = method == "paired"
        spread, mde = spread_and_mde(values, paired=paired)
        center = statistics.median(values)
        offset = abs(center - 1.0) if paired else 0.0
        threshold = max(floor, mde + offset)
        out[name] = {
            "median": center,
            "spread": spread,
            "offset": offset,
            "mde": mde,
            "threshold": threshold,
            "too_noisy": threshold > cap,
            "runs": len(values),
        }
        launches = {
            p["results"][name].get("launches") for p in runs if name in p.get("results", {})
        }
        if launches - {None}:  # paired: launches a side per trial, as the worker chose them
            out[name]["launches"] = sorted(launches - {None})
    return out


def _skipped(entry: dict) -> bool:
    """An invalid combination (skipped on every side), not a benchmark."""
    sides = entry.get("sides")
    if sides is None:  # a process-mode entry
        return "skipped" in entry
    return bool(sides) and all("skipped" in side for side in sides.values())


def benchmark_names(runs: list[dict]) -> set[str]:
    """Every benchmark some run tried to measure, invalid combinations left out."""
    return {
        name
        for payload in runs
        for name, entry in payload.get("results", {}).items()
        if not _skipped(entry)
    }


def failures(
    benchmarks: dict[str, dict], names: set[str], runs: int, cap: float = gd.MAX_THRESHOLD
) -> list[str]:
    """Why this calibration cannot stand, one line per benchmark of ``names`` (every
    benchmark the runs saw): a threshold over ``cap`` (the gate would not gate it), or
    too few runs measured it to set one."""
    out = []
    for name in sorted(names):
        b = benchmarks.get(name)
        if b is None:
            out.append(
                f"{name}: measured in fewer than {MIN_RUNS} of {runs} runs, so it has no "
                "threshold; fix the benchmark's error (the worker's output names it) and "
                "calibrate again"
            )
        elif b["too_noisy"]:
            out.append(
                f"{name}: needs a {b['threshold']:.2%} threshold (run-to-run spread "
                f"{b['spread']:.2%}, offset {b['offset']:.2%}), above the {cap:.0%} cap, so "
                "the gate would not gate it; make its measurement quieter (a kernel timer "
                "without launch gaps, more trials or launches per trial) and calibrate again"
            )
    return out


def main(argv: list[str] | None = None) -> int:
    from harness.measure import device

    p = argparse.ArgumentParser(
        prog="nox -s calibrate --",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--runs", type=positive_int, default=5, help=f"repeated runs (>= {MIN_RUNS})")
    p.add_argument(
        "--method",
        choices=("paired", "process"),
        default="paired",
        help="calibrate the gate's paired or process measurement",
    )
    p.add_argument(
        "--bench",
        type=regex,
        default=None,
        help="regex on benchmark names (default: the suite's GATE_SUBSET)",
    )
    p.add_argument(
        "--floor", type=fraction, default=None, help="the gate's floor (default: its own)"
    )
    p.add_argument("--out", type=Path, default=None, help="default calibration/<machine>.json")
    p.add_argument(
        "--gpus",
        type=gpu_list,
        default=None,
        help="paired: 'all' or indices like 0,1: shard the benchmarks over these GPUs as the "
        "gate does (each benchmark always on the same GPU)",
    )
    args = p.parse_args(argv)
    if args.gpus is not None and args.method != "paired":
        p.error(f"--gpus={args.gpus}: needs --method paired")
    args.bench = args.bench or revisions.default_bench()
    if args.runs < MIN_RUNS:
        p.error(f"--runs={args.runs}: must be >= {MIN_RUNS} to measure a robust spread")
    floor = args.floor or (gd.PAIRED_THRESHOLD if args.method == "paired" else gd.DEFAULT_THRESHOLD)
    try:
        gpus = revisions.gpus_for(args.gpus)
    except ValueError as err:
        print(f"calibrate: error: {err}", file=sys.stderr)
        return EXIT_FAILURE
    work = revisions.ROOT / ".gate"
    work.mkdir(exist_ok=True)
    sha = revisions.resolve("HEAD")
    tree = revisions.worktree(work, "calibrate", sha)
    revisions.precompile({"tree": tree}, args.bench)
    sides = {"base": tree, "head": tree}
    names = revisions.list_names({"tree": tree}, args.bench, work) if gpus else []
    runs = []
    for i in range(args.runs):
        print(f"calibrate: run {i + 1}/{args.runs}", file=sys.stderr, flush=True)
        out_file = work / f"calibrate-{i}.json"
        if args.method == "paired" and gpus:
            tag = f"calibrate{i}"
            runs.append(revisions.paired_gpus(sides, args.bench, work, gpus, names, tag=tag))
        elif args.method == "paired":
            runs.append(revisions.run_paired(sides, args.bench, out_file))
        else:
            runs.append(revisions.run_worker(tree, args.bench, out_file))
    timer = revisions.timer_of(runs)
    benchmarks = summarise(runs, floor, args.method)
    failed = failures(benchmarks, benchmark_names(runs), args.runs)
    out = args.out or revisions.calibration_path()
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(
        json.dumps(
            {
                "gpu": device.gpu_name(),
                "commit": sha,
                "date": dt.date.today().isoformat(),
                "runs": args.runs,
                "method": args.method,
                "timer": timer,
                "floor": floor,
                "cap": gd.MAX_THRESHOLD,
                "spread": f"median absolute deviation x {POLICY.mad_to_sigma} / median",
                "z_alpha": POLICY.z_alpha,
                "z_power": POLICY.z_power,
                "benchmarks": benchmarks,
                "failures": failed,
            },
            indent=1,
        )
    )
    for name, b in benchmarks.items():
        print(
            f"{name}: spread {b['spread']:.2%}, detectable {b['mde']:.2%}, "
            f"threshold {b['threshold']:.1%}"
            + (f" TOO NOISY to gate (cap {gd.MAX_THRESHOLD:.0%})" if b["too_noisy"] else "")
        )
    print(f"timer: {timer or 'the revision timing path (process mode)'}")
    print(f"wrote {out}")
    if failed:
        print(f"calibrate: error: {len(failed)} benchmark(s) cannot be gated:", file=sys.stderr)
        for line in failed:
            print(f"  {line}", file=sys.stderr)
        return EXIT_FAILURE
    return 0


if __name__ == "__main__":
    sys.exit(main())
