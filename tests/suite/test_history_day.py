"""One day on main, end to end on the CPU: the whole history loop on a throwaway
repository, with a real ``asv run`` per commit.

Main's first-parent history holds 11 commits (12 with the one a merge brings in): one
that does not build (a syntax error in ``kernels/gemm.py``, fixed by the next), a merge,
and one that raises the kernel's pipeline stages from 3 to 4, so that its static
shared-memory track steps by a third. A bare repository is ``origin`` (for the
asv-results branch), and tests/fake_github.py is GitHub. The day: ``publish`` of the
morning's commits, then ``regressions`` and ``announce``; more commits land, and a
second ``publish`` measures them while another runner pushes its own results and a
different ``benchmarks.json`` to the results branch; then ``regressions`` and
``announce`` again, with a person's issue that quotes the step's marker in the tracker.
Then the whole loop once more, which must change nothing."""

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from harness.cli import EXIT_FAILURE, EXIT_OK
from harness.revisions import git as revisions
from harness.suite import announce, history, issue_state, result_files
from harness.suite import regressions as rg
from harness.suite.detector import inputs as detector_inputs
from harness.suite.github_api import LABEL
from harness.suite.results_branch import BRANCH
from harness.suite.target import ROOT  # this checkout: the racing runner's harness
from tests.fake_github import FakeGitHub
from tests.fakes import commit, git, tiny_asv_conf, tiny_gpu_family

MACHINE = "testbox"
CPU_MACHINE = f"{MACHINE}-cpu"  # the lane of the CPU-only (static) unit
OTHER = "otherbox"  # the runner that races the second publish
REPO = "acme/gemm"
STEP = "static.Static.track_shared_memory('f16')"

KERNEL = """
BLOCK = (128, 128, 32)
STAGES = {stages}


def shared_memory():
    block_m, block_n, block_k = BLOCK
    return STAGES * (block_m * block_k + block_k * block_n) * 2  # f16 A and B tiles


def latency(n):
    return 1e-3 * n
"""
BROKEN = KERNEL.replace("def shared_memory():", "def shared_memory(:")
GPU_FAMILY = tiny_gpu_family("Stage", "track_latency", "gemm.latency(n)")
STATIC = """
from kernels import gemm


class Static:  # no ``case``: a CPU-only unit, run in the <machine>-cpu lane
    params = (["f16"],)
    param_names = ["dtype"]

    def track_shared_memory(self, dtype):
        return gemm.shared_memory()
{more}"""
REGISTERS = """
    def track_registers(self, dtype):
        return 168
"""


def _write(repo: Path, relative: str, text: str) -> None:
    path = repo / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text).lstrip())


def _morning(repo: Path, remote: Path) -> list[str]:
    """Main's first six commits, the broken one among them, pushed to ``remote``."""
    git("init", "-q", "-b", "main", cwd=repo)
    _write(repo, "asv.conf.json", json.dumps(tiny_asv_conf()))
    _write(repo, ".gitignore", ".asv/\n")
    _write(repo, "kernels/__init__.py", "")
    _write(repo, "kernels/gemm.py", KERNEL.format(stages=3))
    _write(repo, "suite/__init__.py", "")
    _write(repo, "suite/gemm.py", GPU_FAMILY)
    _write(repo, "suite/static.py", STATIC.format(more=""))
    shas = [commit(repo, "Add the GEMM kernel and its suite")]
    _write(repo, "README.md", "How to run the suite.\n")
    shas.append(commit(repo, "README: how to run the suite"))
    _write(repo, "docs/tiles.md", "128 x 128 x 32 tiles.\n")
    shas.append(commit(repo, "docs: the tile sizes"))
    _write(repo, "kernels/gemm.py", BROKEN.format(stages=3))
    shas.append(commit(repo, "Kernel: reorder the tile loop"))
    _write(repo, "kernels/gemm.py", KERNEL.format(stages=3))
    shas.append(commit(repo, "Fix the syntax error in kernels/gemm.py"))
    _write(repo, "docs/pipeline.md", "Three stages.\n")
    shas.append(commit(repo, "docs: the pipeline"))
    git("remote", "add", "origin", str(remote), cwd=repo)
    git("push", "-q", "origin", "main", cwd=repo)
    return shas


