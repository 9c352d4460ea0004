"""Bisect's record: what a bisect measured and concluded, kept as it goes, and written as
``bisect.json``; its markdown report is ``harness.report.bisection``'s."""

from __future__ import annotations

from dataclasses import dataclass, field

from harness.gate import run as gate
from harness.gate.bisection_search import Search
from harness.policy import BAD


@dataclass
class Record:
    """What a bisect measured and concluded, for the report
    (``harness.report.bisection``) and bisect.json."""

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


def verdict_statuses(comparison: gate.Comparison) -> dict[str, str]:
    return {v.name: v.status for v in comparison.verdicts}


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
