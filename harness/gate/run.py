"""The PR performance gate: BASE against HEAD on one GPU, with a verdict.

    nox -s gate -- BASE HEAD [--method auto] [--threshold T] [--bench REGEX]
    python -m harness.gate BASE HEAD ...

Each side gets a git worktree, so its suite and kernels come from its own revision, and
both sides' kernels are compiled at once before anything is timed. Then, by ``--method``:

- ``paired`` (the default when the change leaves the measuring code alone): one process
  builds both revisions' kernels, each with its own suite's code, and launches them in
  turn, launch by launch, so clock and power drift reach both alike. A verdict reads the
  per-trial ratios head/base (threshold 1%).
- ``process`` (the default when head changes ``harness/measure/``, whose timing the
  paired loop would bypass, or when base predates paired measurement): rounds alternate
  the sides (base, head, then head, base, ...), each side's GPU tracks in a fresh process
  with its own timing path; the samples are pooled and checked against torch.matmul
  measured beside them (threshold 2%).

For each regression, the report adds the kernels' compiled resources, base -> head. Exit
status: 0 nothing regressed, 1 a confirmed regression, 2 a benchmark failed to build or
run (or the gate itself could not run).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from harness.cli import EXIT_FAILURE, fraction, gpu_list, output_dir, positive_int, regex
from harness.gate import decide as gd
from harness.gate import samples as gs
from harness.report.gate import render_markdown
from harness.revisions import fanout, git, launch, placement, records
from harness.revisions.calibration import calibration_path
from harness.suite import discovery

METHODS = ("auto", "paired", "process")
# A change here alters how samples are taken; the paired loop would not run it.
MEASURING_CODE = ("harness/measure/",)
DEFAULT_ROUNDS = {"paired": 1, "process": 3}
THRESHOLDS = {"paired": gd.PAIRED_THRESHOLD, "process": gd.DEFAULT_THRESHOLD}


def add_comparison_options(p: argparse.ArgumentParser) -> None:
    """The options of one gate comparison, shared by the gate and bisect: the same rule
    under the same names."""
    p.add_argument(
        "-b",
        "--bench",
        type=regex,
        default=None,
        help="regex on asv or gate names (default: the suite's GATE_SUBSET)",
    )
    p.add_argument(
        "--method",
        choices=METHODS,
        default="auto",
        help="paired (both revisions in one process, launches in turn), process (one "
        "process per side and round) or auto (paired unless head changes the measuring "
        "code)",
    )
    p.add_argument(
        "--rounds",
        type=positive_int,
        default=None,
        help="paired: worker processes (default 1); process: rounds per side (default 3)",
    )
    p.add_argument(
        "--threshold",
        type=fraction,
        default=None,
        help="slowdown that counts, the floor under calibrated thresholds (default: 0.01 "
        "paired, 0.02 process)",
    )
    p.add_argument(
        "--gpus",
        type=gpu_list,
        default=None,
        help="'all' or indices like 0,1: shard the benchmarks over these GPUs",
    )
    p.add_argument(
        "--calibration",
        type=Path,
        default=None,
        help="per-benchmark thresholds (default: calibration/<machine>.json when present)",
    )


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="nox -s gate --",
        description="Compare the GEMM GPU tracks of two git revisions on this GPU.",
        epilog="Exit: 0 no regression, 1 regression, 2 a failed benchmark or gate.",
    )
    p.add_argument("base", help="base revision (e.g. origin/main)")
    p.add_argument("head", help="head revision (e.g. HEAD)")
    add_comparison_options(p)
    p.add_argument(
        "--out",
        type=output_dir,
        default=git.ROOT / ".gate",
        help="work and report folder (checked writable before any GPU work)",
    )
    return p


def choose_method(requested: str, shas: dict[str, str], cwd: Path = git.ROOT) -> tuple[str, str]:
    """(method, why) for ``--method requested``: auto takes paired unless head changes
    the measuring code or base's suite cannot build a kernel apart from timing it."""
    if requested != "auto":
        return requested, "as asked"
    touched = [
        f
        for f in git.changed_files(shas["base"], shas["head"], cwd)
        if f.startswith(MEASURING_CODE)
    ]
    if touched:
        return "process", f"head changes the measuring code ({', '.join(touched[:3])})"
    if not git.has_prepare(shas["base"], cwd):
        return "process", "base's suite predates paired measurement"
    return "paired", "the change leaves the measuring code alone"


@dataclass(frozen=True)
class Comparison:
    """One gate comparison of two commits: the verdicts, the raw rounds and the report."""

    verdicts: list[gd.Verdict]
    rounds: list  # per round: {side: record} (process) or one record (paired)
    report: str
    method: str = "process"
    resources: dict | None = None

    @property
    def code(self) -> int:
        return gd.exit_code(self.verdicts)


def measure_paired(
    trees: dict[str, Path],
    bench: str,
    rounds: int,
    out: Path,
    gpus: list[int] | None,
    log=print,
    scales: Path | None = None,
) -> list[records.Record]:
    """``rounds`` paired worker processes (sharded over ``gpus`` when given); ``scales``,
    the calibration's launch scales (``samples.write_launch_scales``)."""
    names = launch.list_names(trees, bench, out) if gpus else []
    runs = []
    for r in range(rounds):
        log(f"gate: paired run {r + 1}/{rounds}")
        if gpus:
            tag = f"pair{r}"
            got = fanout.paired_gpus(trees, bench, out, gpus, names, tag, launch_scale=scales)
        else:
            got = launch.run_paired(trees, bench, out / f"pair-{r}.json", launch_scale=scales)
        runs.append(got)
    return runs


