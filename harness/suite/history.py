"""History without gaps: measure every commit that has no stored results, oldest first,
each in its own git worktree on the existing environment.

    nox -s publish [-- --max-commits 8] [-- -b REGEX]      # CI on main
    nox -s backfill -- REV_RANGE [-b REGEX] [--max-commits N]
    python -m harness.suite.history backfill HEAD~16..HEAD -b 'gemm\\.Tuned'

``publish`` checks out the results branch into asv's results folder, measures every
first-parent commit of the branch after the newest one stored there (at most
``--max-commits``; the rest are named and left for the next run), pushes the results
(fetch, rebase and retry when the branch moved; never a force-push), runs the regression
detector and ``asv publish``. ``backfill`` measures the commits of any range and skips
the ones already stored. Each commit runs with its own suite, kernels and harness
(``--set-commit-hash``; the worktree first on ``ASV_PYTHONPATH``), one ``asv run`` per
unit (``harness.suite.run``), so an interrupted commit resumes where it stopped.

A commit whose suite cannot be listed (it does not import or build) is stored as failed
for the machine, with the first line of its error (``result_files.record_failure``), and
the run goes on to the next commit. A commit stored as failed counts as stored, and is
not tried again unless ``--retry-failed``.

Exit status: 0 all measured, 2 a benchmark or commit failed (after everything else was
measured and pushed), 130 interrupted (what finished is stored).
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import time
from pathlib import Path

from harness.cli import EXIT_FAILURE, EXIT_INTERRUPTED, EXIT_OK, positive_int, regex
from harness.revisions import git
from harness.suite import discovery, result_files, results_branch
from harness.suite.run import run_target
from harness.suite.target import CPU_LANE, Lane, SuiteError, Target

ROOT = git.ROOT
DEFAULT_MAX_COMMITS = 16
# The default selection: the gate's subset plus the tuned configs, the benchmarks a
# history is read for. ``-b .`` takes the whole suite.
TUNED = r"^gemm\.Tuned\("


class RangeError(ValueError):
    """A revision range that cannot be measured, naming the argument."""


def commits_in(rev_range: str, cwd: Path = ROOT) -> list[str]:
    """First-parent commits of ``rev_range`` (``A..B``, or one revision: its history),
    oldest first."""
    if ".." in rev_range:
        good, _, bad = rev_range.partition("..")
        good_sha = git.resolve(good or "HEAD", "REV_RANGE start", cwd)
        bad_sha = git.resolve(bad or "HEAD", "REV_RANGE end", cwd)
        if not git.is_ancestor(good_sha, bad_sha, cwd):
            raise RangeError(f"REV_RANGE={rev_range!r}: {good} is not an ancestor of {bad}")
        return git.first_parent_range(good_sha, bad_sha, cwd)
    sha = git.resolve(rev_range, "REV_RANGE", cwd)
    return git.git("rev-list", "--first-parent", "--reverse", sha, cwd=cwd).split()


def results_dir(root: Path = ROOT) -> Path:
    conf = discovery.read_asv_conf(root)
    return (root / conf.get("results_dir", "results")).resolve()


def stored_commits(results: Path, machine: str) -> set[str]:
    """Full hashes with a results file for ``machine``."""
    out = set()
    for path in (results / machine).glob("*.json"):
        if path.name == "machine.json":
            continue
        try:
            out.add(json.loads(path.read_text())["commit_hash"])
        except (OSError, ValueError, KeyError, TypeError):
            continue
    return out


def after_newest_stored(branch: str, results: Path, machine: str, cwd: Path = ROOT) -> list[str]:
    """Commits of ``branch`` from the newest one stored for ``machine`` on, oldest first
    (the whole first-parent history when nothing is stored). The newest stored one comes
    first: an interrupted run left it partial, and the runner measures only what it
    lacks. A commit stored as failed counts as stored."""
    history = commits_in(branch, cwd)
    have = stored_commits(results, machine)
    newest = max((i for i, sha in enumerate(history) if sha in have), default=0)
    return history[newest:]


def commit_config(tree: Path, root: Path = ROOT) -> Path:
    """An asv configuration for measuring ``tree`` (an older commit's worktree): its own
    benchmark folder, this checkout's results, html and environments, absolute paths."""
    conf = discovery.read_asv_conf(tree)
    mine = discovery.read_asv_conf(root)
    conf.update(
        repo=str(root),
        benchmark_dir=str(tree / conf.get("benchmark_dir", "benchmarks")),
        results_dir=str(results_dir(root)),
        html_dir=str((root / mine.get("html_dir", "html")).resolve()),
        env_dir=str((root / mine.get("env_dir", "env")).resolve()),
    )
    path = tree / ".asv" / "history.conf.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(conf, indent=1))
    return path


def _precompile(tree: Path, env: dict) -> None:
    """Fill TileLang's cache with the commit's kernels over all cores, through that
    commit's own precompile command (its layout decides where it lives)."""
    for module, args in (
        ("harness/suite/precompile.py", ["-m", "harness.suite.precompile"]),
        ("harness/precompile.py", ["-m", "harness.precompile", "asv_bench.gemm"]),
    ):
        if (tree / module).exists():
            subprocess.run([sys.executable, *args], cwd=tree, env=env, check=False)
            return


def measure(
    commits: list[str],
    machine: str,
    user: list[str],
    gpu: bool,
    log=print,
    retry_failed: bool = False,
) -> dict[str, int]:
    """Measure each commit in its own worktree, oldest first; ``{sha: exit status}``.
    A commit whose suite cannot be listed is stored as failed (exit status 2) and the
    next one follows; one already stored as failed is left out unless ``retry_failed``.
    Stops at Ctrl-C (what finished is stored)."""
    statuses: dict[str, int] = {}
    work = ROOT / ".asv"
    failed = result_files.failures(results_dir(ROOT), machine)
    for i, sha in enumerate(commits, 1):
        subject = git.git("log", "-1", "--format=%s", sha, cwd=ROOT)[:60]
        log(f"history: [{i}/{len(commits)}] {sha[:10]} {subject}")
        if sha in failed and not retry_failed:
            log(
                f"history: {sha[:10]} is stored as failed ({failed[sha].error}); skipped "
                "(--retry-failed measures it again)"
            )
            continue
        start = time.perf_counter()
        tree = git.worktree(work, f"commit-{sha[:10]}", sha)
        try:
            if not (tree / "asv.conf.json").exists():
                log(f"history: {sha[:10]} has no asv suite; skipped")
                statuses[sha] = EXIT_OK
                continue
            code = _measure_commit(tree, sha, machine, user, gpu, log)
            statuses[sha] = code
            log(f"history: {sha[:10]} done in {time.perf_counter() - start:.0f} s (exit {code})")
            if code == EXIT_INTERRUPTED:
                break
        finally:
            git.remove_worktree(tree)
    return statuses


def _measure_commit(tree: Path, sha: str, machine: str, user: list[str], gpu: bool, log) -> int:
    """One commit's ``run_target`` in its worktree ``tree``. A commit that cannot be
    measured at all is stored as failed (``result_files.record_failure``), exit 2: its
    asv.conf.json cannot be read, its suite cannot be listed (it does not import), or
    every selected benchmark failed (its kernels do not compile)."""
    try:
        config = commit_config(tree, ROOT)
    except (OSError, ValueError) as err:  # the commit's asv.conf.json cannot be read
        error = str(err)
    else:
        target = Target(tree, sha, machine, config=config, env=git.tree_env(tree))
        if gpu:
            _precompile(tree, dict(git.tree_env(tree)))
        try:
            code = run_target(target, user, [], None, log=log, none_ok=True)
        except SuiteError as err:
            error = str(err)
        else:
            if code != EXIT_FAILURE or _any_value(target):
                return code
            error = _first_error(tree) or "no selected benchmark produced a value"
    error = result_files.first_line(error)
    path = result_files.record_failure(Target(ROOT, sha, machine), error, log)
    log(f"history: {sha[:10]} cannot be measured: {error}; stored as failed in {path}")
    return EXIT_FAILURE


def _any_value(target: Target) -> bool:
    """Whether any benchmark of ``target``'s commit holds a value, in any lane."""
    return any(
        result_files.stored(target.results_dir(), lane.machine(target.machine), target.sha)
        for lane in (Lane(), CPU_LANE)
    )


_EXCEPTION = re.compile(r"^\s*((?:\w+\.)*\w*(?:Error|Exception)\b.*)$")


def _first_error(tree: Path) -> str | None:
    """The first exception line in the asv logs of ``tree`` (``tree/.asv/run-*.log``)."""
    for log_file in sorted((tree / ".asv").glob("run-*.log")):
        for line in log_file.read_text(errors="replace").splitlines():
            found = _EXCEPTION.match(line)
            if found:
                return found.group(1).strip()
    return None


def _selection(args) -> list[str]:
    if args.bench:
        return list(args.bench)
    return [discovery.gate_subset(ROOT), TUNED]


def _summary(statuses: dict[str, int], left: list[str], log=print) -> int:
    failed = [sha[:10] for sha, code in statuses.items() if code == EXIT_FAILURE]
    if failed:
        log(f"history: benchmarks failed on {', '.join(failed)} (stored as failed)")
    if left:
        log(
            f"history: {len(left)} commit(s) left for the next run: "
            + ", ".join(sha[:10] for sha in left)
        )
    if EXIT_INTERRUPTED in statuses.values():
        return EXIT_INTERRUPTED
    return EXIT_FAILURE if failed else EXIT_OK


def backfill(args, machine: str, gpu: bool) -> int:
    commits = commits_in(args.rev_range, ROOT)
    if not commits:
        raise RangeError(f"REV_RANGE={args.rev_range!r}: holds no commit")
    if len(commits) > args.max_commits:
        raise RangeError(
            f"REV_RANGE={args.rev_range!r}: {len(commits)} commits, more than "
            f"--max-commits={args.max_commits}; narrow the range or raise the cap"
        )
    # Stored commits are visited too: the runner skips every unit already stored, so a
    # complete commit costs a listing and an interrupted one resumes.
    return _summary(
        measure(commits, machine, _selection(args), gpu, retry_failed=args.retry_failed), []
    )


def publish(args, machine: str, gpu: bool) -> int:
    results = results_dir(ROOT)
    if args.sync:
        print(results_branch.checkout(results, args.results_branch, args.remote))
    pending = after_newest_stored(args.branch, results, machine, ROOT)
    if not pending:
        print(f"history: every commit of {args.branch} is stored for {machine}")
    run, left = pending[: args.max_commits], pending[args.max_commits :]
    statuses = measure(run, machine, _selection(args), gpu, retry_failed=args.retry_failed)
    code = _summary(statuses, left)
    measured = [sha[:10] for sha in statuses]
    if measured and args.sync:
        message = f"asv results for {', '.join(measured)} on {machine}"
        print(results_branch.push(results, args.results_branch, args.remote, message))
    from harness.suite import regressions

    reg_code = regressions.main(
        [
            "--results",
            str(results),
            "--markdown",
            str(ROOT / ".asv" / "regressions.md"),
            "--json",
            str(ROOT / ".asv" / "regressions.json"),
        ]
    )
    subprocess.run([sys.executable, "-m", "asv", "publish"], cwd=ROOT, check=False)
    return code or (EXIT_FAILURE if reg_code == EXIT_FAILURE else EXIT_OK)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m harness.suite.history",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = p.add_subparsers(dest="command", required=True)
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "-b",
        "--bench",
        action="append",
        type=regex,
        default=[],
        help="benchmarks by asv or gate name (default: the gate's subset plus Tuned)",
    )
    common.add_argument(
        "--max-commits",
        type=positive_int,
        default=DEFAULT_MAX_COMMITS,
        help=f"most commits one run measures (default {DEFAULT_MAX_COMMITS})",
    )
    common.add_argument("--machine", default=None, help="asv machine name (default: the GPU's)")
    common.add_argument(
        "--retry-failed",
        action="store_true",
        help="measure again the commits stored as failed (their suite did not build)",
    )
    pub = sub.add_parser("publish", parents=[common], help="measure main's new commits, push")
    pub.add_argument("--branch", default="main", help="the branch whose commits are measured")
    pub.add_argument("--results-branch", default=results_branch.BRANCH)
    pub.add_argument("--remote", default="origin")
    pub.add_argument(
        "--no-sync",
        dest="sync",
        action="store_false",
        help="leave the results branch's checkout and push to `nox -s results`: CI runs "
        "them as their own steps, so the token never sits beside the benchmarks",
    )
    back = sub.add_parser("backfill", parents=[common], help="measure a range's commits")
    back.add_argument("rev_range", metavar="REV_RANGE", help="A..B, or one revision")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    from harness.measure import device

    reason = device.no_gpu_reason()
    machine = args.machine or device.machine_name()
    if reason and not args.bench:
        # The default selection is GPU tracks; with -b the user chose (CPU tracks run,
        # GPU tracks are stored as skipped with the reason).
        print(f"history: error: the default selection needs a CUDA GPU: {reason}", file=sys.stderr)
        return EXIT_FAILURE
    try:
        if args.command == "publish":
            return publish(args, machine, reason is None)
        return backfill(args, machine, reason is None)
    except (git.RevisionError, RangeError, results_branch.ResultsBranchError) as err:
        print(f"history: error: {err}", file=sys.stderr)
        return EXIT_FAILURE
    except KeyboardInterrupt:
        print("history: interrupted; finished units are stored", file=sys.stderr)
        return EXIT_INTERRUPTED


if __name__ == "__main__":
    sys.exit(main())
