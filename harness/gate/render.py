"""Markdown of the gate's verdicts: the PR comment and the job summary.

Rendering only; the decisions come from ``harness.gate.decide``.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping

from harness.gate.decide import (
    FAILED,
    IMPROVEMENT,
    NEW,
    NOISY,
    REGRESSION,
    REMOVED,
    STATUS_ORDER,
    UNCHANGED,
    Verdict,
    exit_code,
)

# A compiler error can be pages long; the table row only has to say which one it was.
_MAX_ERROR_CHARS = 300


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


def _verdict_cell(v: Verdict) -> str:
    reason = v.reason
    if len(reason) > _MAX_ERROR_CHARS:
        reason = reason[: _MAX_ERROR_CHARS - 1] + "…"
    label = f"**{v.status}**" if v.status in (REGRESSION, FAILED, NOISY) else v.status
    return f"{label}: {_text(reason)}"


def _sort_key(v: Verdict) -> tuple[int, float, str]:
    # Worst regression first, biggest improvement first, the rest by name.
    if v.status == REGRESSION and v.ratio is not None:
        return (STATUS_ORDER[v.status], -v.ratio, v.name)
    if v.status == IMPROVEMENT and v.ratio is not None:
        return (STATUS_ORDER[v.status], v.ratio, v.name)
    return (STATUS_ORDER.get(v.status, len(STATUS_ORDER)), 0.0, v.name)


def _plural(n: int, word: str, plural: str) -> str:
    return f"{n} {word if n == 1 else plural}"


def render_markdown(
    verdicts: Iterable[Verdict],
    *,
    base_label: str,
    head_label: str,
    context: Mapping[str, str] | None = None,
    resources: Mapping[str, Mapping[str, Mapping]] | None = None,
) -> str:
    """The PR comment: a one-line PASS/FAIL summary, optional context bullets, the table
    of verdicts, and the compiled resources (``{side: {name: resources}}``) of the
    regressed benchmarks, base -> head."""
    rows = sorted(verdicts, key=_sort_key)
    counts = {status: sum(v.status == status for v in rows) for status in STATUS_ORDER}
    outcome = "FAIL" if exit_code(rows) else "PASS"
    limits = sorted({v.threshold for v in rows})
    if not limits:
        limit = "no benchmarks"
    elif len(limits) == 1:
        limit = f"threshold {limits[0] * 100:g}%"
    else:
        limit = f"threshold {limits[0] * 100:g}–{limits[-1] * 100:g}%"
    lines = [
        f"**Performance gate: {outcome}** — "
        f"{_plural(counts[REGRESSION], 'regression', 'regressions')}, "
        f"{counts[FAILED]} failed, "
        f"{_plural(counts[IMPROVEMENT], 'improvement', 'improvements')}, "
        f"{counts[UNCHANGED]} unchanged"
        + "".join(f", {counts[k]} {k}" for k in (NOISY, NEW, REMOVED) if counts[k])
        + f" ({limit})",
    ]
    ungated = [v for v in rows if v.status == NOISY]
    if ungated:
        lines += [
            "",
            f"**Not gated: {_plural(len(ungated), 'benchmark', 'benchmarks')}** "
            "(a slowdown there passes unseen; calibration marked them too noisy):",
        ]
        lines += [f"- {_name(v.name)}: {_text(v.reason)}" for v in ungated]
    if context:
        lines.append("")
        lines.extend(f"- {_text(key)}: {_text(value)}" for key, value in context.items())
    lines += [
        "",
        f"| benchmark | base ({_text(base_label)}) | head ({_text(head_label)}) | ratio | 99% CI "
        "| p | vs torch | threshold | verdict |",
        "|---|--:|--:|--:|:-:|--:|--:|--:|---|",
    ]
    for v in rows:
        cells = [
            _name(v.name),
            _latency(v.base_median),
            _latency(v.head_median),
            _num(v.ratio),
            _ci(v),
            _num(v.p_value, ".2g"),
            _num(v.rel_ratio),
            f"{v.threshold * 100:g}%",
            _verdict_cell(v),
        ]
        lines.append("| " + " | ".join(cells) + " |")
    if resources:
        lines += render_resources(resources)
    return "\n".join(lines) + "\n"


# What a compiled kernel's resources hold, as the static tracks record them.
_RESOURCE_COLUMNS = (
    ("registers", "registers/thread"),
    ("smem_bytes", "shared memory (B)"),
    ("spill_bytes", "spill (B)"),
    ("has_wgmma", "wgmma"),
    ("has_tma", "TMA"),
)


def _resource(value) -> str:
    if value is None:
        return "?"
    if isinstance(value, bool):
        return "yes" if value else "no"
    return str(value)


def render_resources(resources: Mapping[str, Mapping[str, Mapping]]) -> list[str]:
    """Lines of the evidence table: per regressed benchmark, each resource base -> head,
    in bold where it changed; a side that could not be built says why."""
    base, head = resources.get("base", {}), resources.get("head", {})
    names = list(dict.fromkeys([*base, *head]))
    lines = [
        "",
        "**Compiled resources of the regressed kernels** (sm_90a, base → head)",
        "",
        "| benchmark | " + " | ".join(title for _, title in _RESOURCE_COLUMNS) + " |",
        "|---|" + ":-:|" * len(_RESOURCE_COLUMNS),
    ]
    for name in names:
        b, h = base.get(name, {}), head.get(name, {})
        errors = [f"{side}: {e['error']}" for side, e in (("base", b), ("head", h)) if "error" in e]
        if errors:
            cells = [_text("; ".join(errors)[:_MAX_ERROR_CHARS])] + [""] * (
                len(_RESOURCE_COLUMNS) - 1
            )
        else:
            cells = []
            for key, _ in _RESOURCE_COLUMNS:
                old, new = _resource(b.get(key)), _resource(h.get(key))
                cell = old if old == new else f"**{old} → {new}**"
                cells.append(cell)
        lines.append(f"| {_name(name)} | " + " | ".join(cells) + " |")
    return lines
