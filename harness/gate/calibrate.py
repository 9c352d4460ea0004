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
import math
import statistics
import sys
from collections.abc import Mapping
from pathlib import Path

from harness.cli import EXIT_FAILURE, fraction, gate_options, gpu_list, positive_int
from harness.gate import samples as gs
from harness.policy import POLICY
from harness.revisions import calibration, fanout, git, launch, placement, records
from harness.suite import discovery

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


def run_value(run: records.Record, name: str) -> float | None:
    """One run's value of a benchmark: the median paired ratio of head, or the median
    latency of a process-mode run; None where the run did not measure it."""
    if isinstance(run, records.Fatal) or name not in run.results:
        return None
    entry = run.results[name]
    values = entry.ratios.get("head") if isinstance(entry, records.Paired) else entry.track_latency
    return statistics.median(values) if values else None


def results(run: records.Record) -> dict:
    """The per-benchmark entries of ``run`` (none for a failed run)."""
    return {} if isinstance(run, records.Fatal) else dict(run.results)


def summarise(
    runs: list[records.Record],
    floor: float,
    method: str = "process",
    cap: float = POLICY.cap,
    in_force: Mapping[str, int] | None = None,
) -> dict[str, calibration.Benchmark]:
    """Per benchmark: spread, detectable slowdown, the threshold the gate will apply and
    whether it is too noisy to gate (a threshold over ``cap``). A paired A/A should sit at
    1; where its median ratio does not (two loads of one kernel can differ by a few
    tenths of a percent on the smallest shapes), that offset is added to what the
    threshold must clear. ``in_force``: the launch scales the runs were measured at."""
    names = {n for run in runs for n in results(run)}
    out = {}
    for name in sorted(names):
        values = [v for r in runs if (v := run_value(r, name)) is not None]
        if len(values) < MIN_RUNS:
            continue
        # paired: launches a side per trial, as the worker chose them
        launches = {getattr(results(r).get(name), "launches", None) for r in runs} - {None}
        scale = (in_force or {}).get(name, 1)
        out[name] = benchmark(values, floor, method == "paired", cap, launches, scale)
    return out


def benchmark(
    values: list[float],
    floor: float,
    paired: bool,
    cap: float = POLICY.cap,
    launches=None,
    in_force: int = 1,
) -> calibration.Benchmark:
    """One benchmark's calibration from its run values (``run_value``, or a self-test's
    A/A ratios), measured at launch scale ``in_force``; paired, the scale its spread
    asks for (``Policy.launch_scale``)."""
    spread, mde = spread_and_mde(values, paired=paired)
    center = statistics.median(values)
    offset = abs(center - 1.0) if paired else 0.0
    threshold = max(floor, mde + offset)
    return calibration.Benchmark(
        median=center,
        spread=spread,
        offset=offset,
        mde=mde,
        threshold=threshold,
        too_noisy=threshold > cap,
        runs=len(values),
        launches=tuple(sorted(launches)) if launches else None,
        launch_scale=POLICY.launch_scale(spread, in_force) if paired else 1,
    )


def _skipped(entry: records.Measured | records.Paired) -> bool:
    """An invalid combination (skipped on every side), not a benchmark."""
    if isinstance(entry, records.Measured):
        return entry.skipped is not None
    sides = entry.sides.values()
    return bool(sides) and all(side.skipped is not None for side in sides)


def benchmark_names(runs: list[records.Record]) -> set[str]:
    """Every benchmark some run tried to measure, invalid combinations left out."""
    return {name for run in runs for name, entry in results(run).items() if not _skipped(entry)}


