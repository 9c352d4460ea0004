"""Announce the regressions ``harness.suite.regressions`` found as GitHub issues: one issue
per step of a benchmark, opened once, kept up to date, and closed once the benchmark is
back under its threshold.

    python -m harness.suite.announce [--repo OWNER/NAME] [--author LOGIN] [--max-new N]
                                     [--dry-run] PATH [PATH ...]

PATH is a ``regressions.json`` (``nox -s publish`` writes ``.asv/regressions.json``;
``harness.suite.regressions_file`` reads it, every field checked) or a folder searched
for them, one per machine's artifact. The publish workflow runs this in a
job on a GitHub-hosted runner that holds ``issues: write`` and reads only the artifact;
the GPU runner that measured never holds that permission. Stdlib only (the REST API via
urllib, ``$GITHUB_TOKEN``; ``harness.suite.github_api``), so it needs nothing installed.

A step is a benchmark and a range of the branch's first-parent commits (after GOOD, up to
BAD). Machines whose ranges for one benchmark overlap show one step: one issue, with one
table row per machine, on the commits all of them hold. When GOOD and BAD are adjacent
(publish measures every commit, so this is the usual case) the issue names BAD as the
culprit, with its subject and author; otherwise it says how many commits were not
measured and gives the ``bisect`` and ``backfill`` commands (``harness.report.issue``).

Only issues with the label ``perf-regression`` that this identity opened are read or
written (``--author``, default the token's login: ``harness.suite.github_api``); a
person's issue that quotes the marker is never touched. For each step:

- no issue of ours whose range overlaps it: a new issue;
- an open one: its body is rewritten with the latest numbers and the narrowest range (an
  edit notifies nobody, so an unchanged regression, reported again on every push to main,
  makes no noise); a comment is added when a machine that was not in it yet shows the
  step, or when the range narrowed;
- a closed one: left alone (a step that reappears later is another step).

An open issue of ours whose benchmark is no longer a regression on any of its machines,
and whose newest value on each is within the threshold of the level before the step
(``latest`` in regressions.json), gets a comment saying so and is closed. A machine whose
file is missing from the run leaves the issue open.

The body is the announcer's own: discussion belongs in comments. ``--max-new`` bounds the
issues one run opens (a commit that slows the whole suite should not open hundreds): past
it, the rest are listed and the exit status is 1. Exit 0 when done, 2 on bad input or an
API error (one line, the token scrubbed).
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from harness.cli import EXIT_FAILURE, EXIT_OK, EXIT_REGRESSION, count
from harness.report import issue as text
from harness.suite.github_api import ApiError, GitHub, Transport, urllib_transport
from harness.suite.issue_state import State, parse
from harness.suite.regressions_file import FILE_NAME, Entry, FileError, Latest, files, load

MAX_NEW = 20
_LOGIN = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9-]{0,38})(?:\[bot\])?$")


# --- deciding ----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Outcome:
    action: str  # created, updated, unchanged, closed (back under), left (closed), held
    key: str
    number: int | None = None


def steps(entries: Sequence[Entry]) -> list[State]:
    """The steps ``entries`` show: one per benchmark and overlapping range, on the
    commits every machine's range holds, with each machine's row."""
    out: list[State] = []
    for e in entries:
        i = next(
            (
                i
                for i, s in enumerate(out)
                if s.benchmark == e.benchmark and s.span.overlaps(e.span)
            ),
            None,
        )
        if i is None:
            out.append(State(e.benchmark, e.span, {e.machine: e.row}))
        else:
            s = out[i]
            out[i] = State(s.benchmark, s.span.narrow(e.span), {**s.rows, e.machine: e.row})
    return out


def _ours(issues: Iterable[dict], me: str) -> list[tuple[dict, State]]:
    """The issues ``me`` opened that hold a step, oldest first."""
    out = []
    for issue in sorted(issues, key=lambda i: int(i.get("number", 0))):
        author = (issue.get("user") or {}).get("login", "")
        if not isinstance(author, str) or author.lower() != me.lower():
            continue
        state = parse(issue.get("body"))
        if state is not None:
            out.append((issue, state))
    return out


def _recovered(state: State, latest: Mapping, regressing: set) -> list[str] | None:
    """Per machine of the issue, why it is back under its threshold; None while any
    machine still regresses, lacks a newest value, or is not back within it."""
    lines = []
    for machine, row in sorted(state.rows.items()):
        now = latest.get((state.benchmark, machine))
        before = row.get("before_value")
        if (state.benchmark, machine) in regressing or now is None:
            return None
        if not isinstance(before, (int, float)) or now.value > before * (1 + row["threshold"]):
            return None
        lines.append(text.recovered_line(machine, now.text, now.commit, row))
    return lines or None


def announce(
    entries: Sequence[Entry],
    gh: GitHub,
    me: str,
    server: str = "https://github.com",
    max_new: int = MAX_NEW,
    latest: Sequence[Latest] = (),
) -> list[Outcome]:
    """Open, update or close this identity's (``me``) issues for ``entries``' steps."""
    found = steps(entries)
    if not found and not latest:
        return []
    ours = _ours(gh.labelled_issues(), me)
    outcomes, created, matched = [], 0, set()
    for step in found:
        hits = [
            (i, s) for i, s in ours if s.benchmark == step.benchmark and s.span.overlaps(step.span)
        ]
        matched.update(int(i["number"]) for i, _ in hits)
        open_ = [(i, s) for i, s in hits if i.get("state") == "open"]
        if not hits:
            if created >= max_new:
                outcomes.append(Outcome("held", step.key))
                continue
            if created == 0:
                gh.ensure_label()
            body = text.render_body(step, gh.repo, server)
            outcomes.append(Outcome("created", step.key, gh.create_issue(text.title(step), body)))
            created += 1
            continue
        if not open_:
            outcomes.append(Outcome("left", step.key, int(hits[0][0]["number"])))
            continue
        issue, old = open_[0]
        number = int(issue["number"])
        new = State(step.benchmark, old.span.narrow(step.span), {**old.rows, **step.rows})
        body, title = text.render_body(new, gh.repo, server), text.title(new)
        news = sorted(set(step.rows) - set(old.rows))
        narrowed = (new.span.good, new.span.bad) != (old.span.good, old.span.bad)
        if body == issue.get("body") and title == issue.get("title") and not news:
            outcomes.append(Outcome("unchanged", new.key, number))
            continue
        gh.edit_issue(number, body=body, title=title)
        if news:
            gh.comment(number, text.new_machines_comment(step.rows, news))
        if narrowed:
            gh.comment(number, text.narrowed_comment(new.span))
        outcomes.append(Outcome("updated", new.key, number))
    by_key = {(x.benchmark, x.machine): x for x in latest}
    regressing = {(e.benchmark, e.machine) for e in entries}
    for issue, state in ours:
        if issue.get("state") != "open" or int(issue["number"]) in matched:
            continue
        why = _recovered(state, by_key, regressing)
        if why is None:
            continue
        number = int(issue["number"])
        gh.comment(number, text.closed_comment(state, why))
        gh.edit_issue(number, state="closed", state_reason="completed")
        outcomes.append(Outcome("closed", state.key, number))
    return outcomes


# --- command line ------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m harness.suite.announce",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("paths", nargs="+", type=Path, help="regressions.json files or folders")
    p.add_argument("--repo", default=os.environ.get("GITHUB_REPOSITORY"), help="OWNER/NAME")
    p.add_argument(
        "--max-new",
        type=count,
        default=MAX_NEW,
        help=f"issues one run may open, >= 0 (default {MAX_NEW})",
    )
    p.add_argument(
        "--author",
        default=None,
        help="the login whose issues are ours (default: the token's, from GET /user; "
        "an installation token that is refused there: github-actions[bot])",
    )
    p.add_argument("--dry-run", action="store_true", help="read issues, write nothing")
    p.add_argument(
        "--render",
        type=Path,
        default=None,
        metavar="DIR",
        help="write each step's new-issue text to DIR/step-N.md and stop: no token, no API",
    )
    return p


def render_steps(entries: Sequence[Entry], folder: Path, repo: str, server: str) -> list[Path]:
    """Each step's issue text as a new issue would carry it (title line, then body)."""
    folder.mkdir(parents=True, exist_ok=True)
    out = []
    for i, state in enumerate(steps(entries), 1):
        path = folder / f"step-{i}.md"
        path.write_text(text.preview(state, repo, server))
        out.append(path)
    return out


