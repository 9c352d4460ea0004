"""Settling the injection's cycles on what the self-test's first iterations saw
(``inject.settle``, ``selftest_state.settle_cycles``); on the CPU with fake workers whose
seen slowdown follows the cycles they were given."""

import json

import pytest

from harness.gate import inject, selftest
from tests.fakes import WORKER_NAMES as NAMES
from tests.fakes import FakePairedWorker
from tests.gate.test_selftest_resume import _offline

FRACTION = 0.1  # what tests.gate.test_selftest_resume's runs inject


def _calibrated(name: str, fraction: float = FRACTION) -> int:
    """The cycles the fake worker's calibration gives (tests.fakes.fake_injection)."""
    return 1000 + len(name) + round(fraction * 1e4)


class ProportionalWorker(FakePairedWorker):
    """The gate sees a slowdown proportional to the cycles set: ``truth`` times the
    request at the calibrated cycles, for the benchmarks in ``off`` (the request exactly
    for the others), so a calibration that kept a lucky step is off by ``truth``."""

    def __init__(self, off=(NAMES[0],), truth=1.15):
        super().__init__()
        self.off, self.truth = set(off), truth

    def __call__(self, *args, **kwargs):
        run = super().__call__(*args, **kwargs)
        for name, entry in run.results.items():
            got = entry.injection["injected"]
            scale = self.truth if name in self.off else 1.0
            seen = got.requested * scale * got.cycles / _calibrated(name, got.requested)
            entry.ratios["injected"] = (1.0 + seen,) * 10
        return run


def test_settle_scales_only_the_benchmarks_off_by_more_than_the_margin():
    cycles = {"off": 1200, "near": 1000, "floor": 1, "unseen": 500, "none": 700}
    seen = {
        "off": [0.023, 0.0232, 0.0228],  # median +2.30% for 2%
        "near": [0.0214, 0.0199, 0.0213],  # +2.13%: within the margin
        "floor": [0.025, 0.025, 0.025],  # wants fewer than 1 cycle
        "none": [-0.001, 0.0, 0.0005],  # saw nothing: doubled
    }
    assert inject.settle(cycles, seen, 0.02) == {"off": round(1200 * 0.02 / 0.023), "none": 1400}


def test_settle_stays_within_the_step_range():
    low, high = inject.STEP_RANGE
    assert inject.settle({"a": 1000}, {"a": [0.5]}, 0.02) == {"a": round(1000 * low)}
    assert inject.settle({"a": 1000}, {"a": [0.0001]}, 0.02) == {"a": round(1000 * high)}


def test_cycles_off_after_the_first_iterations_are_settled_and_those_run_again(
    monkeypatch, tmp_path, capsys
):
    worker = ProportionalWorker()
    _offline(monkeypatch, tmp_path, worker)
    out = tmp_path / "tally.json"
    argv = ["--n", "5", "--slowdown", str(FRACTION), "--threshold", "0.05", "--json", str(out)]
    assert selftest.main(argv) == 0
    # Three iterations at the calibrated cycles, dropped; then five at the settled ones.
    assert len(worker.calls) == inject.SETTLE_ITERATIONS + 5
    record = json.loads(out.read_text())
    assert record["n"] == 5 and record["refused"] == {}
    off, calibrated = record["benchmarks"][NAMES[0]], _calibrated(NAMES[0])
    assert off["settled_from"] == [calibrated, pytest.approx(FRACTION * 1.15)]
    assert off["injection_cycles"] == round(calibrated / 1.15)
    assert off["seen_injection"] == pytest.approx(FRACTION, abs=5e-4)
    assert off["detections"] == 5
    for name in NAMES[1:]:  # seen at the request: left alone
        bench = record["benchmarks"][name]
        assert bench["settled_from"] is None and bench["injection_cycles"] == _calibrated(name)
    err = capsys.readouterr().err
    assert f"{NAMES[0]}: the 10.0% injection was seen at +11.50%" in err
    assert "these 3 iterations run again" in err


def test_no_settling_where_every_injection_was_seen_at_the_request(monkeypatch, tmp_path):
    worker = ProportionalWorker(off=())
    _offline(monkeypatch, tmp_path, worker)
    out = tmp_path / "tally.json"
    argv = ["--n", "4", "--slowdown", str(FRACTION), "--threshold", "0.05", "--json", str(out)]
    assert selftest.main(argv) == 0
    assert len(worker.calls) == 4
    benchmarks = json.loads(out.read_text())["benchmarks"].values()
    assert all(b["settled_from"] is None for b in benchmarks)


def test_given_cycles_are_not_settled(monkeypatch, tmp_path):
    """``--inject-cycles`` from an earlier self-test: already settled there."""
    worker = ProportionalWorker()
    _offline(monkeypatch, tmp_path, worker)
    cycles = tmp_path / "cycles.json"
    record = inject.cycles_record(FRACTION, {name: _calibrated(name) for name in NAMES})
    cycles.write_text(json.dumps(record))
    argv = ["--n", "4", "--slowdown", str(FRACTION), "--threshold", "0.05"]
    assert selftest.main([*argv, "--inject-cycles", str(cycles)]) == 0
    assert len(worker.calls) == 4


def test_a_resumed_run_settles_once_and_keeps_the_settled_cycles(monkeypatch, tmp_path):
    checkpoint = tmp_path / "ck.json"
    worker = ProportionalWorker()
    _offline(monkeypatch, tmp_path, worker)
    base = ["--slowdown", str(FRACTION), "--threshold", "0.05", "--resume", str(checkpoint)]
    assert selftest.main(["--n", "4", *base]) == 0
    assert len(worker.calls) == inject.SETTLE_ITERATIONS + 4
    saved = json.loads(checkpoint.read_text())
    assert saved["settled"] == {"all": True}
    settled = round(_calibrated(NAMES[0]) / 1.15)
    assert saved["cycles"]["all"]["injected"]["cycles"][NAMES[0]] == settled
    # Two more iterations on resuming, at the settled cycles: no second settling.
    again = ProportionalWorker()
    _offline(monkeypatch, tmp_path, again)
    out = tmp_path / "tally.json"
    assert selftest.main(["--n", "6", *base, "--json", str(out)]) == 0
    assert len(again.calls) == 2
    given = json.loads(again.calls[0]["inject_cycles"][0].read_text())["cycles"]
    assert given[NAMES[0]] == settled
    record = json.loads(out.read_text())
    assert record["n"] == 6
    assert record["benchmarks"][NAMES[0]]["settled_from"][0] == _calibrated(NAMES[0])


def test_a_checkpoint_from_before_settling_counts_as_settled(monkeypatch, tmp_path):
    """Its iterations ran at cycles that were never settled: resuming must not drop them."""
    checkpoint = tmp_path / "ck.json"
    _offline(monkeypatch, tmp_path, ProportionalWorker())
    base = ["--slowdown", str(FRACTION), "--threshold", "0.05", "--resume", str(checkpoint)]
    assert selftest.main(["--n", "2", *base]) == 0  # fewer than SETTLE_ITERATIONS
    saved = json.loads(checkpoint.read_text())
    assert saved["settled"] == {}
    del saved["settled"]  # as the checkpoints before settling were
    checkpoint.write_text(json.dumps(saved))
    resumed = ProportionalWorker()
    _offline(monkeypatch, tmp_path, resumed)
    assert selftest.main(["--n", "4", *base]) == 0
    assert len(resumed.calls) == 2  # two more, none dropped
