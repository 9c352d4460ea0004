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


def test_a_branch_that_moved_is_fetched_rebased_and_pushed_again(tmp_path, monkeypatch):
    work, remote = _repo(tmp_path)
    monkeypatch.chdir(work)
    rb.checkout(work / ".asv" / "results")
    (work / ".asv" / "results" / "a.json").write_text("1")
    rb.push(work / ".asv" / "results", message="a")
    # Another runner pushes b meanwhile; this one has c to push.
    other = tmp_path / "other"
    _git("clone", "-q", str(remote), str(other), cwd=tmp_path)
    monkeypatch.chdir(other)
    rb.checkout(other / ".asv" / "results")
    (other / ".asv" / "results" / "b.json").write_text("2")
    rb.push(other / ".asv" / "results", message="b")
    monkeypatch.chdir(work)
    (work / ".asv" / "results" / "c.json").write_text("3")
    assert "pushed" in rb.push(work / ".asv" / "results", message="c")
    files = _git("ls-tree", "--name-only", "asv-results", cwd=remote).split()
    assert files == ["a.json", "b.json", "c.json"]  # nothing lost, no force-push
    log = _git("log", "--format=%s", "asv-results", cwd=remote).split()
    assert log == ["c", "b", "a"]


def test_the_token_is_never_on_a_command_line_or_in_an_error(tmp_path, monkeypatch):
    secret = "ghs_secretTOKEN1234567890"
    monkeypatch.setenv("GITHUB_TOKEN", secret)
    seen = []
    real_run = subprocess.run

    def spy(cmd, **kwargs):
        seen.append((cmd, kwargs.get("env", {})))
        return real_run(cmd, **kwargs)

    monkeypatch.setattr(rb.subprocess, "run", spy)
    monkeypatch.chdir(tmp_path)
    _git("init", "-q", str(tmp_path / "w"), cwd=tmp_path)
    monkeypatch.chdir(tmp_path / "w")
    bad = "https://127.0.0.1:9/nothing.git"  # unreachable: every step that needs it fails
    try:
        rb.checkout(tmp_path / "w" / ".asv" / "results", remote=bad)
    except rb.ResultsBranchError as err:
        assert secret not in str(err) and "ls-remote" in str(err)
    else:
        raise AssertionError("an unreachable remote must fail")
    assert seen and not any(secret in " ".join(cmd) for cmd, _ in seen)
    assert not any("extraheader" in a for cmd, _ in seen for a in cmd)
    env = next(e for cmd, e in seen if "ls-remote" in cmd)
    assert env["GIT_TERMINAL_PROMPT"] == "0" and secret not in open(env["GIT_ASKPASS"]).read()
    # git's own messages can echo a URL that holds the token: they are scrubbed too.
    assert rb._scrub(f"fatal: https://x:{secret}@github.com") == "fatal: https://x:***@github.com"
