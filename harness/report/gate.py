"""The gate's markdown: the PR comment and the job summary, from ``templates/gate.md`` and
the verdicts the gate decided (``harness.gate.decide``), read through ``Verdict``.

Rendering only: the decisions, PASS or FAIL included, are the gate's. Everything that
comes from a benchmark or a build (names, reasons, compiler errors, labels) is inert: names
sit in code spans, the rest is escaped. Pure: no IO apart from reading the template.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Protocol

from harness.policy import (
    FAILED,
    IMPROVEMENT,
    NEW,
    NOISY,
    REGRESSION,
    REMOVED,
    UNCHANGED,
)
from harness.report import template

# Table order: what needs a human first.
STATUS_ORDER = {
    REGRESSION: 0,
    FAILED: 1,
    NOISY: 2,
    REMOVED: 3,
    IMPROVEMENT: 4,
    NEW: 5,
    UNCHANGED: 6,
}
# In bold in the verdict column: the statuses a reader must act on.
_LOUD = (REGRESSION, FAILED, NOISY)
# Counted in the summary line only when some benchmark has them.
_WHEN_ANY = (NOISY, NEW, REMOVED)

# A compiler error can be pages long; the table row only has to say which one it was.
_MAX_ERROR_CHARS = 300

# What a compiled kernel's resources hold, as the static tracks record them; the
# template's resource row names each.
_RESOURCES = ("registers", "smem_bytes", "spill_bytes", "has_wgmma", "has_tma")


class Verdict(Protocol):
    """What the report reads of a decision (``harness.gate.decide.Verdict``)."""

    name: str
    status: str
    base_median: float | None
    head_median: float | None
    ratio: float | None
    rel_ratio: float | None
    p_value: float | None
    ci_low: float | None
    ci_high: float | None
    threshold: float
    reason: str


# --- inert text --------------------------------------------------------------------------


def _text(value: str) -> str:
    """Arbitrary text (compiler errors, reasons) as inert content of one table cell."""
    value = value.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    for ch in "\\`*_[]|":
        value = value.replace(ch, "\\" + ch)
    return "<br>".join(value.splitlines())


def _name(value: str) -> str:
    # Code spans keep underscores and dots literal; GFM tables still need the pipe escaped.
    value = " ".join(value.splitlines()).replace("`", "'").replace("|", "\\|")
    return f"`{value}`"


# --- figures -----------------------------------------------------------------------------


def _latency(seconds: float | None) -> str:
    if seconds is None:
        return "—"
    for scale, unit in ((1.0, "s"), (1e-3, "ms"), (1e-6, "µs")):
        if abs(seconds) >= scale:
            return f"{seconds / scale:.4g} {unit}"
    return f"{seconds / 1e-9:.4g} ns"


def _num(value: float | None, fmt: str = ".3f") -> str:
    if value is None:
        return "—"
    if math.isinf(value):
        return "∞"
    return format(value, fmt)


def _ci(v: Verdict) -> str:
    if v.ci_low is None or v.ci_high is None:
        return "—"
    return f"[{_num(v.ci_low)}, {_num(v.ci_high)}]"


def _plural(n: int, word: str, plural: str) -> str:
    return f"{n} {word if n == 1 else plural}"


def _limit(verdicts: Iterable[Verdict]) -> str:
    limits = sorted({v.threshold for v in verdicts})
    if not limits:
        return "no benchmarks"
    if len(limits) == 1:
        return f"threshold {limits[0] * 100:g}%"
    return f"threshold {limits[0] * 100:g}–{limits[-1] * 100:g}%"


def _verdict_cell(v: Verdict) -> str:
    reason = v.reason
    if len(reason) > _MAX_ERROR_CHARS:
        reason = reason[: _MAX_ERROR_CHARS - 1] + "…"
    label = f"**{v.status}**" if v.status in _LOUD else v.status
    return f"{label}: {_text(reason)}"


def _sort_key(v: Verdict) -> tuple[int, float, str]:
    # Worst regression first, biggest improvement first, the rest by name.
    if v.status == REGRESSION and v.ratio is not None:
        return (STATUS_ORDER[v.status], -v.ratio, v.name)
    if v.status == IMPROVEMENT and v.ratio is not None:
        return (STATUS_ORDER[v.status], v.ratio, v.name)
    return (STATUS_ORDER.get(v.status, len(STATUS_ORDER)), 0.0, v.name)


# --- from the template -------------------------------------------------------------------


def _fill(piece: str, /, **values) -> str:
    return template.fill(template.load("gate")[piece], values).rstrip("\n")


def _bullet(key: str, value: str) -> str:
    return _fill("bullet", key=key, value=value)


def _row(v: Verdict) -> str:
    return _fill(
        "row",
        name=_name(v.name),
        base=_latency(v.base_median),
        head=_latency(v.head_median),
        ratio=_num(v.ratio),
        ci=_ci(v),
        p=_num(v.p_value, ".2g"),
        rel_ratio=_num(v.rel_ratio),
        threshold=f"{v.threshold * 100:g}%",
        verdict=_verdict_cell(v),
    )


def render_markdown(
    verdicts: Iterable[Verdict],
    *,
    passed: bool,
    base_label: str,
    head_label: str,
    context: Mapping[str, str] | None = None,
    resources: Mapping[str, Mapping[str, Mapping]] | None = None,
) -> str:
    """The PR comment: a one-line PASS/FAIL summary (``passed``: the gate's exit decision,
    ``harness.gate.decide.exit_code``), the benchmarks not gated, optional context
    bullets, the table of verdicts, and the compiled resources (``{side: {name:
    resources}}``) of the regressed benchmarks, base -> head."""
    rows = sorted(verdicts, key=_sort_key)
    counts = {status: sum(v.status == status for v in rows) for status in STATUS_ORDER}
    ungated = [v for v in rows if v.status == NOISY]
    values = {
        "outcome": "PASS" if passed else "FAIL",
        "regressions": _plural(counts[REGRESSION], "regression", "regressions"),
        "failed": counts[FAILED],
        "improvements": _plural(counts[IMPROVEMENT], "improvement", "improvements"),
        "unchanged": counts[UNCHANGED],
        "others": "".join(f", {counts[k]} {k}" for k in _WHEN_ANY if counts[k]),
        "limit": _limit(rows),
        "ungated_count": _plural(len(ungated), "benchmark", "benchmarks"),
        "ungated": "\n".join(_bullet(_name(v.name), _text(v.reason)) for v in ungated),
        "context": "\n".join(_bullet(_text(k), _text(v)) for k, v in (context or {}).items()),
        "base_label": _text(base_label),
        "head_label": _text(head_label),
        "rows": "\n".join(_row(v) for v in rows),
        "resources": render_resources(resources) if resources else "",
    }
    return template.fill(template.load("gate")[template.MAIN], values)


def _resource(value) -> str:
    if value is None:
        return "?"
    if isinstance(value, bool):
        return "yes" if value else "no"
    return str(value)


def _resource_row(name: str, base: Mapping, head: Mapping) -> str:
    errors = [
        f"{side}: {e['error']}" for side, e in (("base", base), ("head", head)) if "error" in e
    ]
    if errors:
        # The row says why; its other cells stay empty.
        cells = dict.fromkeys(_RESOURCES, "")
        cells[_RESOURCES[0]] = _text("; ".join(errors)[:_MAX_ERROR_CHARS])
    else:
        cells = {}
        for key in _RESOURCES:
            old, new = _resource(base.get(key)), _resource(head.get(key))
            cells[key] = old if old == new else f"**{old} → {new}**"
    return _fill("resource_row", name=_name(name), **cells)


def render_resources(resources: Mapping[str, Mapping[str, Mapping]]) -> str:
    """The evidence table: per regressed benchmark, each resource base -> head, in bold
    where it changed; a side that could not be built says why."""
    base, head = resources.get("base", {}), resources.get("head", {})
    names = list(dict.fromkeys([*base, *head]))
    rows = [_resource_row(n, base.get(n, {}), head.get(n, {})) for n in names]
    return _fill("resources", rows="\n".join(rows))
