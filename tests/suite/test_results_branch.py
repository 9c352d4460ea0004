"""The asv-results branch round trip against a local bare remote, on the CPU."""

import json
import os
import stat
import subprocess
import sys
import tempfile

import pytest

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


def _runner(tmp_path, remote, name, monkeypatch):
    """A runner's clone of ``remote`` with the results branch checked out."""
    clone = tmp_path / name
    _git("clone", "-q", str(remote), str(clone), cwd=tmp_path)
    monkeypatch.chdir(clone)
    rb.checkout(clone / ".asv" / "results")
    return clone / ".asv" / "results"


def _write(path, data):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=4, sort_keys=True))


def _on_remote(remote, path):
    return json.loads(_git("show", f"asv-results:{path}", cwd=remote))


@pytest.mark.parametrize("first", ["a", "b"])
def test_a_push_race_over_benchmarks_json_loses_no_result(tmp_path, monkeypatch, first):
    work, remote = _repo(tmp_path)
    monkeypatch.chdir(work)
    seed = work / ".asv" / "results"
    rb.checkout(seed)
    _write(seed / "benchmarks.json", {"gemm.Old.track": {"unit": "s"}, "version": 2})
    rb.push(seed, message="seed")
    # Two runners measure their own commits while the suite changed differently in each:
    # each rewrites benchmarks.json, and both rewrite one shared machine's machine.json.
    runners = {name: _runner(tmp_path, remote, name, monkeypatch) for name in "ab"}
    for name, folder in runners.items():
        bench = {"gemm.Old.track": {"unit": name}, f"gemm.{name}.track": {"unit": "s"}}
        _write(folder / "benchmarks.json", {**bench, "version": 2})
        _write(folder / f"gpu-{name}" / "machine.json", {"machine": f"gpu-{name}"})
        _write(folder / f"gpu-{name}" / f"{name * 8}-existing.json", {"results": {}})
        _write(folder / "h200" / "machine.json", {"machine": "h200", "cpu": name, name: 1})
        _write(folder / "h200" / f"{name * 8}-existing.json", {"results": {}})
    second = "b" if first == "a" else "a"
    for name in (first, second):
        monkeypatch.chdir(runners[name].parent.parent)
        assert "pushed" in rb.push(runners[name], message=f"results of {name}")

    files = set(_git("ls-tree", "-r", "--name-only", "asv-results", cwd=remote).split())
    for name in "ab":
        assert {f"gpu-{name}/machine.json", f"gpu-{name}/{name * 8}-existing.json"} <= files
        assert f"h200/{name * 8}-existing.json" in files
    # Key by key, the side pushed last winning where both wrote the same key.
    assert _on_remote(remote, "benchmarks.json") == {
        "gemm.Old.track": {"unit": second},
        "gemm.a.track": {"unit": "s"},
        "gemm.b.track": {"unit": "s"},
        "version": 2,
    }
    assert _on_remote(remote, "h200/machine.json") == {
        "machine": "h200",
        "cpu": second,
        "a": 1,
        "b": 1,
    }
    log = _git("log", "--format=%s", "asv-results", cwd=remote).splitlines()
    assert log == [f"results of {second}", f"results of {first}", "seed"]  # no force-push
    # The losing runner's worktree is clean and up to date with the remote.
    assert _git("status", "--porcelain", cwd=runners[second]) == ""


def _results_file(folder, machine, sha, bench, value):
    """One commit's results of one benchmark, through asv's own writer."""
    from asv.results import Results
    from asv.runner import BenchmarkResult

    params = {"machine": machine, "python": "3.11"}
    run = Results(params, {}, sha, 1_700_000_000_000, "3.11", "existing-py", {})
    result = BenchmarkResult(
        result=[value], samples=[[value] * 3], number=[1], errcode=0, stderr="", profile=None
    )
    run.add_result({"name": bench, "version": "1", "params": []}, result)
    run.save(str(folder))


def test_two_runners_results_of_one_commit_and_machine_are_merged_by_benchmark(
    tmp_path, monkeypatch
):
    from asv.results import iter_results_for_machine

    work, remote = _repo(tmp_path)
    monkeypatch.chdir(work)
    rb.checkout(work / ".asv" / "results")
    _write(work / ".asv" / "results" / "h200" / "machine.json", {"machine": "h200", "version": 1})
    rb.push(work / ".asv" / "results", message="seed")
    runners = {name: _runner(tmp_path, remote, name, monkeypatch) for name in "ab"}
    sha = "c" * 40
    for value, (name, folder) in enumerate(runners.items(), start=1):
        _results_file(folder, "h200", sha, f"gemm.{name}.track", float(value))
    for name in "ab":
        monkeypatch.chdir(runners[name].parent.parent)
        rb.push(runners[name], message=name)

    final = tmp_path / "final"
    _git("clone", "-q", "-b", "asv-results", str(remote), str(final), cwd=tmp_path)
    (run,) = iter_results_for_machine(str(final), "h200")
    values = {key: run.get_result_value(key, []) for key in run.get_all_result_keys()}
    assert values == {"gemm.a.track": [1.0], "gemm.b.track": [2.0]}


def test_a_conflict_that_is_not_json_objects_stops_and_names_the_file(tmp_path, monkeypatch):
    work, remote = _repo(tmp_path)
    monkeypatch.chdir(work)
    rb.checkout(work / ".asv" / "results")
    (work / ".asv" / "results" / "notes.txt").write_text("seed\n")
    rb.push(work / ".asv" / "results", message="seed")
    runners = {name: _runner(tmp_path, remote, name, monkeypatch) for name in "ab"}
    for name, folder in runners.items():
        (folder / "notes.txt").write_text(f"{name}\n")
    monkeypatch.chdir(runners["a"].parent.parent)
    rb.push(runners["a"], message="a")
    monkeypatch.chdir(runners["b"].parent.parent)
    with pytest.raises(rb.ResultsBranchError, match=r"notes\.txt: .*resolve it by hand"):
        rb.push(runners["b"], message="b")
    # The rebase was aborted: b's own commit is intact, for a person to look at.
    assert _git("log", "--format=%s", "-1", cwd=runners["b"]) == "b"
    assert (runners["b"] / "notes.txt").read_text() == "b\n"
    assert not list((runners["b"].parent.parent / ".git" / "worktrees").glob("*/rebase-merge"))