def _afternoon(repo: Path, remote: Path) -> tuple[list[str], str]:
    """A merge, the step, and three more on main, pushed; their first-parent hashes, and
    the commit the merge brought in."""
    git("checkout", "-q", "-b", "notes", cwd=repo)
    _write(repo, "docs/notes.md", "Tuning notes.\n")
    side = commit(repo, "docs: tuning notes")
    git("checkout", "-q", "main", cwd=repo)
    ident = ("-c", "user.name=t", "-c", "user.email=t@t")
    git(*ident, "merge", "-q", "--no-ff", "-m", "Merge branch 'notes'", "notes", cwd=repo)
    shas = [git("rev-parse", "HEAD", cwd=repo)]
    _write(repo, "kernels/gemm.py", KERNEL.format(stages=4))
    shas.append(commit(repo, "Kernel: 4 pipeline stages", author="Ada Lovelace"))
    _write(repo, "docs/pipeline.md", "Four stages.\n")
    shas.append(commit(repo, "docs: four stages"))
    _write(repo, "suite/static.py", STATIC.format(more=REGISTERS))
    shas.append(commit(repo, "static: track the registers too"))
    _write(repo, "README.md", "How to run the suite, and read it.\n")
    shas.append(commit(repo, "README: reading the graphs"))
    git("push", "-q", "origin", "main", cwd=repo)
    return shas, side


def _race(remote: Path, where: Path, sha: str) -> None:
    """Another runner's push to the results branch: a clone of ``remote`` checks the
    branch out and pushes its own machine's results for ``sha`` and a benchmarks.json of
    another suite revision, through the same command line CI runs (``python3 -S``)."""
    git("clone", "-q", str(remote), str(where), cwd=where.parent)
    env = {"PATH": os.environ["PATH"], "HOME": os.environ.get("HOME", ""), "PYTHONPATH": str(ROOT)}

    def branch_cli(*args):
        cmd = [sys.executable, "-S", "-m", "harness.suite.results_branch", *args]
        subprocess.run(cmd, cwd=where, env=env, check=True, capture_output=True)

    branch_cli("checkout", ".asv/results")
    results = where / ".asv" / "results"
    (results / OTHER).mkdir()
    mine = json.loads((results / MACHINE / "machine.json").read_text())
    (results / OTHER / "machine.json").write_text(json.dumps({**mine, "machine": OTHER}))
    (path,) = (results / MACHINE).glob(f"{sha[:8]}-*.json")
    data = json.loads(path.read_text())
    data["params"]["machine"] = OTHER
    (results / OTHER / path.name).write_text(json.dumps(data))
    suite = json.loads((results / "benchmarks.json").read_text())
    latency = suite["gemm.Stage.track_latency"]
    suite["gemm.Stage.track_tflops"] = {**latency, "name": "gemm.Stage.track_tflops"}
    registers = suite["static.Static.track_shared_memory"]
    suite["static.Static.track_registers"] = {
        **registers,
        "name": "static.Static.track_registers",
        "version": "0" * 64,  # another revision of the benchmark than main's
    }
    (results / "benchmarks.json").write_text(json.dumps(suite, indent=4, sort_keys=True))
    branch_cli("push", ".asv/results", "--message", f"asv results from {OTHER}")


def _publish() -> int:
    return history.main(["publish", "-b", ".", "--machine", MACHINE])


def _regressions_and_announce(repo: Path, artifact: Path) -> tuple[int, int]:
    """``nox -s regressions`` into the artifact folder, then ``announce`` on it."""
    out = artifact / f"regressions-{MACHINE}" / "regressions.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    code = rg.main(["--results", str(repo / ".asv" / "results"), "--json", str(out)])
    return code, announce.main([str(artifact), "--repo", REPO])


def _remote_results(remote: Path, where: Path) -> Path:
    """The results branch as the remote holds it, in a fresh clone."""
    git("clone", "-q", "--branch", BRANCH, str(remote), str(where), cwd=where.parent)
    return where


def _snapshot(gh: FakeGitHub) -> str:
    return json.dumps([gh.issues, gh.comments], sort_keys=True)


def test_a_day_on_main_stores_every_commit_and_announces_the_step_once(
    tmp_path, monkeypatch, capsys
):
    repo, remote = tmp_path / "repo", tmp_path / "origin.git"
    repo.mkdir()
    git("init", "-q", "--bare", str(remote), cwd=tmp_path)
    for module in (history, revisions, detector_inputs):  # git and asv in the throwaway repository
        monkeypatch.setattr(module, "ROOT", repo)
    monkeypatch.chdir(repo)  # the results branch's git runs where publish runs
    with FakeGitHub(repo=REPO) as gh:
        monkeypatch.setenv("GITHUB_TOKEN", gh.token)
        monkeypatch.setenv("GITHUB_API_URL", gh.url)
        monkeypatch.delenv("GITHUB_SERVER_URL", raising=False)
        _day(tmp_path, repo, remote, gh, monkeypatch, capsys)