def main(argv: list[str] | None = None, transport: Transport = urllib_transport) -> int:
    p = build_parser()
    args = p.parse_args(argv)

    def fail(why: str) -> int:
        print(f"{p.prog}: error: {why}", file=sys.stderr)
        return EXIT_FAILURE

    if not args.repo or not re.match(r"^[\w.-]+/[\w.-]+$", args.repo):
        return fail(f"--repo={args.repo!r}: need OWNER/NAME (or $GITHUB_REPOSITORY)")
    if args.author is not None and not _LOGIN.match(args.author):
        return fail(f"--author={args.author!r}: not a GitHub login (or an app's NAME[bot])")
    try:
        found = files(args.paths)
        entries, latest = load(found)
    except FileError as err:
        return fail(str(err))
    server = os.environ.get("GITHUB_SERVER_URL", "https://github.com")
    if args.render is not None:
        try:
            written = render_steps(entries, args.render, args.repo, server)
        except OSError as err:
            return fail(f"--render={args.render}: cannot write there ({err.strerror})")
        for path in written:
            print(f"wrote {path}")
        print(f"{len(entries)} regression row(s) from {len(found)} file(s), {len(written)} step(s)")
        return EXIT_OK
    token = os.environ.get("GITHUB_TOKEN", "")
    if not token:
        return fail("$GITHUB_TOKEN is not set")
    if not found:
        print(f"no {FILE_NAME} under {', '.join(map(str, args.paths))}: nothing to announce")
        return EXIT_OK
    gh = GitHub(
        args.repo,
        token,
        transport,
        api=os.environ.get("GITHUB_API_URL", "https://api.github.com"),
        dry_run=args.dry_run,
    )
    try:
        me = args.author or (gh.login() if entries or latest else "")
        outcomes = announce(entries, gh, me, server, max_new=args.max_new, latest=latest)
    except ApiError as err:
        return fail(str(err))
    for o in outcomes:
        print(f"{o.action}{'' if o.number is None else f' #{o.number}'}: {o.key}")
    print(f"{len(entries)} regression row(s) from {len(found)} file(s), {len(outcomes)} step(s)")
    held = [o for o in outcomes if o.action == "held"]
    if held:
        print(
            f"{len(held)} new step(s) not opened past --max-new={args.max_new}; see regressions.md",
            file=sys.stderr,
        )
        return EXIT_REGRESSION
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
