"""The asv-results branch round trip against a local bare remote, on the CPU."""

import os
import stat
import subprocess
import sys
import tempfile

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
    helpers = []
    real_run = subprocess.run

    def spy(cmd, **kwargs):
        env = kwargs.get("env", {})
        seen.append((cmd, env))
        if "GIT_ASKPASS" in env:
            helpers.append(open(env["GIT_ASKPASS"]).read())
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
    assert env["GIT_TERMINAL_PROMPT"] == "0"
    assert helpers and not any(secret in text for text in helpers)
    # git's own messages can echo a URL that holds the token: they are scrubbed too.
    assert rb._scrub(f"fatal: https://x:{secret}@github.com") == "fatal: https://x:***@github.com"


def test_the_askpass_helper_lives_in_a_fresh_private_folder_removed_after(tmp_path, monkeypatch):
    # Another local user made the old fixed folder first, open to all: it must never be
    # used, or that user could swap the script between its check and git's call.
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp))
    planted = tmp / f"results-branch-{os.getuid()}"
    planted.mkdir()
    planted.chmod(0o777)
    monkeypatch.setenv("GITHUB_TOKEN", "ghs_secretTOKEN1234567890")
    helpers = []
    real_run = subprocess.run

    def spy(cmd, **kwargs):
        askpass = kwargs.get("env", {}).get("GIT_ASKPASS")
        if askpass:
            folder = os.path.dirname(askpass)
            helpers.append((askpass, os.stat(folder), os.stat(askpass)))
        return real_run(cmd, **kwargs)

    monkeypatch.setattr(rb.subprocess, "run", spy)
    work, _ = _repo(tmp_path)
    monkeypatch.chdir(work)
    rb.checkout(work / ".asv" / "results")
    (work / ".asv" / "results" / "a.json").write_text("1")
    rb.push(work / ".asv" / "results", message="a")

    assert len(helpers) >= 2  # ls-remote, push: a folder each
    assert len({os.path.dirname(path) for path, _, _ in helpers}) == len(helpers)
    for path, folder, script in helpers:
        assert not path.startswith(str(planted))
        assert stat.S_IMODE(folder.st_mode) == 0o700 and folder.st_uid == os.getuid()
        assert stat.S_IMODE(script.st_mode) == 0o700 and script.st_uid == os.getuid()
        assert not os.path.exists(os.path.dirname(path)), "the helper outlived its git call"
    assert list(planted.iterdir()) == []
    assert list(tmp.iterdir()) == [planted]


def test_the_results_steps_need_the_standard_library_only(tmp_path):
    # The steps that hold the push token run this module with `python3 -S` (no
    # site-packages, no .pth file) and an environment of TOKEN_ENV alone.
    env = {k: os.environ[k] for k in rb.TOKEN_ENV if k in os.environ}
    code = (
        "import sys, harness.suite.results_branch\n"
        "print(sorted({m.split('.')[0] for m in sys.modules}"
        " - set(sys.stdlib_module_names) - set(sys.builtin_module_names) - {'__main__'}))"
    )
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    out = subprocess.run(
        [sys.executable, "-S", "-c", code], cwd=root, env=env, capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["['harness']"]
