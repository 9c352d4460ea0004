"""The history detector's markdown report (``nox -s regressions``, ``regressions.md``):
the prose is ``templates/regressions.md``, every figure comes from the detector's
``Regression`` records. Pure: no IO apart from reading the template."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Protocol

from harness.report import template
from harness.report.values import human


class Regression(Protocol):
    """What the report reads of a finding (``harness.suite.detector.records.Regression``)."""

    benchmark: str
    machine: str
    before: float
    after: float
    unit: str
    ratio: float
    threshold: float
    threshold_source: str

    @property
    def range(self) -> str: ...


def _cell(text: str) -> str:
    return " ".join(text.splitlines()).replace("`", "'").replace("|", "\\|")


def _pieces() -> Mapping[str, str]:
    return template.load("regressions")


def _fill(piece: str, /, **values) -> str:
    return template.fill(_pieces()[piece], values).rstrip("\n")


def render_markdown(
    regressions: Sequence[Regression],
    checked: int | None = None,
    machines: Sequence[str] = (),
    branch: str = "main",
    unread: Sequence[str] = (),
) -> str:
    """The report: a table of the regressions, or a line saying there are none; then the
    results files that could not be read (``unread``: one line each), if any."""
    scope = ""
    if checked is not None:
        on = f" on {', '.join(machines)}" if machines else ""
        scope = f" ({checked} benchmarks checked{on})"
    rows = [
        _fill(
            "row",
            benchmark=_cell(r.benchmark),
            machine=_cell(r.machine),
            range=r.range,
            before=human(r.before, r.unit),
            after=human(r.after, r.unit),
            ratio=f"{r.ratio:.3f}",
            threshold=f"{r.threshold:.1%}",
            source=r.threshold_source,
        )
        for r in sorted(regressions, key=lambda r: (-r.ratio, r.benchmark, r.machine))
    ]
    values = {
        "branch": branch,
        "scope": scope,
        "count": len(regressions),
        "rows": "\n".join(rows),
        "unread_count": len(unread),
        "unread": "\n".join(_fill("unread", line=_cell(line)) for line in unread),
    }
    return template.fill(_pieces()[template.MAIN], values)
