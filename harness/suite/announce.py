"""Announce the regressions ``harness.suite.regressions`` found as GitHub issues: one issue
per regression, keyed by benchmark and step, opened once and kept up to date after.

    python -m harness.suite.announce [--repo OWNER/NAME] [--dry-run] PATH [PATH ...]

PATH is a ``regressions.json`` (``nox -s publish`` writes ``.asv/regressions.json``) or a
folder searched for them, one per machine's artifact. The publish workflow runs this in a
job on a GitHub-hosted runner that holds ``issues: write`` and reads only the artifact;
the GPU runner that measured never holds that permission. Stdlib only (the REST API via
urllib, ``$GITHUB_TOKEN``), so it needs nothing installed.

Deduplication: every issue carries a hidden marker ``<!-- regression: BENCHMARK
GOOD..BAD -->`` (full commit hashes) and the label ``perf-regression``. The labelled
issues are listed (open and closed) and searched for the marker:

- none: a new issue, with one table row per machine that shows the step;
- an open one: its body is rewritten with the latest numbers (an edit notifies nobody, so
  an unchanged regression, reported again on every push to main, makes no noise), and a
  comment is added when a machine that was not in it yet shows the step;
- a closed one: left alone, a person closed it (a step that reappears later is another
  step, with another marker).

The body is the announcer's own: discussion belongs in comments. ``--max-new`` bounds the
issues one run opens (a commit that slows the whole suite should not open hundreds): past
it, the rest are listed and the exit status is 1. Exit 0 when done, 2 on bad input or an
API error.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from harness.cli import EXIT_FAILURE, EXIT_OK, EXIT_REGRESSION

LABEL = "perf-regression"
LABEL_COLOR = "d93f0b"
FILE_NAME = "regressions.json"
MAX_NEW = 20
_SHA = re.compile(r"^[0-9a-f]{40}$")
_MACHINE = re.compile(r"^[\w.-]{1,100}$")
_DATA = re.compile(r"<!-- regression-data: (\{.*?\}) -->")

# (method, url, headers, body) -> (status, headers, body)
Transport = Callable[[str, str, Mapping[str, str], bytes | None], tuple[int, dict, bytes]]


class AnnounceError(RuntimeError):
    """Input that cannot be announced, or an API call that failed."""


@dataclass(frozen=True, slots=True)
class Entry:
    """One row of a regressions.json: one benchmark's step on one machine."""

    benchmark: str
    machine: str
    good: str
    bad: str
    before_text: str
    after_text: str
    ratio: float
    threshold: float
    threshold_source: str

    @property
    def key(self) -> str:
        return f"{self.benchmark} {self.good}..{self.bad}"

    def row(self) -> dict:
        return {
            "before": self.before_text,
            "after": self.after_text,
            "ratio": self.ratio,
            "threshold": self.threshold,
            "source": self.threshold_source,
        }


def _entry(obj: object, where: str) -> Entry:
    if not isinstance(obj, dict):
        raise AnnounceError(f"{where}: not an object")

    def field(name: str, kind: type | tuple[type, ...]):
        value = obj.get(name)
        if not isinstance(value, kind) or isinstance(value, bool):
            raise AnnounceError(f"{where}: {name!r} is missing or not {kind}")
        return value

    benchmark = field("benchmark", str)
    # The name goes into an HTML comment and a code span: one line, no comment end.
    if not 0 < len(benchmark) <= 300 or "--" in benchmark or not benchmark.isprintable():
        raise AnnounceError(f"{where}: 'benchmark' {benchmark!r} is not a benchmark name")
    machine = field("machine", str)
    if not _MACHINE.match(machine):
        raise AnnounceError(f"{where}: 'machine' {machine!r} is not a machine name")
    good, bad = field("good", str), field("bad", str)
    for name, sha in (("good", good), ("bad", bad)):
        if not _SHA.match(sha):
            raise AnnounceError(f"{where}: {name!r} {sha!r} is not a full commit hash")
    return Entry(
        benchmark=benchmark,
        machine=machine,
        good=good,
        bad=bad,
        before_text=field("before_text", str)[:40],
        after_text=field("after_text", str)[:40],
        ratio=float(field("ratio", (int, float))),
        threshold=float(field("threshold", (int, float))),
        threshold_source=field("threshold_source", str)[:40],
    )


def _text(value: str) -> str:
    """A short value as inert text of a table cell."""
    value = " ".join(str(value).split())[:40]
    value = value.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    for ch in "\\`*_[]|":
        value = value.replace(ch, "\\" + ch)
    return value


def files(paths: Iterable[Path]) -> list[Path]:
    """The regressions.json files ``paths`` name: files as given, folders searched."""
    out = []
    for path in paths:
        if path.is_dir():
            out += sorted(path.rglob(FILE_NAME))
        elif path.is_file():
            out.append(path)
        else:
            raise AnnounceError(f"{path}: no such file or folder")
    return out