def failures(
    benchmarks: dict[str, calibration.Benchmark],
    names: set[str],
    runs: int,
    cap: float = POLICY.cap,
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
        elif b.too_noisy:
            out.append(
                f"{name}: needs a {b.threshold:.2%} threshold (run-to-run spread "
                f"{b.spread:.2%}, offset {b.offset:.2%}), above the {cap:.0%} cap, so "
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
    gate_options(p, "calibrate the gate's paired or process measurement")
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
    p.add_argument(
        "--from-selftest",
        type=Path,
        default=None,
        metavar="CHECKPOINT",
        help="no GPU work: calibrate from a paired self-test's A/A comparisons (its --resume "
        "checkpoint), each iteration one run; needs --out, and --gpu where the checkpoint "
        "does not name its GPU",
    )
    p.add_argument("--gpu", default=None, help="with --from-selftest: the GPU it ran on")
    args = p.parse_args(argv)
    if args.from_selftest is not None:
        return from_selftest(p, args)
    if args.gpus is not None and args.method != "paired":
        p.error(f"--gpus={args.gpus}: needs --method paired")
    args.bench = args.bench or discovery.gate_subset(git.ROOT)
    if args.runs < MIN_RUNS:
        p.error(f"--runs={args.runs}: must be >= {MIN_RUNS} to measure a robust spread")
    floor = args.floor or (POLICY.paired_floor if args.method == "paired" else POLICY.floor)
    try:
        gpus = placement.gpus_for(args.gpus)
    except ValueError as err:
        print(f"calibrate: error: {err}", file=sys.stderr)
        return EXIT_FAILURE
    work = git.ROOT / ".gate"
    work.mkdir(exist_ok=True)
    sha = git.resolve("HEAD")
    tree = git.worktree(work, "calibrate", sha)
    launch.precompile({"tree": tree}, args.bench)
    sides = {"base": tree, "head": tree}
    names = launch.list_names({"tree": tree}, args.bench, work) if gpus else []
    # The launch scales in force (the file this run replaces): measured at, and raised from.
    out = args.out or calibration.calibration_path()
    try:
        in_force = gs.launch_scales(out, args.method)
    except calibration.CalibrationError as err:
        print(f"calibrate: {err}; measuring at the workers' own launches", file=sys.stderr)
        in_force = {}
    scales = gs.write_launch_scales(in_force, work)
    runs = []
    for i in range(args.runs):
        print(f"calibrate: run {i + 1}/{args.runs}", file=sys.stderr, flush=True)
        out_file = work / f"calibrate-{i}.json"
        if args.method == "paired" and gpus:
            tag = f"calibrate{i}"
            got = fanout.paired_gpus(sides, args.bench, work, gpus, names, tag, launch_scale=scales)
            runs.append(got)
        elif args.method == "paired":
            runs.append(launch.run_paired(sides, args.bench, out_file, launch_scale=scales))
        else:
            runs.append(launch.run_worker(tree, args.bench, out_file))
    timer = fanout.timer_of(runs)
    benchmarks = summarise(runs, floor, args.method, in_force=in_force)
    failed = failures(benchmarks, benchmark_names(runs), args.runs)
    record = calibration.Calibration(
        method=args.method,
        benchmarks=benchmarks,
        gpu=device.gpu_name(),
        commit=sha,
        date=dt.date.today().isoformat(),
        runs=args.runs,
        timer=timer,
        floor=floor,
        cap=POLICY.cap,
        spread=f"median absolute deviation x {POLICY.mad_to_sigma} / median",
        z_alpha=POLICY.z_alpha,
        z_power=POLICY.z_power,
        failures=tuple(failed),
    )
    return write_and_report(out, record, timer)


def write_and_report(out: Path, record: calibration.Calibration, timer: str | None) -> int:
    """Write ``record`` to ``out`` and print each benchmark's line; exit 2 where a
    benchmark cannot be gated (``record.failures``)."""
    calibration.write(out, record)
    for name, b in record.benchmarks.items():
        print(
            f"{name}: spread {b.spread:.2%}, detectable {b.mde:.2%}, "
            f"threshold {b.threshold:.1%}"
            + (f", launches per trial x{b.launch_scale}" if b.launch_scale > 1 else "")
            + (f" TOO NOISY to gate (cap {POLICY.cap:.0%})" if b.too_noisy else "")
        )
    print(f"timer: {timer or 'the revision timing path (process mode)'}")
    print(f"wrote {out}")
    if record.failures:
        count = len(record.failures)
        print(f"calibrate: error: {count} benchmark(s) cannot be gated:", file=sys.stderr)
        for line in record.failures:
            print(f"  {line}", file=sys.stderr)
        return EXIT_FAILURE
    return 0


def from_selftest(p: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    """``--from-selftest``: each finished A/A comparison of a paired self-test is one
    calibration run (the median of its per-trial ratios, what ``run_value`` reads of a
    paired run), so a 20-iteration self-test gives 20 runs where ``--runs 5`` gives five,
    with no GPU work. On the H200, five runs put ``Tuned(decode64, bf16)``'s spread at
    0.08%; its 15 A/A comparisons in a self-test, at 0.28%."""
    from harness.gate.selftest_state import aa_ratios

    if args.out is None:
        p.error("--from-selftest: give --out (calibration/<machine>.json)")
    try:
        settings, gpu, ratios = aa_ratios(args.from_selftest)
    except ValueError as err:
        p.error(f"--from-selftest={err}")
    if settings.get("method") != "paired":
        p.error(f"--from-selftest: the self-test measured {settings.get('method')!r}, not paired")
    gpu = args.gpu or gpu
    if gpu is None:
        p.error("--gpu: the checkpoint does not name its GPU; give it (e.g. 'NVIDIA H200')")
    floor = args.floor or POLICY.paired_floor
    runs = max((len(v) for v in ratios.values()), default=0)
    # The launch scales the self-test's workers ran at (its checkpoint keeps them).
    in_force = settings["launch_scales"]
    benchmarks = {
        name: benchmark(values, floor, paired=True, in_force=in_force.get(name, 1))
        for name, values in sorted(ratios.items())
        if len(values) >= MIN_RUNS
    }
    record = calibration.Calibration(
        method="paired",
        benchmarks=benchmarks,
        gpu=gpu,
        commit=settings.get("commit"),
        date=dt.date.today().isoformat(),
        runs=runs,
        timer=None,
        floor=floor,
        cap=POLICY.cap,
        spread=f"median absolute deviation x {POLICY.mad_to_sigma} / median "
        f"(A/A comparisons of a self-test: {args.from_selftest.name})",
        z_alpha=POLICY.z_alpha,
        z_power=POLICY.z_power,
        failures=tuple(failures(benchmarks, set(ratios), runs)),
    )
    return write_and_report(args.out, record, "the self-test's (its record names it)")


if __name__ == "__main__":
    sys.exit(main())
