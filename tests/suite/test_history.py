"""Which commits history measures, and the bad ranges it refuses, on a throwaway repo."""

import json
import subprocess

import pytest

from harness.cli import EXIT_FAILURE
from harness.revisions import git as revisions
from harness.revisions.git import RevisionError
from harness.suite import history


def _git(*args, cwd):
    return subprocess.run(
        ["git", *args], cwd=cwd, check=True, capture_output=True, text=True
    ).stdout.strip()


@pytest.fixture
def repo(tmp_path):
    """Six commits on main: c0 .. c5; returns (path, shas oldest first)."""
    _git("init", "-q", "-b", "main", cwd=tmp_path)
    shas = []
    for i in range(6):
        (tmp_path / "f").write_text(str(i))
        _git("add", "f", cwd=tmp_path)
        _git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", f"c{i}", cwd=tmp_path)
        shas.append(_git("rev-parse", "HEAD", cwd=tmp_path))
    return tmp_path, shas


def _store(results, machine, sha):
    folder = results / machine
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{sha[:8]}-existing-py.json").write_text(json.dumps({"commit_hash": sha}))


def test_ranges_are_first_parent_and_oldest_first(repo):
    path, shas = repo
    assert history.commits_in("HEAD~3..HEAD", path) == shas[3:]
    assert history.commits_in("main", path) == shas


@pytest.mark.parametrize(
    "rev_range, error, message",
    [
        ("nope..HEAD", RevisionError, "REV_RANGE start='nope': names no commit"),
        ("HEAD..HEAD~2", history.RangeError, "is not an ancestor of"),
        ("nothing", RevisionError, "REV_RANGE='nothing': names no commit"),
    ],
)
def test_bad_ranges_name_the_argument(repo, rev_range, error, message):
    path, _ = repo
    with pytest.raises(error, match=message):
        history.commits_in(rev_range, path)


def test_publish_measures_from_the_newest_stored_commit_on(repo, tmp_path):
    path, shas = repo
    results = tmp_path / "results"
    assert history.after_newest_stored("main", results, "h200", path) == shas
    _store(results, "h200", shas[1])
    _store(results, "h200", shas[3])
    _store(results, "other-gpu", shas[5])  # another machine's results count for nothing
    # The newest stored (c3) is revisited: an interrupted run may have left it partial.
    assert history.after_newest_stored("main", results, "h200", path) == shas[3:]


@pytest.fixture
def in_repo(repo, monkeypatch):
    """history and revisions work in the throwaway repository: the tests never lean on
    this checkout's own git history (CI clones it at depth 1)."""
    path, shas = repo
    monkeypatch.setattr(history, "ROOT", path)
    monkeypatch.setattr(revisions, "ROOT", path)
    return path, shas


def test_backfill_refuses_empty_and_over_the_cap_ranges(in_repo, capsys):
    argv = ["backfill", "HEAD..HEAD", "-b", "static"]
    assert history.main(argv) == EXIT_FAILURE
    assert "REV_RANGE='HEAD..HEAD': holds no commit" in capsys.readouterr().err
    assert history.main(["backfill", "HEAD~3..HEAD", "-b", "static", "--max-commits", "2"]) == 2
    assert "more than --max-commits=2" in capsys.readouterr().err


def test_backfill_without_a_gpu_refuses_the_default_gpu_selection(in_repo, capsys):
    assert history.main(["backfill", "HEAD~1..HEAD"]) == EXIT_FAILURE
    assert "the default selection needs a CUDA GPU" in capsys.readouterr().err


def test_an_invalid_regex_is_refused_as_invalid(in_repo, capsys):
    with pytest.raises(SystemExit) as exit_:
        history.main(["backfill", "HEAD~1..HEAD", "-b", "("])
    assert exit_.value.code == 2 and "is not a valid regex" in capsys.readouterr().err