def _day(tmp_path, repo, remote, gh, monkeypatch, capsys):
    morning = _morning(repo, remote)
    broken = morning[3]

    # Morning: the broken commit is stored as failed and the run goes on past it.
    assert _publish() == EXIT_FAILURE
    out = capsys.readouterr().out
    assert f"history: {broken[:10]} cannot be measured: SyntaxError:" in out
    assert "pushed results to origin/asv-results" in out
    assert _regressions_and_announce(repo, tmp_path / "artifact1") == (EXIT_OK, EXIT_OK)
    assert gh.issues == {}

    afternoon, side = _afternoon(repo, remote)
    merge, culprit = afternoon[0], afternoon[1]
    first_parent = morning + afternoon
    # Another runner pushes to the results branch while this one measures the afternoon.
    real_measure = history.measure

    def measure_while_another_runner_pushes(*args, **kwargs):
        statuses = real_measure(*args, **kwargs)
        _race(remote, tmp_path / "other-runner", morning[-1])
        return statuses

    monkeypatch.setattr(history, "measure", measure_while_another_runner_pushes)
    assert _publish() == EXIT_OK
    monkeypatch.setattr(history, "measure", real_measure)
    out = capsys.readouterr().out
    assert f"{broken[:10]}" not in out  # publish starts after the newest stored commit
    assert "pushed results to origin/asv-results" in out

    # A person's issue, labelled as ours are, that quotes the very marker of the step.
    quoted = issue_state.marker(f"{STEP} {merge}..{culprit}")
    person = gh.add(f"The graphs jumped, see the bot's\n{quoted}", author="a-person")
    persons_issue = json.dumps(gh.issues[person], sort_keys=True)
    artifact = tmp_path / "artifact2"
    assert _regressions_and_announce(repo, artifact) == (EXIT_OK, EXIT_OK)

    # Every first-parent commit is on the remote: measured, or stored as failed.
    stored = _remote_results(remote, tmp_path / "remote-results")
    assert history.stored_commits(stored, MACHINE) == set(first_parent)
    assert side not in history.stored_commits(stored, MACHINE)
    failed = result_files.failures(stored, MACHINE)
    assert set(failed) == {broken} and failed[broken].error.startswith("SyntaxError:")
    for sha in first_parent:
        if sha != broken:
            assert result_files.stored(stored, MACHINE, sha) == {
                "gemm.Stage.track_latency(1)",
                "gemm.Stage.track_latency(2)",
            }, sha
            assert STEP in result_files.stored(stored, CPU_MACHINE, sha), sha
    # The other runner's results and benchmarks.json are on it too; of the benchmark
    # both suites hold, main's revision (this runner's, the later push) wins.
    assert result_files.stored(stored, OTHER, morning[-1])
    suite = json.loads((stored / "benchmarks.json").read_text())
    assert "gemm.Stage.track_tflops" in suite
    assert suite["static.Static.track_registers"]["version"] != "0" * 64
    # Rebased onto the other runner's push, never forced over it.
    log = git("log", "--format=%s", BRANCH, cwd=remote).splitlines()
    assert len(log) == 3 and log[1] == f"asv results from {OTHER}"
    assert log[0].startswith("asv results for ") and afternoon[-1][:10] in log[0]

    # The detector puts the step on the merge..culprit pair, adjacent on main.
    found = json.loads((artifact / f"regressions-{MACHINE}" / "regressions.json").read_text())
    (step,) = found["regressions"]
    assert (step["benchmark"], step["machine"]) == (STEP, CPU_MACHINE)
    assert (step["good"], step["bad"], step["commits"]) == (merge, culprit, [culprit])
    assert step["ratio"] == pytest.approx(4 / 3)

    # Exactly one issue is opened, naming the culprit; the person's issue is untouched.
    (issue,) = [i for i in gh.issues.values() if i["user"]["login"] == gh.author]
    assert len(gh.issues) == 2  # ours and the person's
    body = issue["body"]
    assert issue["title"] == f"Perf regression: {STEP} ({culprit[:8]})"
    assert issue["labels"] == [{"name": LABEL}] and issue["state"] == "open"
    assert f"**Culprit: {culprit[:10]}** ` Kernel: 4 pipeline stages ` by ` Ada Lovelace `" in body
    assert issue_state.parse(body).span.culprit == culprit
    # Adjacent GOOD and BAD: the culprit is named, and there is nothing to bisect.
    assert "nox -s bisect" not in body and "nox -s backfill" not in body
    assert json.dumps(gh.issues[person], sort_keys=True) == persons_issue
    assert person not in gh.comments

    # The same loop again: nothing new to measure, push, open, edit or comment.
    head = git("rev-parse", BRANCH, cwd=remote)
    before = _snapshot(gh)
    gh.calls.clear()
    assert _publish() == EXIT_OK
    assert "no new results to push" in capsys.readouterr().out
    assert _regressions_and_announce(repo, tmp_path / "artifact3") == (EXIT_OK, EXIT_OK)
    assert git("rev-parse", BRANCH, cwd=remote) == head
    assert gh.writes() == [] and _snapshot(gh) == before
