"""Durable suite runs on the CPU: one asv run per unit, failures stored and survived,
interrupted runs resumed. A real ``asv run`` on a throwaway repository with a tiny suite."""

import io
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
from harness.suite.asv_phases import PHASES, read_phases
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
    assert code == EXIT_FAILURE and "1 of 2 asv runs already stored" in out
    assert "[1/1] cpu" in out and "[1/1] other.Gpuish" not in out


def test_each_asv_run_logs_its_phases_which_add_up_to_its_seconds(repo):
    """A real ``asv run``: after each run's timing line, the line of its phases, read from
    asv's own output; a phase a run went through took time, and together they are the
    run's seconds (each printed to 0.1 s)."""
    lines = []
    suite_run.run_target(repo, log=lines.append)
    timings = {(step, lane): s for step, lane, s in suite_run.read_timings(lines)}
    found = read_phases(lines)
    assert sorted(timings) == [("cpu", "cpu"), ("other.Gpuish", "gpu")]
    assert sorted((step, lane) for step, lane, _ in found) == sorted(timings)
    for step, lane, seconds in found:
        assert list(seconds) == list(PHASES)
        assert all(seconds[p] > 0 for p in ("start-up", "discovery", "tracks"))
        assert sum(seconds.values()) == pytest.approx(timings[step, lane], abs=0.05 * 8)
    log = (repo.tree / ".asv" / "run-testbox-cpu.log").read_text()
    assert "Discovering benchmarks\n" in log and "cpu.Bad.track_value" in log


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
    assert sorted(job.key for jobs in lanes.values() for job in jobs) == sorted(seen)


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


def _fake_popen(monkeypatch, on_start, out: bytes = b"") -> None:
    """``asv run`` replaced: each start calls ``on_start(cmd, env)`` and prints ``out``."""

    class FakePopen:
        def __init__(self, cmd, **kwargs):
            on_start(cmd, kwargs["env"])
            self.stdout = io.BytesIO(out)
            self.returncode = 0

        def wait(self):
            return 0

    monkeypatch.setattr(suite_run.subprocess, "Popen", FakePopen)


@pytest.fixture
def fake_asv(monkeypatch):
    """Record each ``asv run`` as ``(cmd, CUDA_VISIBLE_DEVICES)``; nothing is stored."""
    runs = []

    _fake_popen(
        monkeypatch,
        lambda cmd, env: runs.append((cmd, env.get("CUDA_VISIBLE_DEVICES"))),
        "[ 50.00%] ··· gemm.X.track_latency  ok\n".encode(),
    )
    monkeypatch.setattr(suite_run.subprocess, "run", lambda *a, **k: None)
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
    units = [p.unit for j in _jobs(lanes) for p in j.batch.pieces]
    assert sorted(units) == sorted(suite_listing(target))
    for job in _jobs(lanes):
        assert list(job.bench) == [
            arg for p in job.batch.pieces for arg in ("-b", shard.asv_regex(p.unit))
        ]


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
    every_cpu = [c for names in weights.cpu_combinations(ROOT).values() for c in names]
    assert sorted(c for j in cpu_jobs for c in j.combos) == sorted(every_cpu)
    # Balanced: the busiest GPU within one piece of an even share.
    units = weights.combination_weights(ROOT)
    pieces = [p for j in gpu_jobs for p in j.batch.pieces]
    loads = [sum(j.batch.weight for j in jobs) for lane, jobs in lanes.items() if not lane.cpu]
    assert max(loads) <= sum(loads) / gpus + max(p.weight for p in pieces)
    # Every piece pays its family process's start: a family is cut only where the second
    # process costs less than the balance gains.
    process = weights.recorded_calibration(ROOT).process
    for p in pieces:
        assert p.weight == pytest.approx(process + sum(units[p.unit][c] for c in p.combos))


