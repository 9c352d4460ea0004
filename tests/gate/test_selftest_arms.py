"""Several slowdowns in one self-test (each its own injected side in the same workers,
its own verdicts, record and cycles), and ``--stop-after``; on the CPU with fake workers."""

import json
import statistics

import pytest

from harness.cli import EXIT_INTERRUPTED
from harness.gate import selftest, selftest_tally
from harness.revisions import launch
from tests.fakes import WORKER_NAMES as NAMES
from tests.fakes import FakePairedWorker, FakeWorker
from tests.gate.test_selftest_resume import _offline

ONE = "injected@0.01"


def _two(tmp_path, n, method="paired", **kw):
    """2% against the 1% floor, and 1% against a 0.5% floor, in the same workers."""
    also = (selftest.Arm(ONE, 0.01, 0.005),)
    return selftest.Setup(tmp_path, ".", n, 1, 0.02, 0.01, tmp_path, None, method, also=also, **kw)


def _arm(results, k):
    return selftest_tally.tally([it[2 * k] for it in results], [it[2 * k + 1] for it in results])


def test_two_slowdowns_share_each_paired_worker_and_get_their_own_verdicts(monkeypatch, tmp_path):
    worker = FakePairedWorker()
    monkeypatch.setattr(launch, "run_paired", worker)
    results = selftest.iterate(_two(tmp_path, 3), log=lambda line: None)
    assert len(worker.calls) == 3  # one worker per iteration, not two
    assert all(c["sides"] == ["base", "head", "injected", ONE] for c in worker.calls)
    assert all(c["inject"] == {"injected": 0.02, ONE: 0.01} for c in worker.calls)
    # The first calibrates both; the later ones set both files' cycles.
    files = [tmp_path / "inject-cycles.json", tmp_path / f"inject-cycles-{ONE}.json"]
    assert worker.calls[0]["inject_cycles"] is None
    assert all(c["inject_cycles"] == files for c in worker.calls[1:])
    assert [json.loads(f.read_text())["slowdown"] for f in files] == [0.02, 0.01]
    assert all(len(it) == 4 for it in results)
    for k, slowdown in enumerate((0.02, 0.01)):
        t = _arm(results, k)
        assert t.false_alarm_runs == 0 and set(t.detections.values()) == {3}
        for ratios in t.injected_ratios.values():
            assert abs(statistics.median(ratios) - (1 + slowdown)) < 0.003
    # Each arm is decided at its own threshold, the A/A comparison included.
    assert {v.threshold for v in results[0][0]} == {0.01}
    assert {v.threshold for v in results[0][2]} == {0.005}


def test_a_1pct_injection_against_a_1pct_floor_is_not_detected_but_its_own_arm_is(
    monkeypatch, tmp_path
):
    """The arms' thresholds are not mixed up: 1% injected is missed at the 2% record's
    1% floor only if the arm used it; here the 1% arm's 0.5% floor catches it."""
    monkeypatch.setattr(launch, "run_paired", FakePairedWorker())
    also = (selftest.Arm(ONE, 0.01, 0.011),)  # a floor above its own slowdown
    setup = selftest.Setup(tmp_path, ".", 2, 1, 0.02, 0.01, tmp_path, None, "paired", also=also)
    results = selftest.iterate(setup, log=lambda line: None)
    assert set(_arm(results, 0).detections.values()) == {2}
    assert set(_arm(results, 1).detections.values()) == {0}


def test_process_mode_runs_each_injected_side_as_its_own_worker(monkeypatch, tmp_path):
    worker = FakeWorker()
    monkeypatch.setattr(launch, "run_worker", worker)
    results = selftest.iterate(_two(tmp_path, 2, method="process"), log=lambda line: None)
    assert len(worker.calls) == 4 * 2
    assert sorted(c["inject"] for c in worker.calls[:4]) == [0.0, 0.0, 0.01, 0.02]
    later = [c for c in worker.calls[4:] if c["inject"]]
    assert {c["inject"]: c["inject_cycles"].name for c in later} == {
        0.02: "inject-cycles.json",
        0.01: f"inject-cycles-{ONE}.json",
    }
    assert set(_arm(results, 1).detections.values()) == {2}


ARGV = ["--slowdown", "0.02", "0.01", "--threshold", "0.01", "0.005"]


def test_one_run_writes_one_record_per_slowdown(monkeypatch, tmp_path, capsys):
    _offline(monkeypatch, tmp_path, FakePairedWorker())
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    assert selftest.main([*ARGV, "--n", "3", "--json", str(a), str(b)]) == 0
    first, second = json.loads(a.read_text()), json.loads(b.read_text())
    assert (first["slowdown"], first["threshold"], first["measured_with"]) == (0.02, 0.01, [0.01])
    assert (second["slowdown"], second["threshold"], second["measured_with"]) == (
        0.01,
        0.005,
        [0.02],
    )
    assert first["n"] == second["n"] == 3
    for name in NAMES:
        assert second["benchmarks"][name]["seen_injection"] == pytest.approx(0.01, abs=0.003)
        cycles = [r["benchmarks"][name]["injection_cycles"] for r in (first, second)]
        assert cycles[0] != cycles[1]  # each arm its own calibration
    out = capsys.readouterr().out
    assert "injected slowdown 2.0%" in out and "injected slowdown 1.0%" in out


