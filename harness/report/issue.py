"""The text of a regression issue (``harness.suite.announce``): its title, body and
comments, from ``templates/issue.md`` and the step's data (``harness.suite.issue_state``).

Everything that comes from the artifact or from git (benchmark names, commit subjects,
authors, numbers) is inert: names and subjects sit in code spans long enough to hold
their backticks, table cells are escaped, and the commands are quoted with ``shlex``, so a
pasted command passes each name to the program as one argument, whatever it holds.
Pure: no IO apart from reading the template.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping, Sequence
from typing import Protocol

from harness.report import template


class Span(Protocol):
    """What the text reads of a step's place (``harness.suite.issue_state.Span``)."""

    good: str
    bad: str
    subject: str
    author: str

    @property
    def between(self) -> int | None: ...

    @property
    def culprit(self) -> str | None: ...


class State(Protocol):
    """What the text reads of an issue's state (``harness.suite.issue_state.State``),
    which also writes the hidden lines its parser reads back."""

    benchmark: str
    span: Span
    rows: Mapping[str, Mapping]

    def hidden_lines(self) -> list[str]: ...


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


# --- from the template -------------------------------------------------------------------


def _pieces() -> Mapping[str, str]:
    return template.load("issue")


def _fill(piece: str, /, **values) -> str:
    # A piece ends where its text ends: a conditional part at its end keeps its line break.
    return template.fill(_pieces()[piece], values).rstrip("\n")


def title(state: State) -> str:
    span = state.span
    where = span.bad[:8] if span.culprit else f"{span.good[:8]}..{span.bad[:8]}"
    return _fill("title", benchmark=state.benchmark, where=where)[:250]


def row_line(machine: str, row: Mapping) -> str:
    return _fill(
        "row",
        machine=cell(machine),
        range=cell(row.get("range", "")),
        before=cell(row["before_text"]),
        after=cell(row["after_text"]),
        ratio=f"{row['ratio']:.3f}",
        threshold=f"{row['threshold']:.1%}",
        source=cell(row.get("source", "")),
    )


def table(rows: Mapping[str, Mapping], machines: Sequence[str]) -> str:
    """The table of ``machines``' rows, under its head."""
    return "\n".join([_fill("table_head"), *(row_line(m, rows[m]) for m in machines)])


def render_body(state: State, repo: str, server: str) -> str:
    """The issue's body: the culprit or the range, one table row per machine, and (when
    commits in the range were not measured) the commands that find the culprit."""
    span = state.span
    unmeasured = (
        "an unknown number of commits between them were"
        if span.between is None
        else f"{span.between} commit(s) between them were"
    )
    values = {
        "hidden": "\n".join(state.hidden_lines()),
        "culprit": span.culprit,
        "commands": not span.culprit,
        "name": code(state.benchmark),
        "server": server,
        "repo": repo,
        "good": span.good,
        "bad": span.bad,
        "good_short": span.good[:10],
        "bad_short": span.bad[:10],
        "subject": f" {code(span.subject)}" if span.subject else "",
        "by": f" by {code(span.author)}" if span.author else "",
        "unmeasured": unmeasured,
        "table": table(state.rows, sorted(state.rows)),
        "bisect": "\n".join(code_block(bisect_command(state.benchmark, span))),
        "backfill": "\n".join(code_block(backfill_command(state.benchmark, span))),
    }
    return template.fill(_pieces()[template.MAIN], values)


def preview(state: State, repo: str, server: str) -> str:
    """The text a new issue for ``state`` carries: its title as a heading, then its body."""
    return _fill("preview", title=title(state), body=render_body(state, repo, server)) + "\n"


# --- comments ----------------------------------------------------------------------------


def new_machines_comment(rows: Mapping[str, Mapping], news: Sequence[str]) -> str:
    """The comment that names machines showing the step after the issue was opened."""
    return _fill("new_machines", machines=", ".join(news), table=table(rows, news)) + "\n"


def narrowed_comment(span: Span) -> str:
    """The comment saying the step's range narrowed (to one commit: the culprit)."""
    return (
        _fill(
            "narrowed",
            culprit=span.culprit,
            bad_short=span.bad[:10],
            good_short=span.good[:10],
            subject=f" {code(span.subject)}" if span.subject else "",
            between="" if span.between is None else f" ({span.between} commit(s) not measured)",
        )
        + "\n"
    )


def recovered_line(machine: str, now_text: str, commit: str, row: Mapping) -> str:
    """One machine's line of the closing comment: its newest value against the level
    before the step."""
    return _fill(
        "recovered",
        machine=cell(machine),
        now=cell(now_text),
        commit=commit[:10],
        before=cell(row["before_text"]),
        threshold=f"{row['threshold']:.1%}",
    )


def closed_comment(state: State, lines: Sequence[str]) -> str:
    """The comment that closes an issue whose benchmark is back under its threshold."""
    return _fill("closed", name=code(state.benchmark), lines="\n".join(lines)) + "\n"
