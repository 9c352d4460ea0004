"""Bisect's record and its rendering: what a bisect measured and concluded, as the
markdown report (the outcome, the steps, the comparison that convicted the first bad
commit) and as ``bisect.json``."""

from __future__ import annotations

from dataclasses import dataclass, field

from harness.gate import run as gate
from harness.gate.bisection_search import BAD, GOOD, SKIP, Search


@dataclass
class Record:
    """What a bisect measured and concluded, for the report and bisect.json."""

    good: str
    bad: str
    bench: str
    commits: list[str]
    subjects: dict[str, str]
    rounds: int
    threshold: float
    regressed: list[str] = field(default_factory=list)
    # sha -> Comparison of GOOD against it; BAD's is the first comparison made.
    comparisons: dict[str, gate.Comparison] = field(default_factory=dict)
    search: Search | None = None
    wall_s: float = 0.0
    interrupted: bool = False

    def label(self, sha: str) -> str:
        return f"{sha[:10]} {self.subjects.get(sha, '')}".rstrip()


def verdict_statuses(comparison: gate.Comparison) -> dict[str, str]:
    return {v.name: v.status for v in comparison.verdicts}


def _mark(record: Record, sha: str) -> str:
    outcome = BAD if sha == record.bad else record.search.outcomes.get(sha)
    return {SKIP: "skipped", BAD: BAD, GOOD: GOOD}.get(outcome, "untested")


def _summary(record: Record) -> list[str]:
    """The headline: the culprit, the candidates, or where an interrupted search stood."""
    search = record.search
    if search.culprit and not record.interrupted:
        return [f"bisect: first bad commit: {record.label(search.culprit)}"]
    if record.interrupted:
        head = f"bisect: interrupted; the first bad commit is one of {len(search.candidates)}:"
    else:
        head = (
            f"bisect: no single culprit; the first bad commit is one of these "
            f"{len(search.candidates)}, as skipped commits (they failed to build or run) "
            "hide which:"
        )
    marks = [f"  {record.label(sha)} ({_mark(record, sha)})" for sha in search.candidates]
    return [head, *marks]


def _parent_line(record: Record) -> str:
    search = record.search
    if search.lo < 0:
        return f"- the last good commit is GOOD {record.good[:10]} itself"
    parent = search.commits[search.lo]
    step = [sha for sha, _ in search.probes].index(parent) + 1
    return f"- the last good commit is {record.label(parent)}, found good at step {step}"


def render_steps(record: Record) -> str:
    """A markdown table: the GOOD-BAD comparison (step 0), then each probe."""
    rows = ["| step | commit | subject | outcome | verdicts |", "|--:|---|---|---|---|"]
    probes = [(record.bad, BAD), *record.search.probes]
    for step, (sha, outcome) in enumerate(probes):
        comparison = record.comparisons.get(sha)
        if comparison is None:
            continue
        counts: dict[str, int] = {}
        for status in verdict_statuses(comparison).values():
            counts[status] = counts.get(status, 0) + 1
        verdicts = ", ".join(f"{n} {s}" for s, n in sorted(counts.items()))
        subject = record.subjects.get(sha, "").replace("|", "\\|")
        where = " (BAD)" if step == 0 else ""
        rows.append(f"| {step} | `{sha[:10]}`{where} | {subject} | {outcome} | {verdicts} |")
    return "\n".join(rows) + "\n"


def render(record: Record) -> str:
    """The markdown report: the outcome, the steps, and the table of the comparison that
    convicted the first bad commit (GOOD against it)."""
    search = record.search
    lines = [
        *_summary(record),
        "",
        f"- GOOD: {record.label(record.good)}",
        f"- BAD: {record.label(record.bad)}",
        f"- {len(record.commits)} first-parent commits; measured: "
        + ", ".join(f"`{name}`" for name in record.regressed),
        _parent_line(record),
        f"- steps: GOOD against BAD, then {len(search.outcomes)} probes: "
        f"{len(record.comparisons)} gate comparisons ({record.rounds} rounds each, floor "
        f"{record.threshold:.0%}), wall time {record.wall_s:.0f} s",
        "",
        render_steps(record),
    ]
    convicted = search.commits[search.hi]
    lines += [
        f"Evidence: GOOD against {convicted[:10]}, the comparison that found it bad:",
        "",
        record.comparisons[convicted].report,
    ]
    return "\n".join(lines)


def to_json(record: Record, code: int) -> dict:
    search = record.search

    def commit(sha: str) -> dict:
        return {"sha": sha, "subject": record.subjects.get(sha, "")}

    probes = [(record.bad, BAD)] + (search.probes if search else [])
    return {
        "good": commit(record.good),
        "bad": commit(record.bad),
        "bench": record.bench,
        "measured": record.regressed,
        "commits": len(record.commits),
        "rounds": record.rounds,
        "threshold": record.threshold,
        "culprit": commit(search.culprit) if search and search.culprit else None,
        "candidates": [commit(sha) for sha in search.candidates] if search else [],
        "steps": [
            {**commit(sha), "outcome": o, "verdicts": verdict_statuses(record.comparisons[sha])}
            for sha, o in probes
            if sha in record.comparisons
        ],
        "wall_s": round(record.wall_s, 1),
        "interrupted": record.interrupted,
        "exit": code,
    }
