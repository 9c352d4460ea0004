"""The worker's records read for a verdict: pooled into ``decide.BenchSamples`` per
benchmark, the GPU state they saw summed up, and a calibration's thresholds for a method.
Every payload is a ``harness.revisions.records`` record, told apart by its type."""

from __future__ import annotations

import json
from pathlib import Path

from harness.gate import decide as gd
from harness.revisions import calibration, records


def gpu_summary(runs: list[records.Record]) -> str:
    """SM clocks and throttling the workers of ``runs`` saw while each benchmark ran."""
    clocks, throttled, readings = [], [], 0
    for run in runs:
        if isinstance(run, records.Fatal):
            continue
        for entry in run.results.values():
            if entry.gpu is not None:
                readings += 1
                clocks.append(entry.gpu.sm_mhz)
                if entry.gpu.throttle:
                    throttled.append(entry.gpu.throttle)
    if not readings:
        return "no NVML readings"
    seen = (
        "none"
        if not throttled
        else f"{len(throttled)} of {readings} ({', '.join(sorted(set(throttled)))})"
    )
    return f"SM clock {min(clocks)}-{max(clocks)} MHz over {readings} readings; throttling: {seen}"


def runs_of(rounds: list, method: str) -> list[records.Record]:
    """Every worker record of a comparison's rounds: a process round holds one per side,
    a paired round is one."""
    return [p for r in rounds for p in r.values()] if method == "process" else list(rounds)


def thresholds(
    path: Path | None, method: str = "process", floor: float | None = None
) -> dict[str, float]:
    """Per-benchmark thresholds of the calibration in ``path`` for ``method`` (none for
    another method's, or without a file). A file's thresholds hold its own floor; with
    ``floor`` (a caller's lower floor, the self-test's ``--threshold``) each is what the
    noise alone asks for (``mde + offset``), which the caller floors again."""
    if path is None or not path.exists():
        return {}
    found = calibration.read(path)
    if found.method != method:
        return {}

    def one(b: calibration.Benchmark) -> float:
        if floor is None or b.mde is None:
            return float(b.threshold)
        return max(floor, float(b.mde) + float(b.offset))

    return {name: one(b) for name, b in found.benchmarks.items()}


def launch_scales(path: Path | None, method: str = "paired") -> dict[str, int]:
    """``{benchmark: launch scale}`` of the calibration in ``path`` where a paired one
    raises a benchmark's launches per trial above the worker's own sizing (none for
    another method's file, or without a file)."""
    if method != "paired" or path is None or not path.exists():
        return {}
    found = calibration.read(path)
    if found.method != "paired":
        return {}
    return {name: b.launch_scale for name, b in found.benchmarks.items() if b.launch_scale > 1}


def write_launch_scales(scales: dict[str, int], work: Path) -> Path | None:
    """``scales`` (benchmark -> launch scale, ``launch_scales``) as the file the paired
    worker reads as ``--launch-scale``, under ``work``; None where there are none."""
    if not scales:
        return None
    out = work / "launch-scale.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(scales, indent=1, sort_keys=True) + "\n")
    return out


def _absence(absent: dict[str, int], total: int, unit: str) -> tuple[str | None, list[str]]:
    """The side a benchmark is absent from in all ``total`` records (added or removed by
    the change), and an error for each side it is absent from in some only (that side's
    runs disagree, which is a failure)."""
    missing = next((side for side, count in absent.items() if count == total), None)
    errors = [
        f"{side}: benchmark missing from {count} of {total} {unit}"
        for side, count in absent.items()
        if 0 < count < total
    ]
    return missing, errors


def pool(rounds: list[dict[str, records.Record]]) -> list[gd.BenchSamples]:
    """Pool per-round process-mode records ``{"base": run, "head": run}`` into samples."""
    names: dict[str, None] = {}
    for r in rounds:
        for side in ("base", "head"):
            if isinstance(r[side], records.ProcessRun):
                names.update(dict.fromkeys(r[side].results))
    out = []
    for name in names:
        acc = {"base": [], "head": [], "base_rel": [], "head_rel": []}
        errors, skipped = [], False
        absent = {"base": 0, "head": 0}
        for r in rounds:
            for side in ("base", "head"):
                run = r[side]
                if isinstance(run, records.Fatal):
                    errors.append(f"{side}: {run.fatal}")
                    continue
                entry = run.results.get(name)
                if entry is None:
                    absent[side] += 1
                elif entry.error is not None:
                    errors.append(f"{side}: {entry.error}")
                elif entry.skipped is not None:
                    skipped = True
                else:
                    acc[side] += entry.track_latency
                    acc[f"{side}_rel"] += entry.track_vs_torch
        if skipped and not errors and not acc["base"] and not acc["head"]:
            continue  # invalid on both sides: not a benchmark
        missing, partly = _absence(absent, len(rounds), "rounds")
        errors += partly
        error = "; ".join(dict.fromkeys(errors)) or None
        out.append(
            gd.BenchSamples(
                name=name, error=error, missing=missing, **{k: tuple(v) for k, v in acc.items()}
            )
        )
    return out


def pool_paired(
    runs: list[records.Record], ref: str = "base", other: str = "head"
) -> list[gd.BenchSamples]:
    """Pool paired records (one per process) into samples of ``other`` against ``ref``:
    latencies of both, and ``other``'s per-trial ratios to ``ref``."""
    names: dict[str, None] = {}
    for run in runs:
        if isinstance(run, records.PairedRun):
            names.update(dict.fromkeys(run.results))
    out = []
    for name in names:
        acc = {ref: [], other: []}
        ratios: list[float] = []
        errors, skipped = [], False
        absent = {ref: 0, other: 0}
        for run in runs:
            if isinstance(run, records.Fatal):
                errors.append(run.fatal)
                continue
            entry = run.results.get(name, records.Paired())
            for side in (ref, other):
                got = entry.sides.get(side)
                if got is None:
                    absent[side] += 1
                elif got.error is not None:
                    errors.append(f"{side}: {got.error}")
                elif got.skipped is not None:
                    skipped = True
                else:
                    acc[side] += got.latency
            ratios += entry.ratios.get(other, ())
        if skipped and not errors and not acc[ref] and not acc[other]:
            continue  # invalid on both sides: not a benchmark
        missing, partly = _absence(absent, len(runs), "runs")
        errors += partly
        label = {ref: "base", other: "head"}
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


def rounds_json(rounds: list) -> list:
    """A comparison's rounds in JSON form (``samples.json``): per process round each
    side's record, a paired round its record (``records.to_dict``)."""
    return [
        {side: records.to_dict(run) for side, run in r.items()}
        if isinstance(r, dict)
        else records.to_dict(r)
        for r in rounds
    ]