def test_two_slowdowns_resume_with_both_arms_cycles(monkeypatch, tmp_path):
    checkpoint = tmp_path / "ck.json"
    _offline(monkeypatch, tmp_path, FakePairedWorker())
    assert selftest.main([*ARGV, "--n", "2", "--resume", str(checkpoint)]) == 0
    saved = json.loads(checkpoint.read_text())
    assert set(saved["cycles"]["all"]) == {"injected", ONE}
    assert saved["settings"]["slowdown"] == [0.02, 0.01]
    for path in (tmp_path / ".gate" / "selftest").glob("inject-cycles*.json"):
        path.unlink()  # a fresh machine
    again = FakePairedWorker()
    _offline(monkeypatch, tmp_path, again)
    assert selftest.main([*ARGV, "--n", "3", "--resume", str(checkpoint)]) == 0
    assert len(again.calls) == 1
    assert [p.name for p in again.calls[0]["inject_cycles"]] == [
        "inject-cycles.json",
        f"inject-cycles-{ONE}.json",
    ]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--slowdown", "0.02", "0.02"], "--slowdown=0.02: given twice"),
        ([*ARGV[:3], "--threshold", "0.01", "0.005", "0.004"], "--threshold: give one, or one per"),
        ([*ARGV, "--json", "a.json"], "--json: one file per --slowdown (2), got 1"),
        (["--slowdown", "0.02", "0.01"], "--slowdown=0.01: must exceed the threshold (0.01)"),
        (["--stop-after", "0"], "--stop-after"),
    ],
)
def test_bad_arm_options_are_refused_by_name(argv, message, capsys):
    with pytest.raises(SystemExit) as exit_:
        selftest.main(argv)
    assert exit_.value.code == 2 and message in capsys.readouterr().err


def test_an_inject_cycles_file_per_slowdown(tmp_path, capsys):
    from harness.gate import inject

    two = tmp_path / "two.json"
    two.write_text(json.dumps(inject.cycles_record(0.02, {"a": 5})))
    with pytest.raises(SystemExit) as exit_:
        selftest.main([*ARGV, "--inject-cycles", str(two)])
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and "--inject-cycles: no file for the 1.00% injection" in err
    with pytest.raises(SystemExit):
        selftest.main([*ARGV, "--inject-cycles", str(two), "--inject-cycles", str(two)])
    assert "another file already gives the cycles for 2.00%" in capsys.readouterr().err


class Clock:
    """``time.monotonic`` that advances 50 s per worker call."""

    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


def test_stop_after_ends_between_iterations_before_the_limit(monkeypatch, tmp_path):
    clock = Clock()
    worker = FakePairedWorker()

    def slow(*args, **kwargs):
        clock.now += 50.0
        return worker(*args, **kwargs)

    monkeypatch.setattr(launch, "run_paired", slow)
    monkeypatch.setattr(selftest.time, "monotonic", clock)
    lines = []
    # 50 s an iteration: the third would end at 150 s, past a 120 s deadline.
    results = selftest.iterate(_two(tmp_path, 5, deadline=120.0), log=lines.append)
    assert len(results) == 2 and len(worker.calls) == 2
    assert "--stop-after reached; 2 of 5 iterations done" in lines[-1]


def test_stop_after_does_not_judge_by_the_calibrating_iteration(monkeypatch, tmp_path):
    """The H200's first iteration calibrated for 290 s and the self-test stopped after
    it, with 190 s of a 480 s limit left for iterations of 50 s each."""
    clock = Clock()
    worker = FakePairedWorker()

    def slow(*args, **kwargs):
        clock.now += 290.0 if not worker.calls else 50.0
        return worker(*args, **kwargs)

    monkeypatch.setattr(launch, "run_paired", slow)
    monkeypatch.setattr(selftest.time, "monotonic", clock)
    lines = []
    results = selftest.iterate(_two(tmp_path, 20, deadline=480.0), log=lines.append)
    assert len(results) == 4  # 290 + 3 x 50 = 440; a fifth would end at 490 > 480
    assert "--stop-after reached; 4 of 20 iterations done" in lines[-1]


def test_stop_after_in_main_keeps_the_finished_iterations(monkeypatch, tmp_path):
    clock = Clock()
    worker = FakePairedWorker()

    def slow(*args, **kwargs):
        clock.now += 50.0
        return worker(*args, **kwargs)

    _offline(monkeypatch, tmp_path, slow)
    monkeypatch.setattr(selftest.time, "monotonic", clock)
    checkpoint, out = tmp_path / "ck.json", tmp_path / "a.json"
    argv = ["--n", "5", "--stop-after", "120", "--resume", str(checkpoint), "--json", str(out)]
    assert selftest.main(argv) == EXIT_INTERRUPTED
    assert json.loads(out.read_text())["n"] == 2
    assert len(json.loads(checkpoint.read_text())["iterations"]["all"]) == 2
