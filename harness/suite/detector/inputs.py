"""What the history detector reads: where asv keeps the results, the branch's
first-parent order of commits, the culprit's subject and author from git, a machine's
calibration file, and the ``-b`` selection of series."""

from __future__ import annotations

import re
import subprocess
from collections.abc import Iterable, Sequence
from dataclasses import asdict, replace
from pathlib import Path

from harness.revisions import calibration
from harness.suite import discovery
from harness.suite.detector.records import Regression
from harness.suite.series import Series

ROOT = Path(__file__).resolve().parents[3]


def default_results_dir(root: Path = ROOT) -> Path:
    """``results_dir`` of ``root/asv.conf.json``."""
    conf = discovery.read_asv_conf(root)
    return (discovery.conf_path(root).parent / conf.get("results_dir", "results")).resolve()


def commit_order(branch: str = "main", cwd: Path | None = None) -> list[str] | None:
    """``branch``'s commits oldest first along first parents, as asv orders its graphs, in
    the repository at ``cwd`` (default: this checkout); None where git cannot say (no
    repository, no such branch)."""
    proc = subprocess.run(
        ["git", "rev-list", "--first-parent", "--reverse", branch, "--"],
        cwd=cwd or ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    return proc.stdout.split() if proc.returncode == 0 and proc.stdout.strip() else None


def with_commits(
    found: Sequence[Regression], commits: Sequence[str] | None, cwd: Path | None = None
) -> list[Regression]:
    """``found`` with each step's first-parent commits (from ``commits``, the branch
    oldest first) and its ``bad`` commit's subject and author (from git at ``cwd``)."""
    index = {sha: i for i, sha in enumerate(commits or ())}
    bads = sorted({r.bad for r in found})
    proc = subprocess.run(
        ["git", "log", "--no-walk=unsorted", "--format=%H%x00%an%x00%s", *bads, "--"],
        cwd=cwd or ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    about = {}
    if bads and proc.returncode == 0:
        for line in proc.stdout.splitlines():
            sha, _, rest = line.partition("\0")
            author, _, subject = rest.partition("\0")
            about[sha] = (subject, author)
    out = []
    for r in found:
        lo, hi = index.get(r.good), index.get(r.bad)
        span = tuple(commits[lo + 1 : hi + 1]) if lo is not None and hi is not None else None
        subject, author = about.get(r.bad, ("", ""))
        out.append(replace(r, commits=span or None, bad_subject=subject, bad_author=author))
    return out


def load_calibration(path: Path, missing_ok: bool = True) -> dict[str, dict]:
    """The ``benchmarks`` table of a calibration file (``harness.revisions.calibration``,
    its one reader), each entry as a dict; ``{}`` for a missing one when ``missing_ok``.
    ValueError (naming the file) when it cannot be used."""
    if missing_ok and not Path(path).exists():
        return {}
    record = calibration.read(Path(path))
    return {name: asdict(entry) for name, entry in record.benchmarks.items()}


def select(series: Iterable[Series], bench: str | None) -> list[Series]:
    """The series whose asv name ``bench`` matches (``re.search``, as asv's ``-b``)."""
    if bench is None:
        return list(series)
    pattern = re.compile(bench)
    return [s for s in series if pattern.search(s.name)]
