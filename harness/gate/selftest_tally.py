"""The gate self-test's tally: each iteration's A/A and injected verdicts (``compare``),
false alarms over the A/A comparisons, detections over the injected ones, the ratios the
gate saw, and the benchmarks whose seen injection missed the request (refused a detection
rate); rendered as text and as the JSON record."""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from harness.gate import decide as gd
from harness.gate import inject
from harness.gate import samples as gs


@dataclass(frozen=True, slots=True)
class Tally:
    comparisons: int
    false_alarm_runs: int  # A/A comparisons with at least one regression
    false_alarms: dict[str, int]  # per benchmark
    detections: dict[str, int]  # per benchmark, out of `comparisons`
    # The ratios the gate saw, per benchmark: A/A and injected, one per comparison.
    aa_ratios: dict[str, list[float]] | None = None
    injected_ratios: dict[str, list[float]] | None = None
    noisy: dict[str, int] | None = None  # comparisons where calibration left it ungated
    # Why the injected side failed, per benchmark (first line of each distinct error).
    errors: dict[str, list[str]] | None = None

    @property
    def false_alarm_rate(self) -> float:
        return self.false_alarm_runs / self.comparisons if self.comparisons else 0.0


def tally(aa: Sequence[Sequence[gd.Verdict]], injected: Sequence[Sequence[gd.Verdict]]) -> Tally:
    """Count false alarms over the A/A comparisons and detections over the injected ones."""
    if len(aa) != len(injected):
        raise ValueError(f"aa/injected: {len(aa)} and {len(injected)} comparisons differ")
    names = sorted({v.name for run in [*aa, *injected] for v in run})
    false_alarms = dict.fromkeys(names, 0)
    detections = dict.fromkeys(names, 0)
    aa_ratios = {n: [] for n in names}
    injected_ratios = {n: [] for n in names}
    noisy = dict.fromkeys(names, 0)
    errors: dict[str, list[str]] = {n: [] for n in names}
    runs_with_alarm = 0
    for run in aa:
        hits = [v.name for v in run if v.status == gd.REGRESSION]
        runs_with_alarm += bool(hits)
        for name in hits:
            false_alarms[name] += 1
        for v in run:
            if v.ratio is not None:
                aa_ratios[v.name].append(v.ratio)
    for run in injected:
        for v in run:
            if v.status == gd.REGRESSION:
                detections[v.name] += 1
            if v.status == gd.NOISY:
                noisy[v.name] += 1
            if v.ratio is not None:
                injected_ratios[v.name].append(v.ratio)
            why = inject.first_line(v.reason)
            if v.status == gd.FAILED and why not in errors[v.name]:
                errors[v.name].append(why)
    return Tally(
        len(aa),
        runs_with_alarm,
        false_alarms,
        detections,
        aa_ratios,
        injected_ratios,
        noisy,
        errors,
    )


def render(t: Tally, slowdown: float) -> str:
    lines = [
        f"gate self-test: {t.comparisons} A/A and {t.comparisons} injected comparisons, "
        f"injected slowdown {slowdown:.1%}",
        f"false alarms: {t.false_alarm_runs}/{t.comparisons} comparisons "
        f"({t.false_alarm_rate:.0%})",
        "",
        f"{'benchmark':<60} {'false alarms':>12} {'detected':>9} {'A/A ratio':>10} {'seen':>7}",
    ]
    refused = refusals(t, slowdown)
    for name in t.detections:
        aa = _median(t.aa_ratios, name)
        seen = _median(t.injected_ratios, name)
        noisy = (t.noisy or {}).get(name, 0)
        detected = "refused" if name in refused else f"{t.detections[name]}/{t.comparisons}"
        lines.append(
            f"{name:<60} {t.false_alarms[name]:>12} {detected:>9}"
            f" {_fmt(aa):>10} {_fmt(seen):>7}" + (f"  too noisy {noisy}x" if noisy else "")
        )
    if refused:
        lines += ["", f"no detection rate for {len(refused)} benchmark(s):"]
        lines += [f"  {name}: {why}" for name, why in refused.items()]
    return "\n".join(lines)


def seen_injection(t: Tally, name: str) -> float | None:
    """The slowdown the gate saw on the injected side: the median ratio, minus 1."""
    ratio = _median(t.injected_ratios, name)
    return None if ratio is None else ratio - 1.0


def refusals(t: Tally, slowdown: float) -> dict[str, str]:
    """The benchmarks whose seen injection misses ``slowdown`` by more than
    ``inject.TOLERANCE``, each with why: their detection rate would not show it."""
    out = {}
    for name in t.detections:
        why = inject.miss(seen_injection(t, name), slowdown)
        failed = (t.errors or {}).get(name)
        if why and failed and seen_injection(t, name) is None:
            why += f" ({failed[0]})"
        if why:
            out[name] = why
    return out


def _median(table: dict[str, list[float]] | None, name: str) -> float | None:
    values = (table or {}).get(name) or []
    return statistics.median(values) if values else None


def _fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:.4f}"


