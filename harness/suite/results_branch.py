"""Keep asv's results folder on a dedicated git branch, so the history survives runner
re-images: the folder is a worktree of that branch, filled by ``asv run`` and pushed back.

    python -m harness.suite.results_branch checkout .asv/results   # before asv run
    python -m harness.suite.results_branch push .asv/results       # after it

On GitHub Actions the checkout keeps no credentials; ``$GITHUB_TOKEN`` reaches git through
``GIT_ASKPASS`` and the environment, for these two commands only: never on a command line,
in a file or in an error message. The module needs git and the standard library only, so
the steps that hold the token install nothing and pass it alone (``TOKEN_ENV``):

    env -i PATH="$PATH" HOME="$HOME" GITHUB_TOKEN="$GITHUB_TOKEN" \
        python3 -S -m harness.suite.results_branch checkout .asv/results
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

BRANCH = "asv-results"
PUSH_ATTEMPTS = 3
# The whole environment of a process that holds the push token: git needs a PATH and a
# HOME, nothing else reaches it (.github/workflows/publish.yml, noxfile.py's `results`).
TOKEN_ENV = ("PATH", "HOME", "GITHUB_TOKEN")
# Answers git's HTTPS prompts from the environment: the token never reaches an argument
# list (visible in ps and in error messages) or a file.
_ASKPASS = """#!/bin/sh
case "$1" in
  Username*) echo x-access-token ;;
  *) printf '%s\\n' "$GITHUB_TOKEN" ;;