def load(paths: Iterable[Path]) -> list[Entry]:
    entries = []
    for path in paths:
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError) as err:
            raise AnnounceError(f"{path}: not a regressions file ({err})") from None
        if not isinstance(data, list):
            raise AnnounceError(f"{path}: not a regressions file (not a list)")
        entries += [_entry(obj, f"{path}[{i}]") for i, obj in enumerate(data)]
    return entries


# --- issue text --------------------------------------------------------------------------


def marker(key: str) -> str:
    return f"<!-- regression: {key} -->"


def title(entry: Entry) -> str:
    return f"Perf regression: {entry.benchmark} ({entry.good[:8]}..{entry.bad[:8]})"[:250]


def _row_line(machine: str, row: Mapping) -> str:
    return (
        f"| {_text(machine)} | {_text(row['before'])} → {_text(row['after'])} "
        f"| {row['ratio']:.3f} | {row['threshold']:.1%} ({_text(row['source'])}) |"
    )


def render_body(entry: Entry, rows: Mapping[str, Mapping], repo: str, server: str) -> str:
    """The issue's body for ``entry``'s step, one table row per machine in ``rows``."""
    data = json.dumps(rows, sort_keys=True).replace("<", "\\u003c").replace(">", "\\u003e")
    regex = "^" + re.escape(entry.benchmark) + "$"
    lines = [
        marker(entry.key),
        f"<!-- regression-data: {data} -->",
        f"`{entry.benchmark}` got slower between {entry.good[:8]} and {entry.bad[:8]} on "
        "main: its latest step in the stored asv history is a slowdown beyond the "
        "benchmark's noise threshold.",
        "",
        "| machine | before → after | ratio | threshold |",
        "|---|---|---|---|",
        *(_row_line(m, rows[m]) for m in sorted(rows)),
        "",
        f"Commits: {server}/{repo}/compare/{entry.good}...{entry.bad}",
        "",
        "Find the culprit on a GPU runner:",
        "```",
        f"nox -s bisect -- {entry.good} {entry.bad} -b '{regex}'",
        "```",
        "",
        "_Kept up to date by the publish workflow (`harness.suite.announce`): the table "
        "holds the latest numbers, and a comment names each machine that shows the step "
        "later. Discuss in comments; the body is rewritten._",
    ]
    return "\n".join(lines) + "\n"


def parse_rows(body: str) -> dict[str, dict]:
    """The machines' rows an issue body holds (``{}`` if it holds none)."""
    found = _DATA.search(body or "")
    if not found:
        return {}
    try:
        rows = json.loads(found.group(1))
    except ValueError:
        return {}
    if not isinstance(rows, dict):
        return {}
    kinds = {"before": str, "after": str, "ratio": float, "threshold": float, "source": str}

    def valid(row: object) -> bool:
        return isinstance(row, dict) and all(
            isinstance(row.get(k), (int, float) if t is float else t) for k, t in kinds.items()
        )

    return {m: r for m, r in rows.items() if _MACHINE.match(str(m)) and valid(r)}


# --- GitHub ------------------------------------------------------------------------------


def urllib_transport(
    method: str, url: str, headers: Mapping[str, str], body: bytes | None
) -> tuple[int, dict, bytes]:
    request = urllib.request.Request(url, data=body, headers=dict(headers), method=method)
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return response.status, dict(response.headers), response.read()
    except urllib.error.HTTPError as err:
        return err.code, dict(err.headers or {}), err.read()


class GitHub:
    """The few REST calls the announcer makes, over a replaceable transport."""

    def __init__(
        self,
        repo: str,
        token: str,
        transport: Transport = urllib_transport,
        api: str = "https://api.github.com",
        dry_run: bool = False,
        log: Callable[[str], None] = print,
    ):
        self.repo, self.token, self.transport = repo, token, transport
        self.api, self.dry_run, self.log = api.rstrip("/"), dry_run, log

    def call(self, method: str, path: str, body: dict | None = None) -> tuple[object, dict]:
        url = path if path.startswith("http") else f"{self.api}/repos/{self.repo}{path}"
        if self.dry_run and method != "GET":
            self.log(f"dry run: {method} {url} {json.dumps(body)[:200]}")
            return {"number": 0}, {}
        headers = {
            "Accept": "application/vnd.github+json",
            "Authorization": f"Bearer {self.token}",
            "X-GitHub-Api-Version": "2022-11-28",
            "User-Agent": "tilelang-gemm-perf-announce",
        }
        data = None
        if body is not None:
            headers["Content-Type"] = "application/json"
            data = json.dumps(body).encode()
        status, got_headers, raw = self.transport(method, url, headers, data)
        if not 200 <= status < 300:
            raise AnnounceError(f"{method} {url}: HTTP {status}: {raw[:300]!r}")
        return (json.loads(raw) if raw else None), got_headers

    def labelled_issues(self) -> list[dict]:
        """Every issue (open or closed, no pull request) with the label, following pages."""
        query = urllib.parse.urlencode({"labels": LABEL, "state": "all", "per_page": 100})
        url, out = f"{self.api}/repos/{self.repo}/issues?{query}", []
        while url:
            page, headers = self.call("GET", url)
            out += [i for i in page or [] if "pull_request" not in i]
            url = _next_link(headers)
        return out

    def ensure_label(self) -> None:
        try:
            self.call("GET", f"/labels/{LABEL}")
        except AnnounceError:
            self.call("POST", "/labels", {"name": LABEL, "color": LABEL_COLOR})

    def create_issue(self, title: str, body: str) -> int:
        issue, _ = self.call("POST", "/issues", {"title": title, "body": body, "labels": [LABEL]})
        return int(issue["number"])

    def edit_issue(self, number: int, body: str) -> None:
        self.call("PATCH", f"/issues/{number}", {"body": body})

    def comment(self, number: int, body: str) -> None:
        self.call("POST", f"/issues/{number}/comments", {"body": body})


