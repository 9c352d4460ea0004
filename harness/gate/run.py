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
from harness.gate import revisions
from harness.gate.render import render_markdown

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
        default=revisions.ROOT / ".gate",
        help="work and report folder (checked writable before any GPU work)",
    )
    return p


def gpu_summary(rounds: list[dict]) -> str:
    """SM clocks and throttling the workers saw right after each benchmark."""
    clocks, throttled, readings = [], [], 0
    # A process-mode round is {side: payload}; a paired run is one payload.
    payloads = [p for r in rounds for p in (r.values() if "results" not in r else [r])]
    for payload in payloads:
        if isinstance(payload, dict):
            for entry in payload.get("results", {}).values():
                gpu = entry.get("gpu")
                if gpu:
                    readings += 1
                    clocks.append(gpu["sm_mhz"])
                    if gpu["throttle"]:
                        throttled.append(gpu["throttle"])
    if not readings:
        return "no NVML readings"
    seen = (
        "none"
        if not throttled
        else f"{len(throttled)} of {readings} ({', '.join(sorted(set(throttled)))})"
    )
    return f"SM clock {min(clocks)}-{max(clocks)} MHz over {readings} readings; throttling: {seen}"


def load_calibration(
    path: Path | None, method: str = "process", floor: float | None = None
) -> dict[str, float]:
    """Per-benchmark thresholds from ``nox -s calibrate`` for ``method``
    (``{"method": m, "benchmarks": {name: {"threshold": x}}}``; a file without a method
    is from process-mode calibration). A file's thresholds hold its own floor; with
    ``floor`` (a caller's lower floor, the self-test's ``--threshold``) each is what the
    noise alone asks for (``mde + offset``), which the caller floors again."""
    if path is None or not path.exists():
        return {}
    data = json.loads(path.read_text())
    if data.get("method", "process") != method:
        return {}
    benchmarks = data.get("benchmarks", {})

    def one(v: dict) -> float:
        if floor is None or "mde" not in v:
            return float(v["threshold"])
        return max(floor, float(v["mde"]) + float(v.get("offset", 0.0)))

    return {name: one(v) for name, v in benchmarks.items()}


def pool(rounds: list[dict[str, dict]]) -> list[gd.BenchSamples]:
    """Pool per-round worker output ``{"base": payload, "head": payload}`` into samples."""
    names: dict[str, None] = {}
    for r in rounds:
        for side in ("base", "head"):
            names.update(dict.fromkeys(r[side].get("results", {})))
    out = []
    for name in names:
        acc = {"base": [], "head": [], "base_rel": [], "head_rel": []}
        errors, skipped = [], False
        absent = {"base": 0, "head": 0}
        for r in rounds:
            for side in ("base", "head"):
                payload = r[side]
                if "fatal" in payload:
                    errors.append(f"{side}: {payload['fatal']}")
                    continue
                entry = payload["results"].get(name)
                if entry is None:
                    absent[side] += 1
                elif "error" in entry:
                    errors.append(f"{side}: {entry['error']}")
                elif "skipped" in entry:
                    skipped = True
                else:
                    acc[side] += entry["track_latency"]
                    acc[f"{side}_rel"] += entry["track_vs_torch"]
        if skipped and not errors and not acc["base"] and not acc["head"]:
            continue  # invalid on both sides: not a benchmark
        # Absent from every round of one side: added or removed by the change. Absent from
        # some rounds only: that side's runs disagree, which is a failure.
        missing = next((side for side in absent if absent[side] == len(rounds)), None)
        for side, count in absent.items():
            if 0 < count < len(rounds):
                errors.append(f"{side}: benchmark missing from {count} of {len(rounds)} rounds")
        error = "; ".join(dict.fromkeys(errors)) or None
        out.append(
            gd.BenchSamples(
                name=name, error=error, missing=missing, **{k: tuple(v) for k, v in acc.items()}
            )
        )
    return out


def pool_paired(
    rounds: list[dict], ref: str = "base", other: str = "head"
) -> list[gd.BenchSamples]:
    """Pool paired worker payloads (one per process) into samples of ``other`` against
    ``ref``: latencies of both, and ``other``'s per-trial ratios to ``ref``."""
    names: dict[str, None] = {}
    for payload in rounds:
        names.update(dict.fromkeys(payload.get("results", {})))
    out = []
    for name in names:
        acc = {ref: [], other: []}
        ratios: list[float] = []
        errors, skipped = [], False
        absent = {ref: 0, other: 0}
        for payload in rounds:
            if "fatal" in payload:
                errors.append(payload["fatal"])
                continue
            entry = payload["results"].get(name, {"sides": {}})
            for side in (ref, other):
                got = entry["sides"].get(side)
                if got is None:
                    absent[side] += 1
                elif "error" in got:
                    errors.append(f"{side}: {got['error']}")
                elif "skipped" in got:
                    skipped = True
                else:
                    acc[side] += got["latency"]
            ratios += entry.get("ratios", {}).get(other, [])
        if skipped and not errors and not acc[ref] and not acc[other]:
            continue  # invalid on both sides: not a benchmark
        missing = next((side for side in absent if absent[side] == len(rounds)), None)
        label = {ref: "base", other: "head"}
        for side, count in absent.items():
            if 0 < count < len(rounds):
                errors.append(f"{side}: benchmark missing from {count} of {len(rounds)} runs")
        out.append(
            gd.BenchSamples(
                name=name,
                base=tuple(acc[ref]),
                head=tuple(acc[other]),
                ratios=tuple(ratios),
                error="; ".join(dict.fromkeys(errors)) or None,
                missing=None if missing is None else label[missing],
            )
        )
    return out


