"""Durable suite runs on the CPU: one asv run per unit, failures stored and survived,
interrupted runs resumed. A real ``asv run`` on a throwaway repository with a tiny suite."""

import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from harness.cli import EXIT_FAILURE, EXIT_INTERRUPTED, EXIT_OK
from harness.suite import run as suite_run
from harness.suite import shard
from tests.fakes import tiny_asv_conf

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
    conf = tiny_asv_conf()
    (tmp_path / "asv.conf.json").write_text("// a comment, as asv allows\n" + json.dumps(conf))
    _git("init", "-q", "-b", "main", cwd=tmp_path)
    _git("add", ".", cwd=tmp_path)
    _git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "suite", cwd=tmp_path)
    sha = subprocess.check_output(["git", "rev-parse", "HEAD"], cwd=tmp_path, text=True).strip()
    for mod in [m for m in sys.modules if m == "suite" or m.startswith("suite.")]:
        del sys.modules[mod]
    return suite_run.Target(tmp_path, sha, "testbox")


def _stored(target):
    """Both lanes' results: the GPU-like unit's and the CPU units' (``testbox-cpu``)."""
    return {
        name
        for lane in (suite_run.Lane(), suite_run.CPU_LANE)
        for name in suite_run.stored(target.results_dir(), lane.machine(target.machine), target.sha)
    }


