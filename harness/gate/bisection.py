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
import re
import sys
import time
from collections.abc import Iterable
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
from harness.gate.bisection_record import Record, to_json, verdict_statuses
from harness.gate.bisection_search import first_bad, settle
from harness.policy import BAD, GOOD, SKIP
from harness.report.bisection import render, render_stopped
from harness.revisions import git, launch, placement, records
from harness.suite import discovery

# Long enough for any real branch, short enough that a swapped or mistyped GOOD (the
# repository's first commit, say) is refused instead of measured for hours.
DEFAULT_MAX_COMMITS = 256


class BisectError(RuntimeError):
    """Bisect cannot go on: bad input, or the gate failed for GOOD or BAD themselves."""


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
        report = render_stopped(message, record.comparisons[record.bad].report)
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
    statuses = verdict_statuses(ends)
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