def choose_method(
    requested: str, shas: dict[str, str], cwd: Path = revisions.ROOT
) -> tuple[str, str]:
    """(method, why) for ``--method requested``: auto takes paired unless head changes
    the measuring code or base's suite cannot build a kernel apart from timing it."""
    if requested != "auto":
        return requested, "as asked"
    touched = [
        f
        for f in revisions.changed_files(shas["base"], shas["head"], cwd)
        if f.startswith(MEASURING_CODE)
    ]
    if touched:
        return "process", f"head changes the measuring code ({', '.join(touched[:3])})"
    if not revisions.has_prepare(shas["base"], cwd):
        return "process", "base's suite predates paired measurement"
    return "paired", "the change leaves the measuring code alone"


@dataclass(frozen=True)
class Comparison:
    """One gate comparison of two commits: the verdicts, the raw rounds and the report."""

    verdicts: list[gd.Verdict]
    rounds: list[dict]
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
) -> list[dict]:
    """``rounds`` paired worker processes (sharded over ``gpus`` when given)."""
    names = revisions.list_names(trees, bench, out) if gpus else []
    payloads = []
    for r in range(rounds):
        log(f"gate: paired run {r + 1}/{rounds}")
        if gpus:
            payloads.append(revisions.paired_gpus(trees, bench, out, gpus, names, tag=f"pair{r}"))
        else:
            payloads.append(revisions.run_paired(trees, bench, out / f"pair-{r}.json"))
    return payloads


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
            lambda side: revisions.resources(trees[side], flagged, out / f"resources-{side}.json"),
            trees,
        )
        return dict(zip(trees, got, strict=True))


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
    trees = {side: revisions.worktree(out, side, sha) for side, sha in shas.items()}
    compile_start = time.perf_counter()
    revisions.precompile(trees, bench, log=log)
    compile_s = time.perf_counter() - compile_start
    if method == "paired":
        measured = measure_paired(trees, bench, rounds, out, gpus, log)
        samples = pool_paired(measured)
        how = f"paired: both revisions in {rounds} process(es), kernels launched in turn"
    else:
        if gpus is None:
            measured = revisions.interleave(trees, bench, rounds, out, log=log)
        else:
            measured = revisions.interleave_gpus(trees, bench, rounds, out, gpus, log=log)
        samples = pool(measured)
        how = f"process: {rounds} rounds, interleaved, one fresh process per side per round"
    calibration = calibration or revisions.calibration_path()
    thresholds = load_calibration(calibration, method)
    verdicts = gd.decide_all(samples, threshold=threshold, thresholds=thresholds)
    found = evidence(trees, verdicts, out, log)
    context = {
        "GPU": device.gpu_name(),
        "versions": ", ".join(f"{k} {v}" for k, v in device.versions().items()),
        "method": f"{how} ({why})",
        "GPU state": gpu_summary(measured),
        "thresholds": (
            f"per benchmark from {calibration.name}, floor {threshold:.0%}, "
            f"cap {gd.MAX_THRESHOLD:.0%}"
            if thresholds
            else f"{threshold:.0%} for all (no {method} calibration file)"
        ),
        "wall time": f"{time.perf_counter() - start:.0f} s (compile {compile_s:.0f} s)",
    }
    report = render_markdown(
        verdicts,
        base_label=f"base {shas['base'][:10]}",
        head_label=f"head {shas['head'][:10]}",
        context=context,
        resources=found,
    )
    return Comparison(verdicts, measured, report, method, found)


def write_report(out: Path, report: str, rounds: list[dict]) -> None:
    """``report.md`` and ``samples.json`` in ``out``, the report on stdout and, in a
    GitHub job, in its step summary."""
    (out / "report.md").write_text(report)
    (out / "samples.json").write_text(json.dumps(rounds))
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
            "base": revisions.resolve(args.base, "BASE"),
            "head": revisions.resolve(args.head, "HEAD"),
        }
        bench = args.bench or revisions.default_bench()
    except (revisions.RevisionError, RuntimeError) as err:
        print(f"gate: error: {err}", file=sys.stderr)
        return EXIT_FAILURE
    try:
        gpus = revisions.gpus_for(args.gpus)
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
