"""Git for the tools that measure revisions: resolve a revision, walk a range, give a
commit a worktree of its own, and the environment a process running a tree's code gets.

    from harness.revisions import git
    sha = git.resolve("origin/main")
    tree = git.worktree(out, "base", sha)
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from harness.measure.gpu_state import visible_entry

ROOT = Path(__file__).resolve().parent.parent.parent


class RevisionError(ValueError):
    """A revision argument that names no commit, or a range that cannot be used."""


def git(*args: str, cwd: Path = ROOT) -> str:
    """``git ARGS`` in ``cwd``; its stdout, stripped. Raises CalledProcessError."""
    return subprocess.run(
        ["git", *args], cwd=cwd, check=True, capture_output=True, text=True
    ).stdout.strip()


def resolve(rev: str, what: str = "revision", cwd: Path = ROOT) -> str:
    """The full commit hash ``rev`` names; a RevisionError naming ``what`` otherwise."""
    try:
        return git("rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}", cwd=cwd)
    except subprocess.CalledProcessError:
        raise RevisionError(f"{what}={rev!r}: names no commit in this repository") from None


def is_ancestor(older: str, newer: str, cwd: Path = ROOT) -> bool:
    return (
        subprocess.run(
            ["git", "merge-base", "--is-ancestor", older, newer], cwd=cwd, check=False
        ).returncode
        == 0
    )


def first_parent_range(good: str, bad: str, cwd: Path = ROOT) -> list[str]:
    """Commits after ``good`` up to and including ``bad``, oldest first, along first
    parents (the commits that landed on the branch, merges as one step)."""
    out = git("rev-list", "--first-parent", "--reverse", f"{good}..{bad}", cwd=cwd)
    return out.split() if out else []


def remove_worktree(path: Path) -> None:
    subprocess.run(
        ["git", "worktree", "remove", "--force", str(path)],
        cwd=ROOT,
        check=False,
        capture_output=True,
    )


def worktree(out: Path, name: str, sha: str) -> Path:
    """A detached worktree of ``sha`` at ``out/worktrees/name``, replacing one left there."""
    path = out / "worktrees" / name
    if path.exists():
        remove_worktree(path)
    git("worktree", "add", "--detach", "--force", str(path), sha, cwd=ROOT)
    return path


def changed_files(base: str, head: str, cwd: Path = ROOT) -> list[str]:
    """Paths that differ between two commits."""
    out = git("diff", "--name-only", base, head, cwd=cwd)
    return out.split("\n") if out else []


def has_prepare(sha: str, cwd: Path = ROOT) -> bool:
    """Whether the suite at ``sha`` builds a combination's kernel apart from timing it
    (``prepare``), which paired measurement needs."""
    found = subprocess.run(
        ["git", "grep", "-q", "def prepare(self", sha, "--", "*.py"],
        cwd=cwd,
        check=False,
        capture_output=True,
    )
    return found.returncode == 0


def pinned_env(gpu: int | None = None) -> dict[str, str]:
    """This process's environment, pinned to ``gpu`` when given."""
    env = dict(os.environ)
    if gpu is not None:
        env["CUDA_VISIBLE_DEVICES"] = visible_entry(gpu)
    return env


def tree_env(tree: Path, gpu: int | None = None, site: Path | None = None) -> dict[str, str]:
    """The environment of a process that runs ``tree``'s code: the tree first on the path
    (asv reads ASV_PYTHONPATH), then ``site`` (a folder of packages that overrides the
    installed ones), pinned to ``gpu`` when given."""
    env = pinned_env(gpu)
    first = [str(tree)] + ([str(site)] if site is not None else [])
    for var in ("PYTHONPATH", "ASV_PYTHONPATH"):
        env[var] = os.pathsep.join([*first, env.get(var, "")]).rstrip(os.pathsep)
    return env
