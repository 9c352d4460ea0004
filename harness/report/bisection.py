"""Bisect's markdown: what a bisect measured and concluded (the outcome, the steps, the
comparison that convicted the first bad commit), from ``templates/bisection.md`` and the
record the bisect kept (``harness.gate.bisection_record.Record``), read through
``Record``.

Rendering only: the outcomes, the search and the comparisons are bisect's
(``harness.gate.bisection``). Pure: no IO apart from reading the template.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Protocol

from harness.policy import BAD, GOOD, SKIP
from harness.report import template

# How the report names a candidate's outcome (one never probed is "untested").
_MARKS = {SKIP: "skipped", BAD: BAD, GOOD: GOOD}


class Verdict(Protocol):
    """What the report reads of one benchmark's verdict (``harness.gate.decide.Verdict``)."""

    @property
    def status(self) -> str: ...


class Comparison(Protocol):
    """What the report reads of one gate comparison (``harness.gate.run.Comparison``)."""

    @property
    def verdicts(self) -> Sequence[Verdict]: ...

    @property
    def report(self) -> str: ...


class Search(Protocol):
    """What the report reads of where the search stands
    (``harness.gate.bisection_search.Search``)."""

    @property
    def commits(self) -> Sequence[str]: ...

    @property
    def outcomes(self) -> Mapping[str, str]: ...

    @property
    def lo(self) -> int: ...

    @property
    def hi(self) -> int: ...

    @property
    def candidates(self) -> Sequence[str]: ...

    @property
    def culprit(self) -> str | None: ...

    @property
    def probes(self) -> Sequence[tuple[str, str]]: ...


class Record(Protocol):
    """What the report reads of a bisect's record (``harness.gate.bisection_record.Record``);
    its search is done or was interrupted."""

    @property
    def good(self) -> str: ...

    @property
    def bad(self) -> str: ...

    @property
    def commits(self) -> Sequence[str]: ...

    @property
    def subjects(self) -> Mapping[str, str]: ...

    @property
    def rounds(self) -> int: ...

    @property
    def threshold(self) -> float: ...

    @property
    def regressed(self) -> Sequence[str]: ...

    @property
    def comparisons(self) -> Mapping[str, Comparison]: ...

    @property
    def search(self) -> Search | None: ...

    @property
    def wall_s(self) -> float: ...

    @property
    def interrupted(self) -> bool: ...


def _fill(piece: str, /, **values) -> str:
    return template.fill(template.load("bisection")[piece], values)


def _label(record: Record, sha: str) -> str:
    return f"{sha[:10]} {record.subjects.get(sha, '')}".rstrip()


def _mark(record: Record, sha: str) -> str:
    outcome = BAD if sha == record.bad else record.search.outcomes.get(sha)
    return _MARKS.get(outcome, "untested")


def _summary(record: Record) -> str:
    """The headline: the culprit, the candidates, or where an interrupted search stood."""
    search = record.search
    if search.culprit and not record.interrupted:
        return _fill("culprit", label=_label(record, search.culprit))
    marks = [
        _fill("candidate", label=_label(record, sha), mark=_mark(record, sha))
        for sha in search.candidates
    ]
    return _fill(
        "interrupted" if record.interrupted else "undecided",
        count=len(search.candidates),
        candidates="\n".join(marks),
    )


def _verdicts(comparison: Comparison) -> str:
    """``1 regression, 2 unchanged``: how many verdicts of each status, by status."""
    counts: dict[str, int] = {}
    for verdict in comparison.verdicts:
        counts[verdict.status] = counts.get(verdict.status, 0) + 1
    return ", ".join(f"{n} {s}" for s, n in sorted(counts.items()))


def render_steps(record: Record) -> str:
    """A markdown table: the GOOD-BAD comparison (step 0), then each probe."""
    rows = []
    for step, (sha, outcome) in enumerate([(record.bad, BAD), *record.search.probes]):
        comparison = record.comparisons.get(sha)
        if comparison is None:
            continue
        rows.append(
            _fill(
                "step",
                step=step,
                sha=sha[:10],
                where=" (BAD)" if step == 0 else "",
                subject=record.subjects.get(sha, "").replace("|", "\\|"),
                outcome=outcome,
                verdicts=_verdicts(comparison),
            )
        )
    return _fill("steps", rows="\n".join(rows))


def render(record: Record) -> str:
    """The markdown report: the outcome, the steps, and the report of the comparison that
    convicted the first bad commit (GOOD against it), as the gate wrote it."""
    search = record.search
    parent = search.commits[search.lo] if search.lo >= 0 else None
    convicted = search.commits[search.hi]
    values = {
        "summary": _summary(record),
        "good": _label(record, record.good),
        "bad": _label(record, record.bad),
        "good_short": record.good[:10],
        "commits": len(record.commits),
        "measured": ", ".join(f"`{name}`" for name in record.regressed),
        "parent": parent and _label(record, parent),
        "step": parent and [sha for sha, _ in search.probes].index(parent) + 1,
        "probes": len(search.outcomes),
        "comparisons": len(record.comparisons),
        "rounds": record.rounds,
        "floor": f"{record.threshold:.0%}",
        "wall": f"{record.wall_s:.0f}",
        "steps": render_steps(record).removesuffix("\n"),
        "convicted": convicted[:10],
        "evidence": record.comparisons[convicted].report,
    }
    # The template's last line break is not the report's: the evidence ends as it ends.
    return template.fill(template.load("bisection")[template.MAIN], values).removesuffix("\n")


def render_stopped(message: str, report: str) -> str:
    """The report of a bisect that stopped after comparing GOOD with BAD: why, then that
    comparison's report."""
    return _fill("stopped", message=message, report=report)
