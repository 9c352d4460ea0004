"""The first bad commit between two revisions, by the gate's own rule.

    nox -s bisect -- GOOD BAD [-b REGEX] [--method auto] [--threshold T] [--gpus 0,1]
                              [--out .gate/bisect] [--max-commits 256] [--calibration FILE]
    python -m harness.gate.bisection GOOD BAD ...

``-b REGEX`` selects as the suite runner does (``harness.suite.discovery.selected``): by
asv's name of a benchmark (``gemm.Stage.track_latency('4096x4096x4096', 128, 3, 'f16')``,
as ``nox -s regressions`` and its issues name it) or by the gate's name of its combination
(``gemm.Stage(4096x4096x4096, 128, 3, f16)``); a combination is measured whole.

First GOOD is compared against BAD with ``harness.gate.run.compare`` (worktrees, the same
GPU, interleaved rounds, the same thresholds and calibration). The benchmarks that regressed
there are the only ones measured afterwards: each step compares GOOD against one commit of
BAD's first-parent history (merges count as one commit) and binary-searches for the first
one where any of them regresses, in about log2(N) steps for N commits.

A commit where a measured benchmark fails to build or run (or is missing) is skipped, as
``git bisect skip`` does, and a neighbour is probed instead. When skipped commits sit next
to the first bad one, the answer is the range of candidates between the last good and the
first bad commit.

The evidence shown is the comparison that convicted the culprit (GOOD against it), already
measured, paired with the step that found its parent good. Comparing the culprit against
its parent directly would cost another comparison, and could pass for a regression that
built up in steps each smaller than the threshold.

Writes ``bisect.json`` and ``report.md`` to ``--out``. Exit status: 0 the first bad commit
(or the range of candidates) was found, 1 no regression between GOOD and BAD, 2 bad input,
no GPU, or the gate failed on GOOD or BAD themselves; 130 interrupted (what finished is
written).
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from harness.cli import (
    EXIT_FAILURE,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_REGRESSION,
    output_dir,
    positive_int,
)
from harness.gate import decide as gd
from harness.gate import run as gate
from harness.revisions import git, launch, placement, records
from harness.suite import discovery

GOOD = "good"
BAD = "bad"
SKIP = "skip"
OUTCOMES = (GOOD, BAD, SKIP)

# Long enough for any real branch, short enough that a swapped or mistyped GOOD (the
# repository's first commit, say) is refused instead of measured for hours.
DEFAULT_MAX_COMMITS = 256


class BisectError(RuntimeError):
    """Bisect cannot go on: bad input, or the gate failed for GOOD or BAD themselves."""


# The search: pure, over an oracle.


@dataclass(frozen=True, slots=True)
class Search:
    """Where a search over ``commits`` stands, given the outcomes probed so far.

    ``commits`` are the commits after GOOD, oldest first, ending with BAD; GOOD is known
    good and BAD known bad, so neither is probed. The first bad commit lies in
    ``commits[lo + 1 : hi + 1]`` (``lo == -1``: GOOD is the last good commit).
    """

    commits: tuple[str, ...]
    outcomes: Mapping[str, str]
    lo: int
    hi: int

    @property
    def candidates(self) -> tuple[str, ...]:
        """The commits that may be the first bad one, oldest first (the last is bad)."""
        return self.commits[self.lo + 1 : self.hi + 1]

    @property
    def culprit(self) -> str | None:
        """The first bad commit, when the search pinned it to one."""
        return self.candidates[0] if len(self.candidates) == 1 else None

    @property
    def probes(self) -> list[tuple[str, str]]:
        """(sha, outcome) of every probe, in the order they were made."""
        return list(self.outcomes.items())

    def next_probe(self) -> str | None:
        """The untried commit nearest the middle of the open range, or None when every
        commit between the last good and the first bad one was probed (or skipped)."""
        mid = (self.lo + self.hi) // 2
        open_ = [i for i in range(self.lo + 1, self.hi) if self.commits[i] not in self.outcomes]
        if not open_:
            return None
        return self.commits[min(open_, key=lambda i: (abs(i - mid), i))]


def settle(commits: Iterable[str], outcomes: Mapping[str, str]) -> Search:
    """The search state that ``outcomes`` (sha -> good/bad/skip) leave on ``commits``."""
    commits = tuple(commits)
    if not commits:
        raise ValueError("commits: empty; BAD itself must be the last one")
    unknown = {o for o in outcomes.values() if o not in OUTCOMES}
    if unknown:
        raise ValueError(f"outcomes: {sorted(unknown)} not among {OUTCOMES}")
    index = {sha: i for i, sha in enumerate(commits)}
    bad = [index[sha] for sha, o in outcomes.items() if o == BAD and sha in index]
    hi = min(bad, default=len(commits) - 1)
    good = [index[sha] for sha, o in outcomes.items() if o == GOOD and index.get(sha, hi) < hi]
    return Search(commits, dict(outcomes), max(good, default=-1), hi)


def first_bad(
    commits: Iterable[str],
    probe: Callable[[str], str],
    log: Callable[[str], None] = lambda line: None,
    outcomes: dict[str, str] | None = None,
) -> Search:
    """Binary-search ``commits`` (after GOOD, oldest first, ending with BAD) for the first
    bad one; ``probe(sha)`` says ``"good"``, ``"bad"`` or ``"skip"``. Without skips it
    probes at most ceil(log2(len(commits))) commits. ``outcomes`` is filled as probes
    finish, so a caller that is interrupted keeps them."""
    outcomes = {} if outcomes is None else outcomes
    state = settle(commits, outcomes)
    while (sha := state.next_probe()) is not None:
        left = len(state.candidates)
        step = len(outcomes) + 1
        log(
            f"bisect: step {step}/~{step - 1 + math.ceil(math.log2(left))}: probing {sha[:7]} "
            f"({left} commits left)"
        )
        outcome = probe(sha)
        if outcome not in OUTCOMES:
            raise ValueError(f"probe({sha[:7]}) returned {outcome!r}, not one of {OUTCOMES}")
        outcomes[sha] = outcome
        state = settle(commits, outcomes)
    return state


# Judging one comparison: pure.


def side_failed(rounds: list, side: str) -> bool:
    """Whether the worker of ``side`` failed in any round, as a whole or on a benchmark.
    A process round holds one record per side; a paired round is one record of all."""
    for r in rounds:
        run = r.get(side) if isinstance(r, dict) else r
        if run is None:
            continue
        if isinstance(run, records.Fatal):  # a paired one names its side, else all failed
            if run.side in (None, side):
                return True
            continue
        for entry in run.results.values():
            got = entry.sides.get(side) if isinstance(entry, records.Paired) else entry
            if got is not None and got.error is not None:
                return True
    return False


def judge(comparison: gate.Comparison, names: Iterable[str]) -> str:
    """A probe's outcome from GOOD (base) against the probed commit (head), on the
    benchmarks ``names``: bad when any regressed, good when every one was measured and
    none regressed, skip when the probed commit could not be measured on one of them (it
    failed to build or run, or lacks the benchmark). GOOD failing is no property of the
    probe: a BisectError."""
    statuses = {v.name: v.status for v in comparison.verdicts}
    if gd.REGRESSION in statuses.values():
        return BAD
    if side_failed(comparison.rounds, "base") or (
        not statuses and not side_failed(comparison.rounds, "head")
    ):
        raise BisectError("the gate failed on GOOD, which measured fine before (report above)")
    if all(statuses.get(name) in (gd.UNCHANGED, gd.IMPROVEMENT) for name in names):
        return GOOD
    return SKIP


def exactly(names: Iterable[str]) -> str:
    """A ``--bench`` regex that matches these combination names and nothing else."""
    return "^(?:" + "|".join(re.escape(n) for n in names) + ")$"


# Rendering: text and markdown of a finished (or interrupted) bisect.


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


def _statuses(comparison: gate.Comparison) -> dict[str, str]:
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
        for status in _statuses(comparison).values():
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
            {**commit(sha), "outcome": o, "verdicts": _statuses(record.comparisons[sha])}
            for sha, o in probes
            if sha in record.comparisons
        ],
        "wall_s": round(record.wall_s, 1),
        "interrupted": record.interrupted,
        "exit": code,
    }


# The command: validation, then the gate's comparisons.


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="nox -s bisect --",
        description="Find the first commit between GOOD and BAD that the gate finds slower.",
        epilog="Exit: 0 culprit (or candidate range) found, 1 no regression between GOOD "
        "and BAD, 2 bad input, no GPU or the gate failed on GOOD or BAD, 130 interrupted.",
    )
    p.add_argument("good", help="a revision without the regression (e.g. v0.3)")
    p.add_argument("bad", help="a later revision with it (e.g. origin/main)")
    gate.add_comparison_options(p)
    p.add_argument(
        "--out",
        type=output_dir,
        default=None,
        help="work and report folder (default: .gate/bisect)",
    )
    p.add_argument(
        "--max-commits",
        type=positive_int,
        default=DEFAULT_MAX_COMMITS,
        help=f"refuse longer ranges (default {DEFAULT_MAX_COMMITS})",
    )
    return p


def commit_range(good_rev: str, bad_rev: str, max_commits: int, repo: Path) -> list[str]:
    """GOOD's and BAD's hashes and the first-parent commits after GOOD up to BAD, checked:
    a BisectError naming the argument when they make no range to search."""
    good = git.resolve(good_rev, "GOOD", cwd=repo)
    bad = git.resolve(bad_rev, "BAD", cwd=repo)
    if good == bad:
        raise BisectError(f"GOOD={good_rev!r} and BAD={bad_rev!r} are the same commit: empty range")
    if not git.is_ancestor(good, bad, cwd=repo):
        if git.is_ancestor(bad, good, cwd=repo):
            raise BisectError(
                f"BAD={bad_rev!r} comes before GOOD={good_rev!r}: empty range (swapped?)"
            )
        raise BisectError(f"GOOD={good_rev!r} is not an ancestor of BAD={bad_rev!r}")
    commits = git.first_parent_range(good, bad, cwd=repo)
    if not commits or git.git("rev-parse", f"{commits[0]}^", cwd=repo) != good:
        raise BisectError(
            f"GOOD={good_rev!r} is not on BAD's first-parent history (it came in through a "
            "merge); use a commit of the branch itself, such as that merge's first parent"
        )
    if len(commits) > max_commits:
        raise BisectError(
            f"GOOD..BAD holds {len(commits)} first-parent commits, more than "
            f"--max-commits={max_commits}; raise it or narrow the range"
        )
    return [good, *commits]


def check_bench(good: str, bad: str, bench: str, out: Path) -> None:
    """Refuse a ``--bench`` that matches nothing on GOOD and BAD, before any GPU work."""
    names: dict[str, None] = {}
    for what, sha in (("GOOD", good), ("BAD", bad)):
        tree = git.worktree(out, what.lower(), sha)
        try:
            got = launch.listing(tree, bench, out / f"{what}-names.json")
        finally:
            git.remove_worktree(tree)
        if isinstance(got, records.Fatal):
            raise BisectError(f"listing the benchmarks of {what} failed: {got.fatal}")
        names.update(dict.fromkeys(got.names))
    if not names:
        raise BisectError(f"--bench={bench!r} matches no benchmark on GOOD or BAD")


def _write(out: Path, record: Record, code: int, message: str | None) -> None:
    (out / "bisect.json").write_text(json.dumps(to_json(record, code), indent=2) + "\n")
    if record.search is not None:
        report = render(record)
    else:  # stopped after comparing GOOD with BAD: that comparison is the report
        report = f"bisect: {message}\n\n{record.comparisons[record.bad].report}"
    (out / "report.md").write_text(report)


def main(argv: list[str] | None = None) -> int:
    """Validate everything, check for a GPU, compare GOOD with BAD, then search."""
    args = build_parser().parse_args(argv)
    start = time.perf_counter()
    log = lambda line: print(line, file=sys.stderr, flush=True)  # noqa: E731
    repo = git.ROOT
    out = (args.out or repo / ".gate" / "bisect").resolve()
    out.mkdir(parents=True, exist_ok=True)
    try:
        if args.calibration is not None and not args.calibration.is_file():
            raise BisectError(f"--calibration={args.calibration}: no such file")
        good, *commits = commit_range(args.good, args.bad, args.max_commits, repo)
        bad = commits[-1]
        bench = args.bench or discovery.gate_subset(git.ROOT)
        check_bench(good, bad, bench, out)
    except (BisectError, git.RevisionError, RuntimeError) as err:
        print(f"bisect: error: {err}", file=sys.stderr)
        return EXIT_FAILURE
    try:
        gpus = placement.gpus_for(args.gpus)
    except ValueError as err:
        print(f"bisect: error: {err}", file=sys.stderr)
        return EXIT_FAILURE

    listed = git.git("log", "--no-walk=unsorted", "--format=%H %s", good, *commits, cwd=repo)
    subjects = dict((line.split(" ", 1) + [""])[:2] for line in listed.splitlines())
    # One method for every probe, the one GOOD against BAD calls for, with its defaults.
    method, why = gate.choose_method(args.method, {"base": good, "head": bad}, repo)
    rounds = args.rounds or gate.DEFAULT_ROUNDS[method]
    threshold = gate.THRESHOLDS[method] if args.threshold is None else args.threshold
    log(f"bisect: method {method} ({why})")
    record = Record(good, bad, bench, commits, subjects, rounds, threshold)

    def compare(sha: str, measured: str) -> gate.Comparison:
        shas = {"base": good, "head": sha}
        comparison = gate.compare(
            shas, measured, rounds, out, threshold, gpus, args.calibration, log, method
        )
        record.comparisons[sha] = comparison
        return comparison

    def finish(code: int, message: str | None = None) -> int:
        record.wall_s = time.perf_counter() - start
        if record.comparisons:
            _write(out, record, code, message)
        if message:
            print(f"bisect: {message}", file=sys.stderr)
        return code

    log(f"bisect: {len(commits)} commits from GOOD {good[:7]} to BAD {bad[:7]}; GOOD vs BAD first")
    try:
        ends = compare(bad, bench)
    except KeyboardInterrupt:
        return finish(EXIT_INTERRUPTED, "interrupted before GOOD and BAD were compared")
    statuses = _statuses(ends)
    base_failed = side_failed(ends.rounds, "base")
    head_failed = gd.FAILED in statuses.values() or side_failed(ends.rounds, "head")
    if not statuses and not (base_failed or head_failed):
        return finish(EXIT_FAILURE, f"error: --bench={bench!r} matched no benchmark")
    if base_failed or head_failed:
        print(ends.report)
        side = "GOOD" if base_failed else "BAD"
        return finish(
            EXIT_FAILURE,
            f"error: the gate failed on {side} itself (report above); narrow --bench to "
            "benchmarks that build and run on both",
        )
    record.regressed = [name for name, s in statuses.items() if s == gd.REGRESSION]
    if not record.regressed:
        print(ends.report)
        return finish(EXIT_REGRESSION, "no regression between GOOD and BAD")
    log(f"bisect: {len(record.regressed)} regressed; measuring only those from now on")
    measured = exactly(record.regressed)
    outcomes: dict[str, str] = {}
    try:
        record.search = first_bad(
            commits, lambda sha: judge(compare(sha, measured), record.regressed), log, outcomes
        )
    except KeyboardInterrupt:
        record.search = settle(commits, outcomes)
        record.interrupted = True
    except BisectError as err:
        print(list(record.comparisons.values())[-1].report)
        record.search = settle(commits, outcomes)
        return finish(EXIT_FAILURE, f"error: {err}")
    record.wall_s = time.perf_counter() - start
    print(render(record))
    if record.interrupted:
        return finish(EXIT_INTERRUPTED, f"interrupted; what finished is in {out}")
    return finish(EXIT_OK)


if __name__ == "__main__":
    sys.exit(main())