esac
"""


class ResultsBranchError(RuntimeError):
    """A git step on the results branch failed; the message never holds the token."""


def _scrub(text: str) -> str:
    token = os.environ.get("GITHUB_TOKEN")
    return text.replace(token, "***") if token else text


@contextlib.contextmanager
def _askpass() -> Iterator[str]:
    """The GIT_ASKPASS helper, in a folder of its own for one git call: ``mkdtemp`` makes
    it fresh, ours and 0700, so no other user can have made it first, swap the script or
    read it; it is removed when git is done."""
    folder = tempfile.mkdtemp(prefix="results-branch-askpass-")
    try:
        path = os.path.join(folder, "askpass.sh")
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o700)
        with os.fdopen(fd, "w") as script:
            script.write(_ASKPASS)
        yield path
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _run(*args: str, cwd: Path | str = ".", auth: bool = False) -> subprocess.CompletedProcess:
    env = dict(os.environ, GIT_EDITOR="true")  # a rebase that goes on keeps its messages
    with contextlib.ExitStack() as helper:
        if auth and env.get("GITHUB_TOKEN"):
            env.update(GIT_ASKPASS=helper.enter_context(_askpass()), GIT_TERMINAL_PROMPT="0")
        return subprocess.run(["git", *args], cwd=cwd, env=env, capture_output=True, text=True)


def _said(proc: subprocess.CompletedProcess) -> str:
    return _scrub(proc.stderr.strip() or proc.stdout.strip())


def _git(*args: str, cwd: Path | str = ".", auth: bool = False, check: bool = True) -> str:
    proc = _run(*args, cwd=cwd, auth=auth)
    if check and proc.returncode:
        raise ResultsBranchError(
            f"git {' '.join(args[:2])} failed (exit {proc.returncode}): {_said(proc)}"
        )
    return proc.stdout.strip()


def _remote_has(branch: str, remote: str) -> bool:
    out = _git("ls-remote", "--heads", remote, branch, auth=True)
    return bool(out)


def checkout(folder: Path, branch: str = BRANCH, remote: str = "origin") -> str:
    """Make ``folder`` a worktree of ``branch``: fetched from ``remote`` when it exists
    there (an existing worktree is brought up to date), else a new orphan branch.
    Returns what it did."""
    folder = folder.resolve()
    if (folder / ".git").exists():
        if _remote_has(branch, remote):
            _sync(folder, branch, remote)
            return f"{folder} is already a worktree; rebased on {remote}/{branch}"
        return f"{folder} is already a worktree"
    if folder.exists() and any(folder.iterdir()):
        raise ResultsBranchError(f"{folder} exists and is not a worktree; move it away")
    if _remote_has(branch, remote):
        _git("fetch", remote, f"+{branch}:{branch}", auth=True)
        _git("worktree", "add", "--force", str(folder), branch)
        return f"checked out {remote}/{branch} into {folder}"
    _git("worktree", "add", "--force", "--detach", str(folder))
    _git("checkout", "--orphan", branch, cwd=folder)
    _git("rm", "-rf", "--quiet", ".", cwd=folder)
    return f"started a new branch {branch} in {folder}"


_IDENT = ("-c", "user.name=asv-results", "-c", "user.email=asv-results@localhost")


def _sync(folder: Path, branch: str, remote: str) -> None:
    """Fetch ``remote``'s branch and rebase the local commits onto it. Result files of
    different commits or machines never meet; where both sides rewrote one of asv's JSON
    files (``benchmarks.json``, a ``machine.json``, one commit's results), the rebase
    stops and ``merge_json`` merges the two versions, the local one winning each key both
    wrote. Anything else that conflicts aborts the rebase and raises, naming the files."""
    _git("fetch", remote, branch, cwd=folder, auth=True)
    try:
        _rebase(folder, "FETCH_HEAD")
    except ResultsBranchError:
        _git("rebase", "--abort", cwd=folder, check=False)
        raise


def _rebase(folder: Path, onto: str) -> None:
    proc = _run(*_IDENT, "rebase", onto, cwd=folder)
    while proc.returncode:
        conflicted = _git("diff", "--name-only", "--diff-filter=U", cwd=folder).splitlines()
        if not conflicted:  # a failure that is no conflict: report git's own words
            raise ResultsBranchError(f"git rebase failed (exit {proc.returncode}): {_said(proc)}")
        for path in conflicted:
            _resolve(folder, path)
        if _run("diff", "--cached", "--quiet", cwd=folder).returncode:
            step = ("rebase", "--continue")
        else:  # the merged files are what the remote holds already: nothing left to apply
            step = ("rebase", "--skip")
        proc = _run(*_IDENT, *step, cwd=folder)


def _resolve(folder: Path, path: str) -> None:
    """Write the merge of both sides of the conflicted ``path`` and stage it. In a rebase,
    stage 2 is the remote's side (with the local commits replayed so far) and stage 3
    the local commit being replayed."""
    sides = []
    for stage in (2, 3):
        text = _run("show", f":{stage}:{path}", cwd=folder)
        try:
            sides.append(json.loads(text.stdout) if not text.returncode else None)
        except ValueError:
            sides.append(None)
    remote_side, local_side = sides
    if (
        not path.endswith(".json")
        or not isinstance(remote_side, dict)
        or not isinstance(local_side, dict)
    ):
        raise ResultsBranchError(
            f"{path}: changed on {BRANCH} by another runner and here, and not two JSON "
            "objects that can be merged key by key; resolve it by hand"
        )
    merged = merge_json(path, remote_side, local_side)
    (folder / path).write_text(json.dumps(merged, indent=4, sort_keys=True) + "\n")
    _git("add", "--", path, cwd=folder)


# An asv results file (``<machine>/<commit>-<env>.json``): its per-benchmark tables merge
# one level deeper, so two runners' benchmarks of one commit and machine both stay.
_RESULT_TABLES = ("results", "durations")


def merge_json(path: str, remote: dict, local: dict) -> dict:
    """Both sides of one of asv's JSON files, merged key by key, the local side winning a
    key both hold: ``benchmarks.json`` (asv rewrites it from the suite each run) and
    ``machine.json`` by their top-level keys, a commit's results file by benchmark."""
    merged = {**remote, **local}
    name = path.rsplit("/", 1)[-1]
    if "/" in path and name != "machine.json":
        if remote.get("result_columns") == local.get("result_columns"):
            for key in _RESULT_TABLES:
                ours, theirs = remote.get(key), local.get(key)
                if isinstance(ours, dict) and isinstance(theirs, dict):
                    merged[key] = {**ours, **theirs}
    return merged


def push(folder: Path, branch: str = BRANCH, remote: str = "origin", message: str = "") -> str:
    """Commit everything in ``folder`` and push it to ``remote``'s ``branch``. When the
    branch moved meanwhile (another runner pushed), fetch, rebase and retry; never
    force-push."""
    folder = folder.resolve()
    _git("add", "-A", cwd=folder)
    if _git("status", "--porcelain", cwd=folder):
        _git(*_IDENT, "commit", "-q", "-m", message or "asv results", cwd=folder)
    else:
        heads = _git("ls-remote", "--heads", remote, branch, cwd=folder, auth=True)
        if heads.split()[:1] == [_git("rev-parse", "HEAD", cwd=folder)]:
            return "no new results to push"
    for attempt in range(1, PUSH_ATTEMPTS + 1):
        try:
            _git("push", remote, f"HEAD:refs/heads/{branch}", cwd=folder, auth=True)
            return f"pushed results to {remote}/{branch}"
        except ResultsBranchError as err:
            if (
                attempt == PUSH_ATTEMPTS
                or "rejected" not in str(err)
                and "fetch first" not in str(err)
            ):
                raise
            _sync(folder, branch, remote)
    raise AssertionError("unreachable")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m harness.suite.results_branch",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("action", choices=["checkout", "push"])
    p.add_argument("folder", type=Path, help="asv's results_dir, e.g. .asv/results")
    p.add_argument("--branch", default=BRANCH)
    p.add_argument("--remote", default="origin")
    p.add_argument("--message", default="", help="commit message for push")
    args = p.parse_args(argv)
    try:
        if args.action == "checkout":
            print(checkout(args.folder, args.branch, args.remote))
        else:
            print(push(args.folder, args.branch, args.remote, args.message))
    except ResultsBranchError as err:
        print(f"results_branch: error: {err}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
