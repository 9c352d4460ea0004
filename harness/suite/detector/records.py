"""The history detector's findings: a ``Regression`` per benchmark whose latest step is a
slowdown."""

from __future__ import annotations

from dataclasses import dataclass

from harness.report.values import human


@dataclass(frozen=True, slots=True)
class Regression:
    """A benchmark whose latest step is a slowdown beyond its threshold."""

    benchmark: str
    machine: str
    good: str
    bad: str
    before: float
    after: float
    unit: str
    threshold: float
    spread: float | None
    threshold_source: str
    commits_after: int
    # The branch's first-parent commits after good up to bad (None: git cannot say), and
    # bad's subject and author: what names the culprit when good and bad are adjacent.
    commits: tuple[str, ...] | None = None
    bad_subject: str = ""
    bad_author: str = ""

    @property
    def ratio(self) -> float:
        return self.after / self.before

    @property
    def range(self) -> str:
        return f"{self.good[:8]}..{self.bad[:8]}"

    def as_json(self) -> dict:
        return {
            "benchmark": self.benchmark,
            "machine": self.machine,
            "good": self.good,
            "bad": self.bad,
            "range": self.range,
            "before": self.before,
            "after": self.after,
            "unit": self.unit,
            "before_text": human(self.before, self.unit),
            "after_text": human(self.after, self.unit),
            "ratio": self.ratio,
            "threshold": self.threshold,
            "spread": self.spread,
            "threshold_source": self.threshold_source,
            "commits_after": self.commits_after,
            "commits": None if self.commits is None else list(self.commits),
            "bad_subject": self.bad_subject,
            "bad_author": self.bad_author,
        }
