"""Calibrate the gate on this GPU: run the suite's GPU tracks repeatedly on one commit,
measure each benchmark's run-to-run spread, and derive the smallest slowdown the gate can
detect there. The gate reads the result as per-benchmark thresholds (never below its floor).

    nox -s calibrate -- [--runs 5] [--bench REGEX]    # writes calibration/<machine>.json
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import math
import statistics
import sys
from pathlib import Path

from harness.cli import EXIT_FAILURE, fraction, positive_int, regex
from harness.gate import decide as gd
from harness.gate import revisions

# Two-sided significance of the gate (asv's Mann-Whitney p < 0.002) and 90% power.
Z_ALPHA = 3.09
Z_POWER = 1.28


def spread_and_mde(
    run_medians: list[float], z_alpha: float = Z_ALPHA, z_power: float = Z_POWER
) -> tuple[float, float]:
    """Run-to-run spread (coefficient of variation of the per-run medians) and the minimum
    detectable slowdown: the difference of two runs' medians has sd sqrt(2)*spread, and a
    shift must clear the significance quantile plus the power quantile of that sd."""
    if len(run_medians) < 2:
        raise ValueError(f"run_medians: need at least 2 runs, got {len(run_medians)}")
    spread = statistics.stdev(run_medians) / statistics.fmean(run_medians)
    return spread, (z_alpha + z_power) * math.sqrt(2) * spread


def summarise(runs: list[dict], floor: float) -> dict[str, dict]:
    """Per benchmark: spread, detectable slowdown and the threshold the gate will apply."""
    names = {n for payload in runs for n in payload.get("results", {})}
    out = {}
    for name in sorted(names):
        medians = [
            statistics.median(p["results"][name]["track_latency"])
            for p in runs
            if "track_latency" in p.get("results", {}).get(name, {})
        ]
        if len(medians) < 2:
            continue
        spread, mde = spread_and_mde(medians)
        out[name] = {
            "median_s": statistics.median(medians),
            "spread": spread,
            "mde": mde,
            "threshold": max(floor, mde),
            "runs": len(medians),
        }
    return out


def main(argv: list[str] | None = None) -> int:
    from harness.measure import device

    p = argparse.ArgumentParser(
        prog="nox -s calibrate --",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--runs", type=positive_int, default=5, help="repeated runs (>= 2)")
    p.add_argument(
        "--bench",
        type=regex,
        default=None,
        help="regex on benchmark names (default: the suite's GATE_SUBSET)",
    )
    p.add_argument("--floor", type=fraction, default=gd.DEFAULT_THRESHOLD, help="the gate's floor")
    p.add_argument("--out", type=Path, default=None, help="default calibration/<machine>.json")
    args = p.parse_args(argv)
    args.bench = args.bench or revisions.default_bench()
    if args.runs < 2:
        p.error(f"--runs={args.runs}: must be >= 2 to measure a spread")
    reason = device.no_gpu_reason()
    if reason:
        print(f"calibrate: error: needs a CUDA GPU: {reason}", file=sys.stderr)
        return EXIT_FAILURE
    work = revisions.ROOT / ".gate"
    work.mkdir(exist_ok=True)
    sha = revisions.resolve("HEAD")
    tree = revisions.worktree(work, "calibrate", sha)
    runs = []
    for i in range(args.runs):
        print(f"calibrate: run {i + 1}/{args.runs}", file=sys.stderr, flush=True)
        runs.append(revisions.run_worker(tree, args.bench, work / f"calibrate-{i}.json"))
    benchmarks = summarise(runs, args.floor)
    out = args.out or revisions.calibration_path()
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(
        json.dumps(
            {
                "gpu": device.gpu_name(),
                "commit": sha,
                "date": dt.date.today().isoformat(),
                "runs": args.runs,
                "floor": args.floor,
                "z_alpha": Z_ALPHA,
                "z_power": Z_POWER,
                "benchmarks": benchmarks,
            },
            indent=1,
        )
    )
    for name, b in benchmarks.items():
        print(
            f"{name}: spread {b['spread']:.2%}, detectable {b['mde']:.2%}, "
            f"threshold {b['threshold']:.1%}"
        )
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