@pytest.mark.parametrize("user", [[r"Tuned"], [r"bf16"], [r"Stage\(", r"Launch"]])
def test_a_combination_keeps_its_gpu_whatever_else_is_selected(user, nothing_stored):
    target = Target(ROOT, "abc", "h200")
    full, _ = suite_jobs.plan_units(target, [], [0, 1, 2, 3])
    where = {c: lane for lane, jobs in full.items() for j in jobs for c in j.combos}
    narrow, _ = suite_jobs.plan_units(target, user, [0, 1, 2, 3])
    assert narrow
    for lane, jobs in narrow.items():
        for job in jobs:
            assert all(re.search("|".join(user), c) or c.startswith("static.") for c in job.combos)
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
            self.stdout = io.BytesIO("· Discovering benchmarks\n".encode())
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
    # One CPU lane, whole, keeps its default workers; the static work cut over CPU lanes
    # (four GPUs, whose busiest lane is short) shares half the cores.
    assert len(cpu) > 1 or gpus == 2
    if len(cpu) == 1:
        assert workers == [None]
    else:
        assert set(workers) == {str(cores // 2 // len(cpu))}


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
    lanes = {
        lane: [[p.unit for p in b.pieces] for b in bs]
        for lane, bs in suite_jobs.lane_batches(LISTED, gpus, weights, 1.0).items()
    }
    assert lanes[CPU_LANE] == [["static"]]
    gpu_lanes = [lane for lane in lanes if not lane.cpu]
    placed = sorted(u for lane in gpu_lanes for b in lanes[lane] for u in b)
    assert placed == ["gemm.A", "gemm.B", "gemm.C", "gemm.Launch"]
    (home,) = [lane for lane in gpu_lanes if any("gemm.Launch" in b for b in lanes[lane])]
    assert lanes[home][0] == ["gemm.Launch"]  # first, and in an asv run of its own
    # Every lane stores under its own asv machine: asv rewrites a commit's results file at
    # the end of each run, so two lanes on one machine would drop each other's results.
    machines = [lane.machine("h200") for lane in lanes]
    assert len(set(machines)) == len(machines)
    assert CPU_LANE.machine("h200") == "h200-cpu"


def test_a_cpu_only_selection_runs_in_the_cpu_lane_alone():
    lanes = suite_jobs.lane_batches({"static": LISTED["static"]}, None, {})
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
    # A batch's line names its pieces, joined with +.
    units = [u for step, _, _ in steps for u in step.split("+")]
    assert sorted(units) == sorted([*listed, "publish"])
    lanes = {u: lane for step, lane, _ in steps for u in step.split("+")}
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


def test_a_batched_runs_asv_arguments_select_exactly_its_pieces(monkeypatch, tmp_path):
    listed = discovery.listing(ROOT)
    every = {n: u for u, e in listed.items() for n in e["names"]}
    stored = set(list(listed["gemm.Tuned"]["names"])[::3])
    monkeypatch.setattr(result_files, "stored", lambda *a: stored)
    monkeypatch.setattr(Target, "results_dir", lambda self: tmp_path)
    target = Target(ROOT, "abc", "h200")
    for user in ([], [r"bf16"]):
        lanes, _ = suite_jobs.plan_units(target, user, [0, 1, 2, 3])
        chosen = {n for names in suite_jobs.select(listed, user).values() for n in names}
        assert any(len(j.batch.pieces) > 1 for j in _jobs(lanes))  # several families a run
        for job in _jobs(lanes):
            # asv runs a benchmark when any -b regex matches its name (re.search).
            regexes = _patterns(["x", *job.bench])
            ran = {n for n in every if any(re.search(r, n) for r in regexes)}
            mine = {
                n
                for p in job.batch.pieces
                for n, aliases in listed[p.unit]["names"].items()
                if aliases[1] in p.combos
            }
            assert ran == (mine & chosen) - stored
            assert set(job.combos) == {listed[every[n]]["names"][n][1] for n in ran}


class _Waits(io.BytesIO):
    """asv's output that comes only once ``event`` is set."""

    def __init__(self, event: threading.Event, text: str):
        super().__init__(text.encode())
        self.event = event

    def read1(self, size: int = -1) -> bytes:
        # No lane ends its first run before every lane has started one.
        self.event.wait(10)
        return super().read1(size)


def test_lanes_start_their_runs_at_once_each_with_its_own_machine_file(monkeypatch, tmp_path):
    started, machine_files = [], []
    everyone = threading.Event()
    lock = threading.Lock()

    class FakePopen:
        def __init__(self, cmd, **kwargs):
            with lock:
                started.append(cmd)
                machine_files.append(cmd[cmd.index("-c") + 2])
                if len(started) == 3:
                    everyone.set()
            self.returncode = 0
            self.stdout = _Waits(everyone, "· Discovering benchmarks\n")

        def wait(self):
            return 0

    setup = []
    monkeypatch.setattr(suite_run.subprocess, "run", lambda cmd, **k: setup.append(cmd))
    monkeypatch.setattr(suite_run.subprocess, "Popen", FakePopen)
    monkeypatch.setattr(result_files, "stored", lambda *a: set())
    monkeypatch.setattr(Target, "results_dir", lambda self: tmp_path)
    monkeypatch.setattr(suite_run.os, "cpu_count", lambda: 16)
    target = Target(ROOT, "abc", "h200")
    assert suite_run.run_target(target, gpus=[0, 1], log=lambda line: None) == EXIT_OK
    assert everyone.is_set(), "a lane waited for another's run to start theirs"
    # Each lane's asv (machine set-up and runs) keeps its own machine file.
    files = {cmd[cmd.index("-c") + 2] for cmd in setup}
    assert files == {str(target.machine_file(m)) for m in ("h200-gpu0", "h200-gpu1", "h200-cpu")}
    assert set(machine_files) <= files


def test_a_batch_resumes_with_only_its_missing_pieces(repo, monkeypatch, tmp_path):
    (repo.tree / "suite" / "more.py").write_text(
        textwrap.dedent(SUITE["other.py"]).replace("Gpuish", "Twin").replace('"a"', '"b"')
    )
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    listed = suite_listing(repo)
    weights = {u: {al[1]: 1.0 for al in e["names"].values()} for u, e in listed.items()}
    monkeypatch.setattr(suite_jobs, "plan_weights", lambda target, gpus: (weights, 1.0, 0.0))
    (gpu_batch,) = suite_jobs.lane_batches(listed, None, weights, 1.0)[Lane()]
    assert gpu_batch.key == "more.Twin+other.Gpuish"  # one asv run, two families
    real = suite_run._run_unit
    # Part of the batch gets stored (the batch runs with its first family's selector only,
    # as a narrower -b run would store it); an interrupted batch stores none of it.
    monkeypatch.setattr(
        suite_run,
        "_run_unit",
        lambda target, unit, lane, bench, *rest: real(
            target, unit, lane, bench[:2] if "+" in unit else bench, *rest
        ),
    )
    suite_run.run_target(repo, log=print)
    assert "more.Twin.track_value('b')" in _stored(repo)
    assert "other.Gpuish.track_value('a')" not in _stored(repo)
    lanes, _ = suite_jobs.plan_units(repo, [], None)
    (job,) = lanes[Lane()]
    assert job.key == "other.Gpuish"
    assert job.bench == ("-b", shard.asv_regex("other.Gpuish"))
    assert job.combos == ("other.Gpuish(a)",)
    monkeypatch.setattr(suite_run, "_run_unit", real)
    suite_run.run_target(repo, log=print)
    assert "other.Gpuish.track_value('a')" in _stored(repo)
    # asv kept each lane's machine in the lane's own file, none in the home.
    assert not (home / ".asv-machine.json").exists()
    for lane in (Lane(), CPU_LANE):
        machine = lane.machine(repo.machine)
        assert machine in json.loads(repo.machine_file(machine).read_text())


def test_a_lane_whose_asv_machine_fails_fails_alone_and_frees_the_cpu_lanes(monkeypatch, tmp_path):
    """The lanes write their machine files in their own threads: one that cannot (asv
    refuses) marks its runs failed and lets the CPU lanes go, never hangs them."""
    ran = []

    _fake_popen(
        monkeypatch,
        lambda cmd, env: ran.append(env.get("CUDA_VISIBLE_DEVICES")),
        "[ 50.00%] ··· gemm.X  ok\n".encode(),
    )
    monkeypatch.setattr(result_files, "stored", lambda *a: set())
    monkeypatch.setattr(Target, "results_dir", lambda self: tmp_path)
    monkeypatch.setattr(suite_run.os, "cpu_count", lambda: 32)
    target = Target(ROOT, "abc", "h200")
    lanes, _ = suite_jobs.plan_units(target, [], [0, 1])
    # The lane that fails is the one with the host-timing (solo) family, which the CPU
    # lanes wait for.
    (solo_lane,) = [lane for lane, jobs in lanes.items() if any(j.solo for j in jobs)]
    failing = lanes[solo_lane]
    gpu = str(solo_lane.gpu)

    def machine(cmd, **kwargs):
        if kwargs["env"].get("CUDA_VISIBLE_DEVICES") == gpu:
            raise subprocess.CalledProcessError(1, cmd, stderr=b"asv: error: no home\n")

    monkeypatch.setattr(suite_run.subprocess, "run", machine)
    lines = []
    code = suite_run.run_target(target, gpus=[0, 1], log=lines.append)
    assert code == EXIT_FAILURE
    other = "1" if gpu == "0" else "0"
    assert gpu not in ran and "" in ran and other in ran  # the CPU lanes and the other GPU
    (why,) = [line for line in lines if "asv machine failed" in line]
    assert "asv: error: no home" in why and f"{len(failing)} asv run(s) did not run" in why
    failed = [line for line in lines if "FAILED" in line]
    assert len(failed) == len(failing)


def test_log_lines_from_many_lanes_never_glue(monkeypatch):
    writes = []

    class Out:
        def write(self, text):
            writes.append(text)
            time.sleep(0)  # give another thread the chance to write in between

        def flush(self):
            pass

    monkeypatch.setattr(suite_run.sys, "stdout", Out())
    threads = [
        threading.Thread(target=lambda i=i: [suite_run._log(f"timing u{i} gpu{i}: 1.0 s")] * 50)
        for i in range(8)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(writes) == 8 and all(w.count("\n") == 1 and w.endswith(" s\n") for w in writes)


def test_each_family_process_seconds_are_logged_after_its_run(monkeypatch, tmp_path):
    from harness.suite import cost

    gpu = {u for u, e in discovery.listing(ROOT).items() if e["gpu"]}

    def records(cmd, env):
        assert env[discovery.SECONDS_ENV]  # the runner asks for the records
        names = json.loads(env.get(discovery.COMBINATIONS_ENV, "[]"))
        # What each GPU family's setup_cache appends (asv_bench.gemm.measure_all).
        for unit in sorted({n.split("(")[0] for n in names} & gpu):
            combos = {n: 0.5 for n in names if n.startswith(unit + "(")}
            discovery.record_seconds(unit, 1.0 + len(combos) / 2, combos, env)

    _fake_popen(monkeypatch, records)
    monkeypatch.setattr(suite_run.subprocess, "run", lambda *a, **k: None)
    monkeypatch.setattr(result_files, "stored", lambda *a: set())
    monkeypatch.setattr(Target, "results_dir", lambda self: tmp_path)
    lines = []
    target = Target(ROOT, "abc", "h200")
    assert suite_run.run_target(target, gpus=[0], log=lines.append) == EXIT_OK
    run = cost.Run.read(lines)
    assert run.combinations and all(set(s.values()) == {0.5} for s in run.combinations.values())
    families = {unit for unit, _, _ in suite_run.read_families(lines)}
    gpu_units = {u for u, e in discovery.listing(ROOT).items() if e["gpu"]}
    assert families == gpu_units  # the solo family's too (the model leaves it out)
