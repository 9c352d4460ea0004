"""Durable suite runs on the CPU: one asv run per unit, failures stored and survived,
interrupted runs resumed. A real ``asv run`` on a throwaway repository with a tiny suite."""

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from harness.cli import EXIT_FAILURE, EXIT_INTERRUPTED, EXIT_OK
from harness.suite import run as suite_run
from harness.suite import shard

SUITE = {
    "cpu.py": """
        import random

        class Good:
            params = ([1, 2],)
            param_names = ["n"]

            def track_value(self, n):
                return n + random.random()

        class Bad:
            params = ([1],)
            param_names = ["n"]

            def track_value(self, n):
                raise RuntimeError("this benchmark is broken")
    """,
    "other.py": """
        class Gpuish:
            params = (["a"],)
            param_names = ["x"]

            def case(self, x):
                return None, None

            def track_value(self, x):
                return 3.0
    """,
}


def _git(*args, cwd):
    subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True)


@pytest.fixture
def repo(tmp_path):
    """A git repository holding an asv configuration and the tiny suite."""
    (tmp_path / "suite").mkdir()
    (tmp_path / "suite" / "__init__.py").write_text("")
    for name, body in SUITE.items():
        (tmp_path / "suite" / name).write_text(textwrap.dedent(body))
    conf = {
        "version": 1,
        "project": "t",
        "repo": ".",
        "branches": ["main"],
        "benchmark_dir": "suite",
        "results_dir": ".asv/results",
        "html_dir": ".asv/html",
        "env_dir": ".asv/env",
        "environment_type": "virtualenv",
    }
    (tmp_path / "asv.conf.json").write_text("// a comment, as asv allows\n" + json.dumps(conf))
    _git("init", "-q", "-b", "main", cwd=tmp_path)
    _git("add", ".", cwd=tmp_path)
    _git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "suite", cwd=tmp_path)
    sha = subprocess.check_output(["git", "rev-parse", "HEAD"], cwd=tmp_path, text=True).strip()
    for mod in [m for m in sys.modules if m == "suite" or m.startswith("suite.")]:
        del sys.modules[mod]
    return suite_run.Target(tmp_path, sha, "testbox")


def _stored(target):
    return suite_run.stored(target.results_dir(), target.machine, target.sha)


def test_a_failed_unit_is_stored_as_failed_and_the_rest_still_run(repo, capsys):
    code = suite_run.run_target(repo, log=print)
    assert code == EXIT_FAILURE
    done = _stored(repo)
    assert {"cpu.Good.track_value(1)", "cpu.Good.track_value(2)"} <= done
    assert "other.Gpuish.track_value('a')" in done
    assert not any(name.startswith("cpu.Bad") for name in done)
    (result,) = [
        p for p in (repo.results_dir() / "testbox").glob("*.json") if p.name != "machine.json"
    ]
    stored = json.loads(result.read_text())["results"]
    assert stored["cpu.Bad.track_value"][0] in (None, [None])  # asv's record of a failure
    # A second run skips what is stored and measures only the failed unit again.
    code = suite_run.run_target(repo, log=print)
    out = capsys.readouterr().out
    assert code == EXIT_FAILURE and "1 of 2 units already stored" in out
    assert "[1/1] cpu" in out and "[1/1] other.Gpuish" not in out


def test_an_interrupted_run_keeps_the_finished_units_and_resumes(repo, monkeypatch):
    real = suite_run._run_unit
    seen = []

    def interrupt_second(target, unit, *args):
        seen.append(unit)
        if len(seen) == 2:  # Ctrl-C: SIGINT reaches the main thread, as from a terminal
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(5)
        return real(target, unit, *args)

    monkeypatch.setattr(suite_run, "_run_unit", interrupt_second)
    assert suite_run.run_target(repo, log=print) == EXIT_INTERRUPTED
    assert seen == ["cpu", "other.Gpuish"]
    assert {"cpu.Good.track_value(1)", "cpu.Good.track_value(2)"} <= _stored(repo)
    steps, _ = suite_run.plan_units(repo, [], None)
    # The interrupted unit is planned again (and the failed one, to retry it).
    assert [u for step in steps for us in step.values() for u in us] == seen


def test_selection_by_asv_name_or_gate_name(repo):
    units = suite_run.suite_listing(repo)
    by_gate = suite_run.select(units, [r"cpu\.Good\(2\)"])
    by_asv = suite_run.select(units, [r"cpu\.Good\.track_value\(2\)"])
    assert by_gate == by_asv == {"cpu": ["cpu.Good.track_value(2)"]}
    assert suite_run.selectors("cpu", by_gate["cpu"], 3) == [
        "-b",
        r"^cpu\.Good\.track_value\(2\)$",
    ]
    assert suite_run.selectors("cpu", ["a", "b", "c"], 3) == ["-b", r"^cpu\."]
    assert suite_run.run_target(repo, ["NoSuchBenchmark"], log=print) == EXIT_FAILURE


@pytest.fixture
def fake_asv(monkeypatch):
    """Record each ``asv run`` as ``(cmd, CUDA_VISIBLE_DEVICES)``; nothing is stored."""
    runs = []

    class FakePopen:
        def __init__(self, cmd, **kwargs):
            runs.append((cmd, kwargs["env"].get("CUDA_VISIBLE_DEVICES")))
            self.stdout = iter(["[ 50.00%] ··· gemm.X.track_latency  ok\n"])
            self.returncode = 0

        def wait(self):
            return 0

    monkeypatch.setattr(suite_run.subprocess, "run", lambda *a, **k: None)
    monkeypatch.setattr(suite_run.subprocess, "Popen", FakePopen)
    monkeypatch.setattr(suite_run, "stored", lambda *a: set())
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    return runs


def _patterns(cmd):
    return [cmd[i + 1] for i, arg in enumerate(cmd) if arg == "-b"]


ROOT = Path(__file__).resolve().parent.parent.parent


def test_a_whole_unit_is_selected_by_its_prefix():
    target = suite_run.Target(ROOT, "abc", "h200")
    _, args = suite_run.plan_units(target, [], list(range(8)))
    assert sorted(args) == sorted(shard.family_weights(ROOT))
    for unit, bench in args.items():
        assert bench == ["-b", shard.asv_regex(unit)]


def test_the_host_timed_unit_runs_first_alone_and_pins_follow_the_visible_list(
    fake_asv, monkeypatch, tmp_path
):
    listed = suite_run.discovery.listing(ROOT)
    monkeypatch.setattr(suite_run, "suite_listing", lambda target: listed)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "5,7")
    target = suite_run.Target(ROOT, "abc", "h200")
    monkeypatch.setattr(suite_run.Target, "results_dir", lambda self: tmp_path)
    assert suite_run.run_target(target, gpus=[0, 1], log=lambda line: None) == EXIT_OK
    assert _patterns(fake_asv[0][0]) == [shard.asv_regex("gemm.Launch")]
    assert {gpu for _, gpu in fake_asv} == {"5", "7"}
    units = [p[0] for cmd, _ in fake_asv for p in [_patterns(cmd)]]
    assert len(units) == len(set(units)) == len(shard.family_weights(ROOT))
