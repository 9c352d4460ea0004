"""Keep asv's results folder on a dedicated git branch, so the history survives runner
re-images: the folder is a worktree of that branch, filled by ``asv run`` and pushed back.

    python -m harness.suite.results_branch checkout .asv/results   # before asv run
    python -m harness.suite.results_branch push .asv/results       # after it

On GitHub Actions the checkout keeps no credentials; ``$GITHUB_TOKEN`` is passed to git as
an HTTP header for these two commands only.
"""

from __future__ import annotations

import argparse
import base64
import os
import subprocess
import sys
from pathlib import Path

BRANCH = "asv-results"


def _git(*args: str, cwd: Path | str = ".", auth: bool = False) -> str:
    cmd = ["git"]
    token = os.environ.get("GITHUB_TOKEN")
    if auth and token:
        basic = base64.b64encode(f"x-access-token:{token}".encode()).decode()
        cmd += ["-c", f"http.https://github.com/.extraheader=AUTHORIZATION: basic {basic}"]
    return subprocess.run(
        [*cmd, *args], cwd=cwd, check=True, capture_output=True, text=True
    ).stdout.strip()


def _remote_has(branch: str, remote: str) -> bool:
    out = _git("ls-remote", "--heads", remote, branch, auth=True)
    return bool(out)


def checkout(folder: Path, branch: str = BRANCH, remote: str = "origin") -> str:
    """Make ``folder`` a worktree of ``branch``: fetched from ``remote`` when it exists
    there, else a new orphan branch. Returns what it did."""
    folder = folder.resolve()
    if (folder / ".git").exists():
        return f"{folder} is already a worktree"
    if folder.exists() and any(folder.iterdir()):
        raise SystemExit(f"results_branch: {folder} exists and is not a worktree; move it away")
    if _remote_has(branch, remote):
        _git("fetch", remote, f"+{branch}:{branch}", auth=True)
        _git("worktree", "add", "--force", str(folder), branch)
        return f"checked out {remote}/{branch} into {folder}"
    _git("worktree", "add", "--force", "--detach", str(folder))
    _git("checkout", "--orphan", branch, cwd=folder)
    _git("rm", "-rf", "--quiet", ".", cwd=folder)
    return f"started a new branch {branch} in {folder}"


def push(folder: Path, branch: str = BRANCH, remote: str = "origin", message: str = "") -> str:
    """Commit everything in ``folder`` and push it to ``remote``'s ``branch``."""
    folder = folder.resolve()
    _git("add", "-A", cwd=folder)
    if not _git("status", "--porcelain", cwd=folder):
        return "no new results to push"
    ident = ["-c", "user.name=asv-results", "-c", "user.email=asv-results@localhost"]
    _git(*ident, "commit", "-q", "-m", message or "asv results", cwd=folder)
    _git("push", remote, f"HEAD:refs/heads/{branch}", cwd=folder, auth=True)
    return f"pushed results to {remote}/{branch}"


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
    except subprocess.CalledProcessError as err:
        print(
            f"results_branch: git {' '.join(err.cmd[1:3])} failed: {err.stderr.strip()}",
            file=sys.stderr,
        )
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