def test_a_failed_unit_is_stored_as_failed_and_the_rest_still_run(repo, capsys):
    code = suite_run.run_target(repo, log=print)
    assert code == EXIT_FAILURE
    done = _stored(repo)
    assert {"cpu.Good.track_value(1)", "cpu.Good.track_value(2)"} <= done
    assert "other.Gpuish.track_value('a')" in done
    assert not any(name.startswith("cpu.Bad") for name in done)
    (result,) = [
        p for p in (repo.results_dir() / "testbox-cpu").glob("*.json") if p.name != "machine.json"
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
    cpu_done = threading.Event()
    seen = []

    def interrupt_gpu_lane(target, unit, *args):
        seen.append(unit)
        if unit == "cpu":  # the CPU lane's unit finishes and is stored
            result = real(target, unit, *args)
            cpu_done.set()
            return result
        # Ctrl-C while the GPU lane's unit runs: SIGINT reaches the main thread, as from a
        # terminal.
        cpu_done.wait(60)
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(5)
        return real(target, unit, *args)

    monkeypatch.setattr(suite_run, "_run_unit", interrupt_gpu_lane)
    # A process started in the background inherits SIGINT ignored, and Python then sets up
    # no KeyboardInterrupt: give this test the terminal's behaviour wherever it runs.
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        assert suite_run.run_target(repo, log=print) == EXIT_INTERRUPTED
    finally:
        signal.signal(signal.SIGINT, previous)
    assert sorted(seen) == ["cpu", "other.Gpuish"]
    done = _stored(repo)
    assert {"cpu.Good.track_value(1)", "cpu.Good.track_value(2)"} <= done
    assert "other.Gpuish.track_value('a')" not in done
    steps, _ = suite_run.plan_units(repo, [], None)
    # The interrupted unit is planned again (and the failed one, to retry it).
    assert sorted(u for step in steps for us in step.values() for u in us) == sorted(seen)


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
    # The CPU lane sees no GPU at all.
    assert {gpu for _, gpu in fake_asv} == {"5", "7", ""}
    units = [p[0] for cmd, _ in fake_asv for p in [_patterns(cmd)]]
    assert len(units) == len(set(units)) == len(shard.family_weights(ROOT))


LISTED = {
    "gemm.Launch": {"solo": True, "gpu": True},
    "gemm.A": {"solo": False, "gpu": True},
    "gemm.B": {"solo": False, "gpu": True},
    "gemm.C": {"solo": False, "gpu": True},
    "static": {"solo": False, "gpu": False},
}


@pytest.mark.parametrize("gpus", [None, [0], [0, 1], [0, 1, 2, 3]])
def test_the_cpu_units_run_beside_the_gpu_lanes_after_the_solo_unit(gpus):
    weights = {"gemm.A": 3.0, "gemm.B": 2.0, "gemm.C": 1.0}
    steps = suite_run.lane_steps(LISTED, gpus, weights)
    assert len(steps) == 2
    assert list(steps[0].values()) == [["gemm.Launch"]] and suite_run.CPU_LANE not in steps[0]
    assert steps[-1][suite_run.CPU_LANE] == ["static"]
    gpu_lanes = [lane for lane in steps[-1] if not lane.cpu]
    assert sorted(u for lane in gpu_lanes for u in steps[-1][lane]) == [
        "gemm.A",
        "gemm.B",
        "gemm.C",
    ]
    assert len(gpu_lanes) == min(len(gpus or [None]), 3)
    # Every lane stores under its own asv machine: asv rewrites a commit's results file at
    # the end of each run, so two lanes on one machine would drop each other's results.
    machines = [lane.machine("h200") for step in steps for lane in step]
    assert len(set(machines[1:])) == len(machines) - 1
    assert suite_run.CPU_LANE.machine("h200") == "h200-cpu"


def test_a_cpu_only_selection_runs_in_the_cpu_lane_alone():
    steps = suite_run.lane_steps({"static": LISTED["static"]}, None, {})
    assert steps == [{suite_run.CPU_LANE: ["static"]}]
    with pytest.raises(ValueError, match="a CPU lane has no GPU"):
        suite_run.Lane(gpu=0, cpu=True)


def test_each_unit_logs_its_seconds_and_the_log_reads_back(fake_asv, monkeypatch, tmp_path):
    listed = suite_run.discovery.listing(ROOT)
    monkeypatch.setattr(suite_run, "suite_listing", lambda target: listed)
    monkeypatch.setattr(suite_run.Target, "results_dir", lambda self: tmp_path)
    lines = []
    target = suite_run.Target(ROOT, "abc", "h200")
    assert suite_run.run_target(target, log=lines.append) == EXIT_OK
    steps = suite_run.read_timings(["noise", *lines, suite_run.timing_line("publish", 3.25)])
    assert sorted(step for step, _, _ in steps) == sorted([*listed, "publish"])
    lanes = {step: lane for step, lane, _ in steps}
    assert lanes["static"] == "cpu" and lanes["gemm.Stage"] == "gpu" and lanes["publish"] == ""
    assert steps[-1] == ("publish", "", 3.2) or steps[-1] == ("publish", "", 3.3)


@pytest.mark.parametrize("damage", ["truncated", "a list"])
def test_a_damaged_results_file_is_set_aside_and_its_units_measured_again(repo, capsys, damage):
    suite_run.run_target(repo, log=print)
    folder = repo.results_dir() / "testbox-cpu"
    (path,) = [p for p in folder.glob("*.json") if p.name != "machine.json"]
    text = path.read_text()
    # asv writes the file in place: a run cut off mid-write leaves half of it.
    bad = text[: len(text) // 2] if damage == "truncated" else "[]"
    path.write_text(bad)
    capsys.readouterr()
    assert suite_run.run_target(repo, log=print) == EXIT_FAILURE  # cpu.Bad fails, as before
    out = capsys.readouterr().out
    assert f"run: warning: {path} is damaged (" in out
    assert "FAILED (asv exit 1)" not in out
    kept = repo.tree / ".asv" / "quarantine" / "testbox-cpu" / path.name
    assert kept.read_text() == bad and f"moved to {kept}" in out
    assert {"cpu.Good.track_value(1)", "cpu.Good.track_value(2)"} <= _stored(repo)


def test_a_suite_that_does_not_import_is_an_error_not_a_traceback(monkeypatch, capsys):
    def broken(root):
        raise SyntaxError("'(' was never closed", ("gemm.py", 12, 11, "VALUE = (\n"))

    monkeypatch.setattr(suite_run.discovery, "listing", broken)
    monkeypatch.setattr("harness.measure.device.no_gpu_reason", lambda: "test: no GPU")
    assert suite_run.main(["--no-publish", "--machine", "testbox"]) == EXIT_FAILURE
    err = capsys.readouterr().err
    assert "cannot be listed: SyntaxError: '(' was never closed (gemm.py, line 12)" in err
