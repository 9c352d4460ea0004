"""The text of a regression issue (``harness.suite.announce``): its title, body and
comments, and the state read back from a body it wrote.

Everything that comes from the artifact or from git (benchmark names, commit subjects,
authors, numbers) is inert: names and subjects sit in code spans long enough to hold
their backticks, table cells are escaped, and the commands are quoted with ``shlex``, so a
pasted command passes each name to the program as one argument, whatever it holds.

A body carries two hidden lines: the marker ``<!-- regression: BENCHMARK GOOD..BAD -->``
(full hashes) and ``<!-- regression-state: {...} -->``, the step and the machines' rows as
JSON, which the next run reads back. Bodies written before the state line carried the
rows alone (``<!-- regression-data: {...} -->``); they are read as well.
"""

from __future__ import annotations

import json
import re
import shlex
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


# --- inert text --------------------------------------------------------------------------


def cell(value: object, limit: int = 40) -> str:
    """A short value as inert text of a table cell."""
    value = " ".join(str(value).split())[:limit]
    value = value.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    for ch in "\\`*_[]|@#":
        value = value.replace(ch, "\\" + ch)
    return value


def code(text: str, in_table: bool = False) -> str:
    """``text`` as one inline code span, whatever backticks it holds (CommonMark: a span
    opened by N backticks ends at the next run of exactly N)."""
    text = " ".join(str(text).split())
    fence = "`" * (max((len(run) for run in re.findall(r"`+", text)), default=0) + 1)
    if in_table:  # GitHub splits table cells at | even inside code spans
        text = text.replace("|", "\\|")
    return f"{fence} {text} {fence}"


def code_block(text: str) -> list[str]:
    """``text`` as a fenced code block no line of it can close."""
    runs = [len(run) for run in re.findall(r"`+", text)]
    fence = "`" * max(3, max(runs, default=0) + 1)
    return [fence, text, fence]


def bench_regex(benchmark: str) -> str:
    """A ``-b`` regex that selects exactly this benchmark by asv's name."""
    return "^" + re.escape(benchmark) + "$"


def bisect_command(benchmark: str, span: Span) -> str:
    return shlex.join(
        ["nox", "-s", "bisect", "--", span.good, span.bad, "-b", bench_regex(benchmark)]
    )


def backfill_command(benchmark: str, span: Span) -> str:
    rev_range = f"{span.good}..{span.bad}"
    return shlex.join(["nox", "-s", "backfill", "--", rev_range, "-b", bench_regex(benchmark)])


# --- the issue ---------------------------------------------------------------------------


def marker(key: str) -> str:
    return f"<!-- regression: {key} -->"


def title(state: State) -> str:
    span = state.span
    where = span.bad[:8] if span.culprit else f"{span.good[:8]}..{span.bad[:8]}"
    return f"Perf regression: {state.benchmark} ({where})"[:250]


TABLE_HEAD = ["| machine | commits | before → after | ratio | threshold |", "|---|---|---|---|---|"]


def row_line(machine: str, row: Mapping) -> str:
    return (
        f"| {cell(machine)} | {cell(row.get('range', ''))} "
        f"| {cell(row['before_text'])} → {cell(row['after_text'])} "
        f"| {row['ratio']:.3f} | {row['threshold']:.1%} ({cell(row.get('source', ''))}) |"
    )


def _hidden_json(obj: object) -> str:
    # < and > escaped: nothing in it can end the HTML comment that holds it.
    return json.dumps(obj, sort_keys=True).replace("<", "\\u003c").replace(">", "\\u003e")


def _headline(state: State, repo: str, server: str) -> list[str]:
    span, name = state.span, code(state.benchmark)
    if span.culprit:
        by = f" by {code(span.author)}" if span.author else ""
        subject = f" {code(span.subject)}" if span.subject else ""
        return [
            f"{name} got slower on main at {server}/{repo}/commit/{span.bad}",
            "",
            f"**Culprit: {span.bad[:10]}**{subject}{by}. Every first-parent commit was "
            f"measured: the one before it ({span.good[:10]}) was fast, this one is slow.",
        ]
    unmeasured = (
        "an unknown number of commits between them were"
        if span.between is None
        else f"{span.between} commit(s) between them were"
    )
    return [
        f"{name} got slower on main between {span.good[:10]} (fast) and {span.bad[:10]} "
        f"(slow); {unmeasured} not measured.",
        "",
        f"Commits: {server}/{repo}/compare/{span.good}...{span.bad}",
    ]


def render_body(state: State, repo: str, server: str) -> str:
    """The issue's body: the culprit or the range, one table row per machine, and (when
    commits in the range were not measured) the commands that find the culprit."""
    span = state.span
    hidden = {"benchmark": state.benchmark, "span": span.as_json(), "rows": state.rows}
    lines = [
        marker(state.key),
        f"<!-- regression-state: {_hidden_json(hidden)} -->",
        *_headline(state, repo, server),
        "",
        *TABLE_HEAD,
        *(row_line(m, state.rows[m]) for m in sorted(state.rows)),
        "",
    ]
    if not span.culprit:
        lines += [
            "Find the culprit on a GPU runner, by the gate's rule:",
            *code_block(bisect_command(state.benchmark, span)),
            "",
            "or measure the commits in between, and the next publish narrows this issue:",
            *code_block(backfill_command(state.benchmark, span)),
            "",
        ]
    lines.append(
        "_Kept up to date by the publish workflow (`harness.suite.announce`): the table "
        "holds the latest numbers, a comment names each machine that shows the step later, "
        "and the issue is closed with a comment once the benchmark is back under its "
        "threshold. Discuss in comments; the body is rewritten._"
    )
    return "\n".join(lines) + "\n"


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
