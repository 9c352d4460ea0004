"""The asv-results branch round trip against a local bare remote, on the CPU."""

import subprocess

from harness.suite import results_branch as rb


def _git(*args, cwd):
    return subprocess.run(
        ["git", *args], cwd=cwd, check=True, capture_output=True, text=True
    ).stdout.strip()


def _repo(tmp_path):
    remote = tmp_path / "remote.git"
    _git("init", "-q", "--bare", str(remote), cwd=tmp_path)
    work = tmp_path / "work"
    _git("init", "-q", "-b", "main", str(work), cwd=tmp_path)
    (work / "README").write_text("x")
    _git("add", ".", cwd=work)
    _git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "init", cwd=work)
    _git("remote", "add", "origin", str(remote), cwd=work)
    _git("push", "-q", "origin", "main", cwd=work)
    return work, remote


def test_results_survive_a_fresh_clone(tmp_path, monkeypatch):
    work, remote = _repo(tmp_path)
    monkeypatch.chdir(work)
    assert "new branch" in rb.checkout(work / ".asv" / "results")
    (work / ".asv" / "results" / "h200").mkdir()
    (work / ".asv" / "results" / "h200" / "abc.json").write_text('{"a": 1}')
    assert "pushed" in rb.push(work / ".asv" / "results", message="results for abc")
    assert rb.push(work / ".asv" / "results") == "no new results to push"

    # A re-imaged runner: a new clone finds the earlier results on the branch.
    clone = tmp_path / "clone"
    _git("clone", "-q", str(remote), str(clone), cwd=tmp_path)
    monkeypatch.chdir(clone)
    assert "checked out" in rb.checkout(clone / ".asv" / "results")
    assert (clone / ".asv" / "results" / "h200" / "abc.json").read_text() == '{"a": 1}'
    assert not (clone / ".asv" / "results" / "README").exists()