def to_json(
    t: Tally,
    slowdown: float,
    threshold: float,
    rounds: int,
    bench: str,
    gpus: list[int] | None = None,
    calibrated: Mapping | None = None,
) -> dict:
    """The tally for the record: settings, rates, and counts per benchmark. The overall
    detection rate is over all (comparison, benchmark) pairs of the benchmarks whose seen
    injection met the request; the others have none and are listed under ``refused``.
    ``calibrated`` holds each benchmark's injection calibration (cycles, what it saw)."""
    n = t.comparisons
    refused = refusals(t, slowdown)
    counted = [name for name in t.detections if name not in refused]

    def rate(k: int, out_of: int) -> float:
        return k / out_of if out_of else 0.0

    return {
        "n": n,
        "slowdown": slowdown,
        "threshold": threshold,
        "rounds": rounds,
        "bench": bench,
        "gpus": gpus,
        "false_alarm_runs": t.false_alarm_runs,
        "false_alarm_rate": t.false_alarm_rate,
        "detection_rate": rate(sum(t.detections[x] for x in counted), n * len(counted)),
        "injection_tolerance": inject.TOLERANCE,
        "refused": refused,
        "benchmarks": {
            name: {
                "false_alarms": t.false_alarms[name],
                "false_alarm_rate": rate(t.false_alarms[name], n),
                "detections": t.detections[name],
                "detection_rate": None if name in refused else rate(t.detections[name], n),
                "seen_injection": seen_injection(t, name),
                "injection_cycles": getattr((calibrated or {}).get(name), "cycles", None),
                # What the calibration's own steps saw, beside what the gate saw.
                "calibration_seen": getattr((calibrated or {}).get(name), "seen", None),
                # Settled after the first iterations: [cycles before, what they saw].
                "settled_from": _settled((calibrated or {}).get(name)),
                "refused": refused.get(name),
                "too_noisy": (t.noisy or {}).get(name, 0),
                # What the gate saw: median and extremes of the per-comparison ratios.
                "aa_ratio": _summary((t.aa_ratios or {}).get(name)),
                "injected_ratio": _summary((t.injected_ratios or {}).get(name)),
            }
            for name in t.detections
        },
    }


def _settled(injection) -> list | None:
    found = getattr(injection, "settled_from", None)
    return None if found is None else list(found)


def _summary(values: list[float] | None) -> dict | None:
    if not values:
        return None
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def describe(aa: Sequence[gd.Verdict], injected: Sequence[gd.Verdict]) -> str:
    """The benchmarks behind an iteration's counts: each false alarm and each miss, with
    the change the gate saw."""

    def seen(v: gd.Verdict) -> str:
        return "-" if v.ratio is None else f"{v.ratio:.3f}x"

    parts = [f"\n  false alarm: {v.name} {seen(v)}" for v in aa if v.status == gd.REGRESSION]
    parts += [
        f"\n  missed: {v.name} {seen(v)}"
        for v in injected
        if v.status not in (gd.REGRESSION, gd.FAILED)
    ]
    return "".join(parts)


def iteration_line(
    slowdowns: Sequence[float], verdicts: Sequence[Sequence[gd.Verdict]], seconds: float
) -> str:
    """An iteration's progress line: false alarms and detections per slowdown (its
    ``verdicts`` are A/A and injected for each in turn), then each alarm and miss."""
    parts, details = [], ""
    for k, slowdown in enumerate(slowdowns):
        aa, injected = verdicts[2 * k], verdicts[2 * k + 1]
        alarms = sum(v.status == gd.REGRESSION for v in aa)
        detected = sum(v.status == gd.REGRESSION for v in injected)
        failed = sum(v.status == gd.FAILED for v in [*aa, *injected])
        at = f"at {slowdown:.1%}: " if len(slowdowns) > 1 else ""
        parts.append(
            f"{at}A/A {alarms} false alarm(s), detected {detected}/{len(injected)}"
            + (f", {failed} failed" if failed else "")
        )
        details += describe(aa, injected).replace("\n  ", f"\n  {at}")
    return "; ".join(parts) + f" ({seconds:.0f} s)" + details


def compare(
    runs: Sequence[dict],
    threshold: float,
    thresholds: Mapping[str, float] | None = None,
    method: str = "process",
    side: str = "injected",
) -> tuple[list[gd.Verdict], list[gd.Verdict]]:
    """(A/A, injected) verdicts of one iteration from its rounds' ``{side: payload}``
    (process) or paired payloads: base against head, and base against the injected
    ``side``; ``thresholds`` are per-benchmark overrides (calibration), as the gate
    applies them."""
    if method == "paired":
        aa = gs.pool_paired(list(runs), "base", "head")
        injected = gs.pool_paired(list(runs), "base", side)
    else:
        aa = gs.pool([{"base": r["base"], "head": r["head"]} for r in runs])
        injected = gs.pool([{"base": r["base"], "head": r[side]} for r in runs])
    return (
        gd.decide_all(aa, threshold=threshold, thresholds=thresholds),
        gd.decide_all(injected, threshold=threshold, thresholds=thresholds),
    )
