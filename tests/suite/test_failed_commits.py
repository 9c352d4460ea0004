"""A commit that does not build never stops the history: on a throwaway repository whose
second commit has a syntax error in ``kernels/gemm.py`` and whose fourth one builds no
kernel, a real ``asv run`` per commit (CPU only) stores both as failed, measures the
others, and later runs leave the failed ones alone."""

import contextlib
import io
import json
import shutil
import subprocess
import sys

import pytest

from harness.cli import EXIT_FAILURE, EXIT_OK
from harness.revisions import git as revisions
from harness.suite import history, jobs, result_files
from harness.suite import regressions as rg
from harness.suite.detector import inputs as detector_inputs
from harness.suite.series import load_history
from harness.suite.target import Target
from tests.fakes import commit, git, tiny_asv_conf, tiny_gpu_family

MACHINE = "testbox"
KERNEL = "def value():\n    return {}\n"
SYNTAX_ERROR = "def value(:\n"
NO_BUILD = "def value():\n    raise RuntimeError('ptxas fatal: Insufficient registers')\n"
# c0 .. c4: which commits build, and what their kernel returns.
KERNELS = [KERNEL.format(1), SYNTAX_ERROR, KERNEL.format(2), NO_BUILD, KERNEL.format(3)]
MEASURED = (0, 2, 4)
SUITE = tiny_gpu_family("Family", "track_value", "float(gemm.value() * 10 + n)")


def _make(repo):
    """c0 .. c4 of ``KERNELS`` on main; their shas."""
    (repo / "suite").mkdir(parents=True)
    (repo / "kernels").mkdir()
    (repo / "kernels" / "__init__.py").write_text("")
    (repo / "suite" / "__init__.py").write_text("")
    (repo / "suite" / "fam.py").write_text(SUITE)
    (repo / ".gitignore").write_text(".asv/\n")
    conf = tiny_asv_conf()
    (repo / "asv.conf.json").write_text(json.dumps(conf))
    git("init", "-q", "-b", "main", cwd=repo)
    shas = []
    for i, text in enumerate(KERNELS):
        (repo / "kernels" / "gemm.py").write_text(text)
        shas.append(commit(repo, f"c{i}"))
    return shas


def _work_in(monkeypatch, repo):
    monkeypatch.setattr(history, "ROOT", repo)
    monkeypatch.setattr(revisions, "ROOT", repo)


def _backfill(*argv):
    return history.main(["backfill", *argv, "-b", ".", "--machine", MACHINE])


def _results(repo):
    return repo / ".asv" / "results"


@pytest.fixture(scope="module")
def backfilled(tmp_path_factory):
    """The repository after one backfill of main: (path, shas, exit status, its log).
    The tests below only read it; those that measure again work on a copy."""
    repo = tmp_path_factory.mktemp("failed") / "repo"
    shas = _make(repo)
    out = io.StringIO()
    with pytest.MonkeyPatch.context() as mp, contextlib.redirect_stdout(out):
        _work_in(mp, repo)
        code = _backfill("main")
    return repo, shas, code, out.getvalue()


@pytest.fixture
def copied(backfilled, tmp_path, monkeypatch):
    """A copy of the backfilled repository to measure in."""
    repo = tmp_path / "repo"
    shutil.copytree(backfilled[0], repo, symlinks=True)
    _work_in(monkeypatch, repo)
    return repo, backfilled[1]


