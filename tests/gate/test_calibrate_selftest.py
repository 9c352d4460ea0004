"""Calibration from a self-test's A/A comparisons (``calibrate --from-selftest``): each
finished iteration one run, no GPU work; with a fake paired worker on the CPU."""

import json
import statistics

import pytest

from harness.gate import calibrate, selftest
from harness.policy import POLICY
from harness.revisions import calibration
from tests.fakes import WORKER_NAMES as NAMES
from tests.fakes import FakePairedWorker
from tests.gate.test_selftest_resume import _offline


def _checkpoint(monkeypatch, tmp_path, n=6, extra=(), worker=None):
    ck = tmp_path / "ck.json"
    _offline(monkeypatch, tmp_path, worker or FakePairedWorker())
    monkeypatch.setattr("harness.measure.device.gpu_name", lambda index=0: "NVIDIA H200")
    assert selftest.main(["--n", str(n), "--resume", str(ck), *extra]) == 0
    return ck


def test_each_aa_comparison_is_one_run(monkeypatch, tmp_path, capsys):
    ck = _checkpoint(monkeypatch, tmp_path)
    saved = json.loads(ck.read_text())
    assert saved["gpu"] == "NVIDIA H200"
    out = tmp_path / "h200.json"
    assert calibrate.main(["--from-selftest", str(ck), "--out", str(out)]) == 0
    record = calibration.read(out)
    assert record.gpu == "NVIDIA H200" and record.method == "paired" and record.runs == 6
    assert record.commit == "0" * 40 and "ck.json" in record.spread
    for name in NAMES:
        ratios = [
            next(v["ratio"] for v in it[0] if v["name"] == name)
            for it in saved["iterations"]["all"]
        ]
        b = record.benchmarks[name]
        assert b.runs == 6 and b.median == pytest.approx(statistics.median(ratios))
        assert b.spread == pytest.approx(calibrate.robust_spread(ratios))
        assert b.threshold >= POLICY.paired_floor
    assert "wrote" in capsys.readouterr().out


class NoisyWorker(FakePairedWorker):
    """Head's ratios of one benchmark swing by 8% from one worker to the next."""

    def __call__(self, *args, **kwargs):
        run = super().__call__(*args, **kwargs)
        swing = 1.08 if len(self.calls) % 2 else 0.92
        entry = run.results[NAMES[0]]
        entry.ratios["head"] = tuple(r * swing for r in entry.ratios["head"])
        return run


def test_a_benchmark_too_noisy_to_gate_fails_the_calibration(monkeypatch, tmp_path, capsys):
    ck = _checkpoint(monkeypatch, tmp_path, worker=NoisyWorker(), extra=["--slowdown", "0.2"])
    out = tmp_path / "h200.json"
    assert calibrate.main(["--from-selftest", str(ck), "--out", str(out)]) == 2
    assert calibration.read(out).benchmarks[NAMES[0]].too_noisy
    err = capsys.readouterr().err
    assert "1 benchmark(s) cannot be gated" in err and NAMES[0] in err


def test_bad_from_selftest_input_is_refused_by_name(monkeypatch, tmp_path, capsys):
    ck = _checkpoint(monkeypatch, tmp_path, n=3)
    out = tmp_path / "h200.json"
    cases = [
        (["--from-selftest", str(ck)], "--from-selftest: give --out"),
        (["--from-selftest", str(tmp_path / "none.json"), "--out", str(out)], "not a self-test"),
    ]
    data = json.loads(ck.read_text())
    data["gpu"] = None
    anonymous = tmp_path / "anon.json"
    anonymous.write_text(json.dumps(data))
    cases.append((["--from-selftest", str(anonymous), "--out", str(out)], "--gpu: the checkpoint"))
    process = tmp_path / "process.json"
    process.write_text(json.dumps({**data, "settings": {**data["settings"], "method": "process"}}))
    cases.append((["--from-selftest", str(process), "--out", str(out)], "'process', not paired"))
    damaged = tmp_path / "damaged.json"
    damaged.write_text(json.dumps({**data, "iterations": {"all": [[[{"ratio": 1.0}]]]}}))
    cases.append((["--from-selftest", str(damaged), "--out", str(out)], "not a self-test"))
    for argv, message in cases:
        with pytest.raises(SystemExit) as exit_:
            calibrate.main(argv)
        assert exit_.value.code == 2 and message in capsys.readouterr().err
    argv = ["--from-selftest", str(anonymous), "--out", str(out), "--gpu", "NVIDIA H200"]
    assert calibrate.main(argv) == 0 and calibration.read(out).gpu == "NVIDIA H200"
