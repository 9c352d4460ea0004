"""The PR performance gate: BASE against HEAD on one GPU, interleaved, with a verdict.

    nox -s gate -- BASE HEAD [--rounds 3] [--threshold 0.02] [--bench REGEX]
    python -m harness.gate BASE HEAD ...

Each side gets a git worktree, so its suite, kernels and timing path come from its own
revision. Rounds alternate the sides (base, head, then head, base, ...) so drift in clocks
or temperature reaches both alike; every round runs each side's GPU tracks in a fresh
process. The samples of all rounds are pooled per benchmark and judged by
``harness.gate.decide``. Exit status: 0 nothing regressed, 1 a confirmed regression,
2 a benchmark failed to build or run (or the gate itself could not run).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from harness.cli import EXIT_FAILURE, fraction, gpu_list, output_dir, positive_int, regex
from harness.gate import decide as gd
from harness.gate import revisions
from harness.gate.render import render_markdown


def add_comparison_options(p: argparse.ArgumentParser) -> None:
    """The options of one gate comparison, shared by the gate and bisect: the same rule
    under the same names."""
    p.add_argument(
        "-b",
        "--bench",
        type=regex,
        default=None,
        help="regex on benchmark names (default: the suite's GATE_SUBSET)",
    )
    p.add_argument(
        "--rounds", type=positive_int, default=3, help="interleaved rounds per side (>= 1)"
    )
    p.add_argument(
        "--threshold",
        type=fraction,
        default=gd.DEFAULT_THRESHOLD,
        help="slowdown that counts, the floor under calibrated thresholds (0.02 = 2%%)",
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
    for r in rounds:
        for payload in r.values():
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


def load_calibration(path: Path | None) -> dict[str, float]:
    """Per-benchmark thresholds from ``nox -s calibrate`` (``{name: {"threshold": x}}``)."""
    if path is None or not path.exists():
        return {}
    data = json.loads(path.read_text())
    return {name: float(v["threshold"]) for name, v in data.get("benchmarks", {}).items()}


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


@dataclass(frozen=True)
class Comparison:
    """One gate comparison of two commits: the verdicts, the raw rounds and the report."""

    verdicts: list[gd.Verdict]
    rounds: list[dict]
    report: str

    @property
    def code(self) -> int:
        return gd.exit_code(self.verdicts)


def compare(
    shas: dict[str, str],
    bench: str,
    rounds: int,
    out: Path,
    threshold: float = gd.DEFAULT_THRESHOLD,
    gpus: list[int] | None = None,
    calibration: Path | None = None,
    log=print,
) -> Comparison:
    """Measure ``shas["base"]`` against ``shas["head"]`` (each in its own worktree under
    ``out``), interleaved, and judge them; the gate's whole rule, shared with bisect."""
    from harness.measure import device

    trees = {side: revisions.worktree(out, side, sha) for side, sha in shas.items()}
    start = time.perf_counter()
    if gpus is None:
        measured = revisions.interleave(trees, bench, rounds, out, log=log)
    else:
        measured = revisions.interleave_gpus(trees, bench, rounds, out, gpus, log=log)
    calibration = calibration or revisions.calibration_path()
    thresholds = load_calibration(calibration)
    verdicts = gd.decide_all(pool(measured), threshold=threshold, thresholds=thresholds)
    context = {
        "GPU": device.gpu_name(),
        "versions": ", ".join(f"{k} {v}" for k, v in device.versions().items()),
        "rounds": f"{rounds}, interleaved, one fresh process per side per round",
        "GPU state": gpu_summary(measured),
        "thresholds": (
            f"per benchmark from {calibration.name}, floor {threshold:.0%}"
            if thresholds
            else f"{threshold:.0%} for all (no calibration file)"
        ),
        "wall time": f"{time.perf_counter() - start:.0f} s",
    }
    report = render_markdown(
        verdicts,
        base_label=f"base {shas['base'][:10]}",
        head_label=f"head {shas['head'][:10]}",
        context=context,
    )
    return Comparison(verdicts, measured, report)


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
    result = compare(shas, bench, args.rounds, out, args.threshold, gpus, args.calibration, log)
    if not result.verdicts:
        print(f"gate: error: no benchmark matched --bench {bench!r}", file=sys.stderr)
        return EXIT_FAILURE
    (out / "report.md").write_text(result.report)
    (out / "samples.json").write_text(json.dumps(result.rounds))
    summary = os.environ.get("GITHUB_STEP_SUMMARY")
    if summary:
        with open(summary, "a") as fh:
            fh.write(result.report + "\n")
    print(result.report)
    return result.code


if __name__ == "__main__":
    sys.exit(main())