def _next_link(headers: Mapping[str, str]) -> str | None:
    link = next((v for k, v in headers.items() if k.lower() == "link"), "")
    found = re.search(r'<([^>]+)>;\s*rel="next"', link)
    return found.group(1) if found else None


# --- deciding ----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Outcome:
    action: str  # created, updated, unchanged, closed, held (past --max-new)
    key: str
    number: int | None = None


def announce(
    entries: Sequence[Entry],
    gh: GitHub,
    server: str = "https://github.com",
    max_new: int = MAX_NEW,
) -> list[Outcome]:
    """Open or update one issue per step (benchmark and ``good..bad``) in ``entries``."""
    steps: dict[str, dict[str, Entry]] = {}
    for e in entries:
        steps.setdefault(e.key, {})[e.machine] = e
    if not steps:
        return []
    issues = sorted(gh.labelled_issues(), key=lambda i: i["number"])
    outcomes, created = [], 0
    for key, by_machine in steps.items():
        first = next(iter(by_machine.values()))
        rows = {m: e.row() for m, e in by_machine.items()}
        found = [i for i in issues if marker(key) in (i.get("body") or "")]
        issue = next((i for i in found if i.get("state") == "open"), found[0] if found else None)
        if issue is None:
            if created >= max_new:
                outcomes.append(Outcome("held", key))
                continue
            if created == 0:
                gh.ensure_label()
            body = render_body(first, rows, gh.repo, server)
            outcomes.append(Outcome("created", key, gh.create_issue(title(first), body)))
            created += 1
            continue
        number = int(issue["number"])
        if issue.get("state") != "open":
            outcomes.append(Outcome("closed", key, number))
            continue
        old = parse_rows(issue.get("body") or "")
        body = render_body(first, {**old, **rows}, gh.repo, server)
        news = sorted(set(rows) - set(old))
        if body == issue.get("body") and not news:
            outcomes.append(Outcome("unchanged", key, number))
            continue
        gh.edit_issue(number, body)
        if news:
            lines = [f"Also slower on {', '.join(news)}:", ""]
            lines += ["| machine | before → after | ratio | threshold |", "|---|---|---|---|"]
            lines += [_row_line(m, rows[m]) for m in news]
            gh.comment(number, "\n".join(lines) + "\n")
        outcomes.append(Outcome("updated", key, number))
    return outcomes


def main(argv: list[str] | None = None, transport: Transport = urllib_transport) -> int:
    p = argparse.ArgumentParser(
        prog="python -m harness.suite.announce",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("paths", nargs="+", type=Path, help="regressions.json files or folders")
    p.add_argument("--repo", default=os.environ.get("GITHUB_REPOSITORY"), help="OWNER/NAME")
    p.add_argument("--max-new", type=int, default=MAX_NEW, help="issues one run may open")
    p.add_argument("--dry-run", action="store_true", help="read issues, write nothing")
    args = p.parse_args(argv)

    def fail(why: str) -> int:
        print(f"{p.prog}: error: {why}", file=sys.stderr)
        return EXIT_FAILURE

    if not args.repo or not re.match(r"^[\w.-]+/[\w.-]+$", args.repo):
        return fail(f"--repo={args.repo!r}: need OWNER/NAME (or $GITHUB_REPOSITORY)")
    token = os.environ.get("GITHUB_TOKEN", "")
    if not token:
        return fail("$GITHUB_TOKEN is not set")
    try:
        found = files(args.paths)
        entries = load(found)
    except AnnounceError as err:
        return fail(str(err))
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
    server = os.environ.get("GITHUB_SERVER_URL", "https://github.com")
    try:
        outcomes = announce(entries, gh, server, max_new=args.max_new)
    except AnnounceError as err:
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