def test_a_commit_that_does_not_build_is_stored_as_failed_and_the_rest_measured(backfilled):
    repo, shas, code, out = backfilled
    assert code == EXIT_FAILURE
    assert f"history: {shas[1][:10]} cannot be measured: SyntaxError:" in out
    assert f"history: {shas[3][:10]} cannot be measured: RuntimeError: ptxas fatal" in out
    # Every other commit is measured, the broken ones' later ones too.
    for i in MEASURED:
        assert result_files.stored(_results(repo), MACHINE, shas[i]) == {
            "fam.Family.track_value(1)",
            "fam.Family.track_value(2)",
        }
    # Stored as asv stores a commit that does not build: every benchmark without a value.
    failed = result_files.failures(_results(repo), MACHINE)
    assert set(failed) == {shas[1], shas[3]}
    assert failed[shas[1]].error.startswith("SyntaxError: invalid syntax (gemm.py, line 1)")
    assert failed[shas[3]].error == "RuntimeError: ptxas fatal: Insufficient registers"
    for sha in (shas[1], shas[3]):
        loaded = result_files.load(failed[sha].path, MACHINE)
        assert loaded.commit_hash == sha
        params = loaded.get_result_params("fam.Family.track_value")
        assert loaded.get_result_value("fam.Family.track_value", params) == [None, None]
        # It counts as stored.
        assert sha in history.stored_commits(_results(repo), MACHINE)


def test_a_failed_commit_is_not_tried_again_unless_asked(copied, capsys, monkeypatch):
    repo, shas = copied
    listed = []
    real = jobs.suite_listing

    def counting(target):
        listed.append(target.sha)
        return real(target)

    monkeypatch.setattr(jobs, "suite_listing", counting)
    assert _backfill("main") == EXIT_OK
    out = capsys.readouterr().out
    assert f"{shas[1][:10]} is stored as failed (SyntaxError:" in out
    assert f"{shas[3][:10]} is stored as failed (RuntimeError:" in out
    assert listed == [shas[i] for i in MEASURED]
    listed.clear()
    assert _backfill("main", "--retry-failed") == EXIT_FAILURE
    assert listed == shas
    assert set(result_files.failures(_results(repo), MACHINE)) == {shas[1], shas[3]}


def test_publish_skips_a_failed_newest_commit(tmp_path, capsys, monkeypatch):
    repo = tmp_path / "repo"
    shas = _make(repo)
    _work_in(monkeypatch, repo)
    target = Target(repo, shas[1], MACHINE)
    result_files.record_failure(target, "SyntaxError: '(' was never closed\n  more")
    # The newest stored commit is where publish starts; a failed one is not measured.
    assert history.after_newest_stored("main", _results(repo), MACHINE, repo) == shas[1:]
    measured = []
    monkeypatch.setattr(history, "run_target", lambda t, *a, **k: measured.append(t.sha) or 0)
    statuses = history.measure(shas[1:], MACHINE, ["."], gpu=False, log=print)
    assert measured == shas[2:] and set(statuses) == set(shas[2:])
    assert "is stored as failed (SyntaxError: '(' was never closed)" in capsys.readouterr().out


def test_the_detector_and_asv_publish_read_past_a_failed_commit(backfilled, capsys, monkeypatch):
    repo, shas, _, _ = backfilled
    monkeypatch.setattr(detector_inputs, "ROOT", repo)  # the branch that orders the commits
    series, ignored = load_history(_results(repo), MACHINE, shas)
    assert len(series) == 2 and ignored == 0
    for one in series:
        assert [p.commit for p in one.points] == [shas[i] for i in MEASURED]
    argv = ["--results", str(_results(repo)), "--branch", "main"]
    assert rg.main(argv) == EXIT_OK
    captured = capsys.readouterr()
    assert f"(2 benchmarks checked on {MACHINE})" in captured.out
    err = captured.err
    assert "not on main" not in err
    failed = f"{shas[1][:8]}, {shas[3][:8]}"
    assert f"{MACHINE}: 2 commit(s) stored as failed left out: {failed}" in err
    # asv's own publish reads the failed result, without a traceback.
    proc = subprocess.run(
        [sys.executable, "-m", "asv", "publish"], cwd=repo, capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    graphs = list((repo / ".asv" / "html" / "graphs").rglob("fam.Family.track_value.json"))
    (points,) = [json.loads(g.read_text()) for g in graphs if MACHINE in str(g)]
    # asv's mark of a commit that failed: no value for any combination (a gap).
    nothing = [None, None]
    assert points == [
        [0, [11.0, 12.0]],
        [1, nothing],
        [2, [21.0, 22.0]],
        [3, nothing],
        [4, [31.0, 32.0]],
    ]