def evidence(
    trees: dict[str, Path], verdicts: list[gd.Verdict], out: Path, log=print
) -> dict[str, dict]:
    """``{side: {name: resources}}`` of every regressed benchmark, each side's kernels
    built for sm_90a by its own revision (both sides at once)."""
    flagged = [v.name for v in verdicts if v.status == gd.REGRESSION]
    if not flagged:
        return {}
    log(f"gate: compiled resources of {len(flagged)} regressed benchmark(s), both sides")
    with ThreadPoolExecutor(len(trees)) as pool:
        got = pool.map(
            lambda side: launch.resources(trees[side], flagged, out / f"resources-{side}.json"),
            trees,
        )
        return {
            side: dict(r.resources) if isinstance(r, records.Resources) else {"fatal": r.fatal}
            for side, r in zip(trees, got, strict=True)
        }


def compare(
    shas: dict[str, str],
    bench: str,
    rounds: int | None,
    out: Path,
    threshold: float | None = None,
    gpus: list[int] | None = None,
    calibration: Path | None = None,
    log=print,
    method: str = "auto",
) -> Comparison:
    """Measure ``shas["base"]`` against ``shas["head"]`` (each in its own worktree under
    ``out``) by ``method`` and judge them; the gate's whole rule, shared with bisect."""
    from harness.measure import device

    start = time.perf_counter()
    method, why = choose_method(method, shas)
    rounds = rounds or DEFAULT_ROUNDS[method]
    threshold = THRESHOLDS[method] if threshold is None else threshold
    log(f"gate: method {method} ({why})")
    trees = {side: git.worktree(out, side, sha) for side, sha in shas.items()}
    compile_start = time.perf_counter()
    launch.precompile(trees, bench, log=log)
    compile_s = time.perf_counter() - compile_start
    calibration = calibration or calibration_path()
    scaled = gs.launch_scales(calibration, method)
    if method == "paired":
        scales = gs.write_launch_scales(scaled, out)
        measured = measure_paired(trees, bench, rounds, out, gpus, log, scales)
        samples = gs.pool_paired(measured)
        how = f"paired: both revisions in {rounds} process(es), kernels launched in turn"
    else:
        if gpus is None:
            measured = fanout.interleave(trees, bench, rounds, out, log=log)
        else:
            measured = fanout.interleave_gpus(trees, bench, rounds, out, gpus, log=log)
        samples = gs.pool(measured)
        how = f"process: {rounds} rounds, interleaved, one fresh process per side per round"
    thresholds = gs.thresholds(calibration, method)
    verdicts = gd.decide_all(samples, threshold=threshold, thresholds=thresholds)
    found = evidence(trees, verdicts, out, log)
    context = {
        "GPU": device.gpu_name(),
        "versions": ", ".join(f"{k} {v}" for k, v in device.versions().items()),
        "method": f"{how} ({why})",
        "GPU state": gs.gpu_summary(gs.runs_of(measured, method)),
        "thresholds": (
            f"per benchmark from {calibration.name}, floor {threshold:.0%}, "
            f"cap {gd.MAX_THRESHOLD:.0%}"
            if thresholds
            else f"{threshold:.0%} for all (no {method} calibration file)"
        ),
        "wall time": f"{time.perf_counter() - start:.0f} s (compile {compile_s:.0f} s)",
    }
    if scaled:
        named = ", ".join(f"{name} x{k}" for name, k in sorted(scaled.items()))
        context["launches"] = f"more per trial for noisy benchmarks ({calibration.name}): {named}"
    report = render_markdown(
        verdicts,
        passed=not gd.exit_code(verdicts),
        base_label=f"base {shas['base'][:10]}",
        head_label=f"head {shas['head'][:10]}",
        context=context,
        resources=found,
    )
    return Comparison(verdicts, measured, report, method, found)


def write_report(out: Path, report: str, rounds: list) -> None:
    """``report.md`` and ``samples.json`` in ``out``, the report on stdout and, in a
    GitHub job, in its step summary."""
    (out / "report.md").write_text(report)
    (out / "samples.json").write_text(json.dumps(gs.rounds_json(rounds)))
    summary = os.environ.get("GITHUB_STEP_SUMMARY")
    if summary:
        with open(summary, "a") as fh:
            fh.write(report + "\n")
    print(report)


def main(argv: list[str] | None = None) -> int:
    """The gate's exit status is this process's: nox passes it on as it is."""
    args = build_parser().parse_args(argv)
    log = lambda line: print(line, file=sys.stderr, flush=True)  # noqa: E731
    if args.calibration is not None and not args.calibration.is_file():
        print(f"gate: error: --calibration={args.calibration}: no such file", file=sys.stderr)
        return EXIT_FAILURE
    try:
        shas = {
            "base": git.resolve(args.base, "BASE"),
            "head": git.resolve(args.head, "HEAD"),
        }
        bench = args.bench or discovery.gate_subset(git.ROOT)
    except (git.RevisionError, RuntimeError) as err:
        print(f"gate: error: {err}", file=sys.stderr)
        return EXIT_FAILURE
    try:
        gpus = placement.gpus_for(args.gpus)
    except ValueError as err:
        print(f"gate: error: {err}", file=sys.stderr)
        return EXIT_FAILURE
    out = args.out.resolve()
    result = compare(
        shas, bench, args.rounds, out, args.threshold, gpus, args.calibration, log, args.method
    )
    if not result.verdicts:
        print(f"gate: error: no benchmark matched --bench {bench!r}", file=sys.stderr)
        return EXIT_FAILURE
    write_report(out, result.report, result.rounds)
    return result.code


if __name__ == "__main__":
    sys.exit(main())
