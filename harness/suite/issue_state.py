"""What a regression issue holds, as data: the step (``Span``: after GOOD, up to BAD, on
the branch's first-parent history), the benchmark and one row per machine (``State``),
written into the issue's body as two hidden lines and read back from it here.

The hidden lines: the marker ``<!-- regression: BENCHMARK GOOD..BAD -->`` (full hashes)
and ``<!-- regression-state: {...} -->``, the step and the machines' rows as JSON, which
the next run reads back. Bodies written before the state line carried the rows alone
(``<!-- regression-data: {...} -->``); they are read as well. The visible text around
them is ``harness.report.issue``'s.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass

_SHA = re.compile(r"^[0-9a-f]{40}$")
MACHINE = re.compile(r"^[\w.-]{1,100}$")
_MARKER = re.compile(r"<!-- regression: (.+?) ([0-9a-f]{40})\.\.([0-9a-f]{40}) -->")
_STATE = re.compile(r"<!-- regression-state: (\{.*?\}) -->")
_OLD_DATA = re.compile(r"<!-- regression-data: (\{.*?\}) -->")
# A longer range is not kept in the body (GitHub caps a body at 65536 characters).
MAX_KEPT_COMMITS = 400
ROW_KINDS = {"before_text": str, "after_text": str, "ratio": float, "threshold": float}


@dataclass(frozen=True, slots=True)
class Span:
    """Where a step lies: after ``good``, up to ``bad``, on the branch's first-parent
    history; ``commits`` lists them (ending with ``bad``), None where nobody could say."""

    good: str
    bad: str
    commits: tuple[str, ...] | None = None
    subject: str = ""  # bad's subject and author, from git
    author: str = ""

    @property
    def between(self) -> int | None:
        """Commits strictly between good and bad: none of them was measured."""
        return None if self.commits is None else len(self.commits) - 1

    @property
    def culprit(self) -> str | None:
        """``bad`` when good and bad are adjacent (the step lies on bad itself)."""
        return self.bad if self.between == 0 else None

    def holds(self, sha: str) -> bool:
        return sha == self.bad if self.commits is None else sha in self.commits

    def overlaps(self, other: Span) -> bool:
        """Whether the two ranges share a commit: the earlier of the two bads lies in
        both whenever they do."""
        return self.holds(other.bad) or other.holds(self.bad)

    def narrow(self, other: Span) -> Span:
        """The commits both ranges hold (they overlap): the later good, the earlier bad.
        Where one range's commits are unknown, the other's stands."""
        if self.commits is None or other.commits is None:
            return self if other.commits is None else other
        good = other.good if self.holds(other.good) else self.good
        last = self if other.holds(self.bad) else other
        keep = set(other.commits)
        commits = tuple(c for c in self.commits if c in keep)
        return Span(good, last.bad, commits, last.subject, last.author)

    def as_json(self) -> dict:
        commits = self.commits
        if commits is not None and len(commits) > MAX_KEPT_COMMITS:
            commits = None
        return {
            "good": self.good,
            "bad": self.bad,
            "commits": None if commits is None else list(commits),
            "subject": self.subject,
            "author": self.author,
        }


@dataclass(frozen=True, slots=True)
class State:
    """What an issue's body says: the benchmark, its step and one row per machine."""

    benchmark: str
    span: Span
    rows: Mapping[str, Mapping]

    @property
    def key(self) -> str:
        return f"{self.benchmark} {self.span.good}..{self.span.bad}"

    def hidden_lines(self) -> list[str]:
        """The two lines a body carries for ``parse``: the marker and the state."""
        return hidden_lines(self)


def marker(key: str) -> str:
    return f"<!-- regression: {key} -->"


def _hidden_json(obj: object) -> str:
    # < and > escaped: nothing in it can end the HTML comment that holds it.
    return json.dumps(obj, sort_keys=True).replace("<", "\\u003c").replace(">", "\\u003e")


def hidden_lines(state: State) -> list[str]:
    """The two lines a body carries for ``parse``: the marker and the state."""
    data = {"benchmark": state.benchmark, "span": state.span.as_json(), "rows": state.rows}
    return [marker(state.key), f"<!-- regression-state: {_hidden_json(data)} -->"]


def _valid_row(row: object) -> bool:
    return isinstance(row, dict) and all(
        isinstance(row.get(k), (int, float) if t is float else t) for k, t in ROW_KINDS.items()
    )


def _rows(obj: object) -> dict[str, dict]:
    if not isinstance(obj, dict):
        return {}
    return {m: r for m, r in obj.items() if MACHINE.match(str(m)) and _valid_row(r)}


def _old_rows(body: str) -> dict[str, dict]:
    found = _OLD_DATA.search(body)
    try:
        rows = json.loads(found.group(1)) if found else {}
    except ValueError:
        return {}
    # The first bodies named the texts "before"/"after"; read them as today's names.
    if isinstance(rows, dict):
        rows = {
            m: {"before_text": r.get("before"), "after_text": r.get("after"), **r}
            for m, r in rows.items()
            if isinstance(r, dict)
        }
    return _rows(rows)


def parse(body: str | None) -> State | None:
    """The state a body written here holds; None when it holds none."""
    body = body or ""
    found = _STATE.search(body)
    if found:
        try:
            data = json.loads(found.group(1))
            raw = data["span"]
            commits = raw.get("commits")
            if commits is not None:
                commits = tuple(c for c in commits if isinstance(c, str) and _SHA.match(c))
            span = Span(
                str(raw["good"]), str(raw["bad"]), commits, str(raw["subject"]), str(raw["author"])
            )
            if _SHA.match(span.good) and _SHA.match(span.bad):
                return State(str(data["benchmark"]), span, _rows(data.get("rows")))
        except (ValueError, KeyError, TypeError, AttributeError):
            pass
    old = _MARKER.search(body)
    if old is None:
        return None
    return State(old.group(1), Span(old.group(2), old.group(3)), _old_rows(body))
