"""More launches per trial for a noisy paired benchmark: the policy's launch scale, its
place in the calibration file, and its way to the worker from the gate, the self-test and
calibrate; on the CPU."""

import json
import math

import pytest

from harness.gate import calibrate, selftest
from harness.gate import run as gate
from harness.gate import samples as gs
from harness.measure import interleave
from harness.policy import POLICY, Policy
from harness.revisions import calibration, launch
from tests.fakes import WORKER_NAMES as NAMES
from tests.fakes import FakePairedWorker
from tests.gate.test_selftest_resume import _offline

TARGET = POLICY.spread_target


def test_a_spread_over_the_target_asks_for_the_launches_that_bring_it_there():
    assert POLICY.launch_scale(TARGET) == 1
    assert POLICY.launch_scale(TARGET * 0.5, in_force=3) == 3  # a quiet run never lowers it
    assert POLICY.launch_scale(TARGET * 1.5) == math.ceil(1.5**2)  # 3
    assert POLICY.launch_scale(TARGET * 1.5, in_force=2) == math.ceil(2 * 1.5**2)  # 5
    assert POLICY.launch_scale(TARGET * 10) == POLICY.max_launch_scale
    assert POLICY.launch_scale(TARGET * 10, in_force=POLICY.max_launch_scale + 2) == 10


@pytest.mark.parametrize("bad", [0, -1, 1.5, True])
def test_a_bad_max_launch_scale_is_refused_by_name(bad):
    with pytest.raises(ValueError, match="max_launch_scale"):
        Policy(max_launch_scale=bad)


def test_the_launch_scale_multiplies_the_trial_budget_and_its_ceiling():
    one = interleave.launches_for(0.044, 0.1)
    assert interleave.launches_for(0.044, 0.1, scale=2) >= 2 * one - interleave.LAUNCH_ROUND
    tiny = interleave.launches_for(0.001, 0.001, scale=3)
    assert tiny == 3 * interleave.MAX_TRIAL_LAUNCHES
    with pytest.raises(ValueError, match="scale"):
        interleave.launches_for(0.044, 0.1, scale=0)


def _calibration_file(path, scales):
    benchmarks = {
        name: calibration.Benchmark(threshold=0.01, spread=0.001, launch_scale=k)
        for name, k in scales.items()
    }
    calibration.write(path, calibration.Calibration(method="paired", benchmarks=benchmarks))
    return path


def test_the_file_keeps_a_launch_scale_only_where_it_scales(tmp_path):
    path = _calibration_file(tmp_path / "h200.json", {"a": 1, "b": 3})
    data = json.loads(path.read_text())
    assert "launch_scale" not in data["benchmarks"]["a"]
    assert data["benchmarks"]["b"]["launch_scale"] == 3
    assert gs.launch_scales(path) == {"b": 3}
    assert gs.launch_scales(path, "process") == {}
    written = gs.write_launch_scales(gs.launch_scales(path), tmp_path / "work")
    assert json.loads(written.read_text()) == {"b": 3}
    quiet = _calibration_file(tmp_path / "q.json", {"a": 1})
    assert gs.write_launch_scales(gs.launch_scales(quiet), tmp_path) is None


@pytest.mark.parametrize("bad", [0, 2.5, "2", True])
def test_a_bad_launch_scale_in_a_calibration_file_is_refused_by_name(tmp_path, bad):
    path = tmp_path / "h200.json"
    path.write_text(json.dumps({"benchmarks": {"a": {"threshold": 0.01, "launch_scale": bad}}}))
    with pytest.raises(calibration.CalibrationError, match="a: 'launch_scale'"):
        calibration.read(path)


def test_calibration_sets_the_scale_from_the_spread_and_the_scale_it_ran_at():
    quiet = [1.0, 1.0005, 0.9995, 1.0002, 0.9998]
    noisy = [1.0, 1.006, 0.994, 1.004, 0.996, 1.005, 0.995]
    assert calibrate.benchmark(quiet, 0.01, paired=True, in_force=2).launch_scale == 2
    b = calibrate.benchmark(noisy, 0.01, paired=True)
    assert b.spread > TARGET and b.launch_scale == POLICY.launch_scale(b.spread)
    assert b.launch_scale > 1
    assert calibrate.benchmark(noisy, 0.02, paired=False).launch_scale == 1


