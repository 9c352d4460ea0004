"""Durable suite runs on the CPU: one asv run per unit, failures stored and survived,
interrupted runs resumed. A real ``asv run`` on a throwaway repository with a tiny suite."""

import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from harness.cli import EXIT_FAILURE, EXIT_INTERRUPTED, EXIT_OK
from harness.suite import discovery, result_files, shard, weights
from harness.suite import jobs as suite_jobs
from harness.suite import run as suite_run
from harness.suite.target import CPU_LANE, Lane, Target, suite_listing
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
    return Target(tmp_path, sha, "testbox")


def _stored(target):
    """Both lanes' results: the GPU-like unit's and the CPU units' (``testbox-cpu``)."""
    return {
        name
        for lane in (Lane(), CPU_LANE)
        for name in result_files.stored(
            target.results_dir(), lane.machine(target.machine), target.sha
        )
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
    assert code == EXIT_FAILURE and "1 of 2 pieces already stored" in out
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
    lanes, _ = suite_jobs.plan_units(repo, [], None)
    # The interrupted unit is planned again (and the failed one, to retry it).
    assert sorted(job.piece.key for jobs in lanes.values() for job in jobs) == sorted(seen)


def test_selection_by_asv_name_or_gate_name(repo):
    units = suite_listing(repo)
    by_gate = suite_jobs.select(units, [r"cpu\.Good\(2\)"])
    by_asv = suite_jobs.select(units, [r"cpu\.Good\.track_value\(2\)"])
    assert by_gate == by_asv == {"cpu": ["cpu.Good.track_value(2)"]}
    assert suite_jobs.selectors("cpu", by_gate["cpu"], 3) == [
        "-b",
        r"^cpu\.Good\.track_value\(2\)$",
    ]
    assert suite_jobs.selectors("cpu", ["a", "b", "c"], 3) == ["-b", r"^cpu\."]
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
    monkeypatch.setattr(result_files, "stored", lambda *a: set())
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    return runs


def _patterns(cmd):
    return [cmd[i + 1] for i, arg in enumerate(cmd) if arg == "-b"]


ROOT = Path(__file__).resolve().parent.parent.parent


def _jobs(lanes):
    return [job for jobs in lanes.values() for job in jobs]


@pytest.fixture
def nothing_stored(monkeypatch, tmp_path):
    monkeypatch.setattr(Target, "results_dir", lambda self: tmp_path)


def test_a_whole_unit_is_selected_by_its_prefix(nothing_stored):
    target = Target(ROOT, "abc", "h200")
    lanes, _ = suite_jobs.plan_units(target, [], None)
    assert sorted(j.piece.unit for j in _jobs(lanes)) == sorted(suite_listing(target))
    for job in _jobs(lanes):
        assert list(job.bench) == ["-b", shard.asv_regex(job.piece.unit)]


def _gpu_combos():
    listed = discovery.listing(ROOT)
    return {
        aliases[1]
        for unit, entry in listed.items()
        if entry["gpu"]
        for aliases in entry["names"].values()
    }


@pytest.mark.parametrize("gpus", [1, 2, 4, 8])
def test_every_combination_runs_exactly_once_and_no_gpu_carries_the_largest_family(
    gpus, nothing_stored
):
    target = Target(ROOT, "abc", "h200")
    lanes, _ = suite_jobs.plan_units(target, [], list(range(gpus)))
    gpu_jobs = [j for lane, jobs in lanes.items() if not lane.cpu for j in jobs]
    measured = [c for j in gpu_jobs for c in j.combos]
    assert sorted(measured) == sorted(_gpu_combos())
    cpu_jobs = [j for lane, jobs in lanes.items() if lane.cpu for j in jobs]
    every_cpu = weights.cpu_combinations(ROOT)["static"]
    assert sorted(c for j in cpu_jobs for c in j.combos) == sorted(every_cpu)
    # Balanced: the busiest GPU within one piece of an even share.
    units = weights.combination_weights(ROOT)
    loads = [sum(j.piece.weight for j in jobs) for lane, jobs in lanes.items() if not lane.cpu]
    assert max(loads) <= sum(loads) / gpus + max(j.piece.weight for j in gpu_jobs)
    # The largest GPU family (Tuned, a third of the work) is cut once its share is smaller.
    largest = max((u for u in units if u != "static"), key=lambda u: sum(units[u].values()))
    cut = {j.piece.key for j in gpu_jobs if j.piece.unit == largest}
    assert (len(cut) > 1) == (gpus >= 4)


@pytest.mark.parametrize("user", [[r"Tuned"], [r"bf16"], [r"Stage\(", r"Launch"]])
def test_a_combination_keeps_its_gpu_whatever_else_is_selected(user, nothing_stored):
    target = Target(ROOT, "abc", "h200")
    full, _ = suite_jobs.plan_units(target, [], [0, 1, 2, 3])
    where = {c: lane for lane, jobs in full.items() for j in jobs for c in j.combos}
    narrow, _ = suite_jobs.plan_units(target, user, [0, 1, 2, 3])
    assert narrow
    for lane, jobs in narrow.items():
        for job in jobs:
            assert all(
                re.search("|".join(user), c) or job.piece.unit == "static" for c in job.combos
            )
            assert {where[c] for c in job.combos} == {lane}


def test_resuming_measures_only_the_combinations_not_stored(monkeypatch, tmp_path):
    listed = discovery.listing(ROOT)
    tuned = [n for n in listed["gemm.Tuned"]["names"]]
    half = set(tuned[: len(tuned) // 2])
    monkeypatch.setattr(result_files, "stored", lambda *a: half)
    monkeypatch.setattr(Target, "results_dir", lambda self: tmp_path)
    target = Target(ROOT, "abc", "h200")
    lanes, _ = suite_jobs.plan_units(target, ["Tuned"], [0, 1])
    jobs = _jobs(lanes)
    done_combos = {listed["gemm.Tuned"]["names"][n][1] for n in half}
    measured = {c for j in jobs for c in j.combos}
    # Every combination of a stored name with both tracks stored is left out.
    both = {
        c
        for c in done_combos
        if all(n in half for n, al in listed["gemm.Tuned"]["names"].items() if al[1] == c)
    }
    assert measured and not measured & both
    assert measured | both == {al[1] for al in listed["gemm.Tuned"]["names"].values()}
    assert all(re.escape(n) not in " ".join(j.bench) for j in jobs for n in half)


@pytest.mark.parametrize("gpus, cores", [(2, 32), (4, 64)])
def test_the_host_timed_family_shares_the_start_and_the_cpu_lanes_wait_for_it(
    monkeypatch, tmp_path, gpus, cores
):
    monkeypatch.setattr(suite_run.os, "cpu_count", lambda: cores)
    workers = []
    events = []
    other_started = threading.Event()
    lock = threading.Lock()

    class FakePopen:
        def __init__(self, cmd, **kwargs):
            env = kwargs["env"]
            self.name = _patterns(cmd)[0]
            self.combos = json.loads(env[discovery.COMBINATIONS_ENV])
            self.gpu = env.get("CUDA_VISIBLE_DEVICES")
            if self.gpu == "":
                workers.append(env.get(discovery.CPU_WORKERS_ENV))
            with lock:
                events.append(("start", self.name, self.gpu))
            if "Launch" not in self.name and self.gpu != "":
                other_started.set()
            # asv's line after its machine file is written: the next lane may start.
            self.stdout = iter([f"· {suite_run._DISCOVERING}\n"])
            self.returncode = 0

        def wait(self):
            if "Launch" in self.name:
                # Another GPU's work starts while the host-timed family still runs.
                other_started.wait(10)
            with lock:
                events.append(("end", self.name, self.gpu))
            return 0

    monkeypatch.setattr(suite_run.subprocess, "run", lambda *a, **k: None)
    monkeypatch.setattr(suite_run.subprocess, "Popen", FakePopen)
    monkeypatch.setattr(result_files, "stored", lambda *a: set())
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.setattr(Target, "results_dir", lambda self: tmp_path)
    target = Target(ROOT, "abc", "h200")
    assert suite_run.run_target(target, gpus=list(range(gpus)), log=lambda line: None) == EXIT_OK
    launch = [i for i, e in enumerate(events) if "Launch" in e[1]]
    start_launch, end_launch = launch
    launch_gpu = events[start_launch][2]
    first_on_its_gpu = next(e for e in events if e[0] == "start" and e[2] == launch_gpu)
    assert "Launch" in first_on_its_gpu[1]
    others = [i for i, e in enumerate(events) if e[0] == "start" and e[2] not in ("", launch_gpu)]
    assert others and others[0] < end_launch
    cpu = [i for i, e in enumerate(events) if e[0] == "start" and e[2] == ""]
    # No compile while Launch times the host: every CPU lane starts after it ends.
    assert cpu and min(cpu) > end_launch
    # Two GPUs: one CPU lane, whole, with its default workers. Four: the static work cut
    # over CPU lanes whose workers share half the cores.
    if gpus == 2:
        assert len(cpu) == 1 and workers == [None]
    else:
        assert len(cpu) > 1 and set(workers) == {str(cores // 2 // len(cpu))}


LISTED = {
    "gemm.Launch": {"solo": True, "gpu": True, "names": {"L.t": ["L.t", "gemm.Launch(x)"]}},
    "gemm.A": {"solo": False, "gpu": True, "names": {"A.t": ["A.t", "gemm.A(x)"]}},
    "gemm.B": {"solo": False, "gpu": True, "names": {"B.t": ["B.t", "gemm.B(x)"]}},
    "gemm.C": {"solo": False, "gpu": True, "names": {"C.t": ["C.t", "gemm.C(x)"]}},
    "static": {"solo": False, "gpu": False, "names": {"s.t": ["s.t", "static.S"]}},
}


@pytest.mark.parametrize("gpus", [None, [0], [0, 1], [0, 1, 2, 3]])
def test_the_cpu_units_run_in_their_own_lane_and_the_solo_unit_first_in_its_own(gpus):
    weights = {u: {e["names"][n][1]: 1.0 for n in e["names"]} for u, e in LISTED.items()}
    lanes = suite_jobs.lane_pieces(LISTED, gpus, weights)
    assert [p.unit for p in lanes[CPU_LANE]] == ["static"]
    gpu_lanes = [lane for lane in lanes if not lane.cpu]
    placed = sorted(p.unit for lane in gpu_lanes for p in lanes[lane])
    assert placed == ["gemm.A", "gemm.B", "gemm.C", "gemm.Launch"]
    (home,) = [lane for lane in gpu_lanes if "gemm.Launch" in [p.unit for p in lanes[lane]]]
    assert lanes[home][0].unit == "gemm.Launch"
    # Every lane stores under its own asv machine: asv rewrites a commit's results file at
    # the end of each run, so two lanes on one machine would drop each other's results.
    machines = [lane.machine("h200") for lane in lanes]
    assert len(set(machines)) == len(machines)
    assert CPU_LANE.machine("h200") == "h200-cpu"


def test_a_cpu_only_selection_runs_in_the_cpu_lane_alone():
    lanes = suite_jobs.lane_pieces({"static": LISTED["static"]}, None, {})
    assert list(lanes) == [CPU_LANE]
    with pytest.raises(ValueError, match="a CPU lane has no GPU"):
        Lane(gpu=0, cpu=True)
    # Several CPU lanes run at once: each stores under its own machine.
    assert Lane(cpu=True, slot=2).machine("h200") == "h200-cpu2"
    assert Lane(cpu=True, slot=2).tag == "cpu2"
    with pytest.raises(ValueError, match="only a CPU lane has a slot"):
        Lane(gpu=1, slot=1)


@pytest.mark.parametrize("text", ["0", "x", "-2", ""])
def test_the_cpu_workers_variable_is_checked(text):
    env = discovery.CPU_WORKERS_ENV
    with pytest.raises(ValueError, match=f"{env}={text!r}: must be a whole number >= 1"):
        discovery.cpu_workers(4, {env: text})
    assert discovery.cpu_workers(4, {}) == 4
    assert discovery.cpu_workers(4, {env: "3"}) == 3


def test_each_unit_logs_its_seconds_and_the_log_reads_back(fake_asv, monkeypatch, tmp_path):
    listed = discovery.listing(ROOT)
    monkeypatch.setattr(suite_jobs, "suite_listing", lambda target: listed)
    monkeypatch.setattr(Target, "results_dir", lambda self: tmp_path)
    lines = []
    target = Target(ROOT, "abc", "h200")
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