def test_run_paired_hands_the_scale_file_to_the_worker(monkeypatch, tmp_path):
    seen = []
    monkeypatch.setattr(launch, "read", lambda cmd, *args: seen.append(cmd))
    scales = tmp_path / "launch-scale.json"
    launch.run_paired({"base": tmp_path}, ".", tmp_path / "o.json", launch_scale=scales)
    launch.run_paired({"base": tmp_path}, ".", tmp_path / "o.json")
    assert seen[0][seen[0].index("--launch-scale") + 1] == str(scales)
    assert "--launch-scale" not in seen[1]


def test_the_gate_measures_with_the_calibrations_scales(monkeypatch, tmp_path):
    got = []

    def run_paired(trees, bench, out_file, **kw):
        got.append(kw.get("launch_scale"))
        return FakePairedWorker()(trees, bench, out_file)

    monkeypatch.setattr(launch, "run_paired", run_paired)
    cal = _calibration_file(tmp_path / "c.json", {"x": 2})
    scales = gs.write_launch_scales(gs.launch_scales(cal), tmp_path)
    gate.measure_paired({"base": tmp_path, "head": tmp_path}, ".", 2, tmp_path, None, print, scales)
    assert got == [scales, scales]


class ScaleRecordingWorker(FakePairedWorker):
    def __call__(self, *args, launch_scale=None, **kwargs):
        self.scales = [*getattr(self, "scales", []), launch_scale]
        return super().__call__(*args, **kwargs)


def test_the_self_test_runs_at_the_scales_and_calibrating_from_it_keeps_them(monkeypatch, tmp_path):
    """A self-test run with a calibration file measures at its scales; calibrating from
    that self-test's checkpoint starts from them (never lower for a quiet benchmark)."""
    worker = ScaleRecordingWorker()
    _offline(monkeypatch, tmp_path, worker)
    monkeypatch.setattr("harness.measure.device.gpu_name", lambda index=0: "NVIDIA H200")
    named = _calibration_file(tmp_path / "calibration" / "h200.json", {NAMES[0]: 3})
    ck = tmp_path / "ck.json"
    argv = ["--n", "5", "--slowdown", "0.1", "--calibration", str(named), "--resume", str(ck)]
    assert selftest.main(argv) == 0
    assert worker.scales and all(path is not None for path in worker.scales)
    assert json.loads(worker.scales[0].read_text()) == {NAMES[0]: 3}
    out = tmp_path / "new.json"
    assert calibrate.main(["--from-selftest", str(ck), "--out", str(out)]) == 0
    record = calibration.read(out)
    assert record.benchmarks[NAMES[0]].launch_scale == 3  # the fake's A/A is quiet
    assert all(record.benchmarks[name].launch_scale == 1 for name in NAMES[1:])


def test_a_resumed_self_test_keeps_the_scales_it_began_with(monkeypatch, tmp_path):
    worker = ScaleRecordingWorker()
    _offline(monkeypatch, tmp_path, worker)
    named = _calibration_file(tmp_path / "calibration" / "h200.json", {NAMES[0]: 3})
    ck = tmp_path / "ck.json"
    argv = ["--slowdown", "0.1", "--calibration", str(named), "--resume", str(ck)]
    assert selftest.main(["--n", "2", *argv]) == 0
    assert json.loads(ck.read_text())["launch_scales"] == {NAMES[0]: 3}
    _calibration_file(named, {NAMES[0]: 5})  # calibrated again in between
    later = ScaleRecordingWorker()
    _offline(monkeypatch, tmp_path, later)
    assert selftest.main(["--n", "3", *argv]) == 0
    assert json.loads(later.scales[0].read_text()) == {NAMES[0]: 3}


def test_a_checkpoint_from_before_launch_scales_ran_at_none(monkeypatch, tmp_path):
    """Calibrating from it must not take today's file's scales for the ones it ran at."""
    _offline(monkeypatch, tmp_path, FakePairedWorker())
    monkeypatch.setattr("harness.measure.device.gpu_name", lambda index=0: "NVIDIA H200")
    named = _calibration_file(tmp_path / "calibration" / "h200.json", {NAMES[0]: 3})
    ck = tmp_path / "ck.json"
    argv = ["--n", "5", "--slowdown", "0.1", "--calibration", str(named), "--resume", str(ck)]
    assert selftest.main(argv) == 0
    saved = json.loads(ck.read_text())
    del saved["launch_scales"]
    ck.write_text(json.dumps(saved))
    out = tmp_path / "new.json"
    assert calibrate.main(["--from-selftest", str(ck), "--out", str(out)]) == 0
    assert calibration.read(out).benchmarks[NAMES[0]].launch_scale == 1
