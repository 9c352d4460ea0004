"""The gate self-test's bookkeeping on the CPU: three runs per iteration with the base
shared, run orders, the split over GPUs and the JSON record, with a fake worker."""

import dataclasses
import itertools
import json
import statistics

import pytest

from harness.cli import EXIT_INTERRUPTED
from harness.gate import decide as gd
from harness.gate import inject, selftest, selftest_tally
from harness.revisions import git, launch, records
from harness.suite import discovery
from tests.fakes import WORKER_NAMES as NAMES
from tests.fakes import FakePairedWorker, FakeWorker


def test_orders_cycle_through_every_permutation():
    orders = [selftest.order(i) for i in range(6)]
    assert sorted(orders) == sorted(itertools.permutations(selftest.SIDES))
    for side in selftest.SIDES:  # each side in each position twice over six blocks
        assert sorted(o.index(side) for o in orders) == [0, 0, 1, 1, 2, 2]
    assert selftest.order(6) == selftest.order(0)


def _setup(tmp_path, n, rounds=1, thresholds=None, method="process"):
    """n iterations of a 10% injected slowdown against a 2% floor."""
    return selftest.Setup(tmp_path, ".", n, rounds, 0.1, 0.02, tmp_path, thresholds, method)


def test_paired_iteration_is_one_process_with_three_sides(monkeypatch, tmp_path):
    worker = FakePairedWorker()
    monkeypatch.setattr(launch, "run_paired", worker)
    setup = selftest.Setup(tmp_path, ".", 3, 1, 0.02, 0.01, tmp_path, None, "paired")
    results = selftest.iterate(setup, log=lambda line: None)
    assert len(worker.calls) == 3
    assert all(c["sides"] == list(selftest.SIDES) for c in worker.calls)
    assert all(c["inject"] == {"injected": 0.02} for c in worker.calls)
    t = selftest_tally.tally([aa for aa, _ in results], [inj for _, inj in results])
    # A 2% injection at a 1% threshold is caught; base against head (A/A) never alarms.
    assert t.false_alarm_runs == 0 and set(t.detections.values()) == {3}
    assert all(abs(statistics.median(r) - 1.02) < 0.003 for r in t.injected_ratios.values())


def test_three_runs_per_iteration_with_the_base_shared(monkeypatch, tmp_path):
    worker = FakeWorker()
    monkeypatch.setattr(launch, "run_worker", worker)
    monkeypatch.setattr(launch, "listing", FakeWorker().listing)
    lines = []
    results = selftest.iterate(_setup(tmp_path, 4), log=lines.append)
    assert len(worker.calls) == 3 * 4
    assert [c["inject"] for c in worker.calls].count(0.1) == 4
    first = [c["file"].split("-")[0] for c in worker.calls[:3]]
    assert tuple(first) == selftest.order(0)
    iterations = [line for line in lines if ": iteration " in line]
    assert len(results) == 4 and len(iterations) == 4 and "iteration 4/4" in lines[-1]
    for aa, injected in results:
        assert {v.status for v in aa} <= {gd.UNCHANGED, gd.IMPROVEMENT}
        assert {v.status for v in injected} == {gd.REGRESSION}
    t = selftest_tally.tally([aa for aa, _ in results], [inj for _, inj in results])
    assert t.false_alarm_runs == 0 and set(t.detections.values()) == {4}


def test_rounds_pool_into_one_comparison(monkeypatch, tmp_path):
    worker = FakeWorker()
    monkeypatch.setattr(launch, "run_worker", worker)
    monkeypatch.setattr(launch, "listing", FakeWorker().listing)
    results = selftest.iterate(_setup(tmp_path, 2, rounds=3), log=lambda line: None)
    assert len(worker.calls) == 2 * 3 * 3 and len(results) == 2
    assert all(len(aa) == len(NAMES) for aa, _ in results)


def test_split_keeps_a_benchmarks_three_runs_on_one_gpu(monkeypatch, tmp_path):
    worker = FakeWorker()
    monkeypatch.setattr(launch, "run_worker", worker)
    monkeypatch.setattr(launch, "listing", FakeWorker().listing)
    results = selftest.split_iterate(_setup(tmp_path, 3), [0, 1], log=lambda line: None)
    gpu_of = {}
    for call in worker.calls:
        for name in call["shard"]:
            assert gpu_of.setdefault(name, call["gpu"]) == call["gpu"]
    assert set(gpu_of) == set(NAMES) and set(gpu_of.values()) == {0, 1}
    assert len(worker.calls) == 3 * 3 * 2  # sides x iterations x GPUs
    for aa, injected in results:  # every benchmark once per comparison, joined over GPUs
        assert sorted(v.name for v in aa) == sorted(v.name for v in injected) == sorted(NAMES)


def _verdict(name, status, ratio=1.0):
    return gd.Verdict(name, status, 1.0, 1.0, ratio, 1.0, 0.5, 0.9, 1.1, 0.05, "")


def test_json_record_of_the_tally():
    aa = [[_verdict("a", gd.UNCHANGED), _verdict("b", gd.UNCHANGED)] for _ in range(3)]
    aa.append([_verdict("a", gd.REGRESSION), _verdict("b", gd.UNCHANGED)])
    inj = [
        [_verdict("a", gd.REGRESSION, 1.03), _verdict("b", gd.UNCHANGED, 1.03)] for _ in range(4)
    ]
    record = selftest_tally.to_json(selftest_tally.tally(aa, inj), 0.03, 0.02, 1, ".", [0, 1])
    assert json.loads(json.dumps(record)) == record
    assert record["n"] == 4 and record["slowdown"] == 0.03 and record["threshold"] == 0.02
    assert record["false_alarm_runs"] == 1 and record["false_alarm_rate"] == 0.25
    assert record["detection_rate"] == pytest.approx(0.5)
    assert record["benchmarks"]["a"] == {
        "false_alarms": 1,
        "false_alarm_rate": 0.25,
        "detections": 4,
        "detection_rate": 1.0,
        "too_noisy": 0,
        "seen_injection": pytest.approx(0.03),
        "injection_cycles": None,
        "calibration_seen": None,
        "settled_from": None,
        "refused": None,
        "aa_ratio": {"median": 1.0, "min": 1.0, "max": 1.0},
        "injected_ratio": {"median": 1.03, "min": 1.03, "max": 1.03},
    }
    assert record["benchmarks"]["b"]["detections"] == 0 and record["refused"] == {}


def test_no_detection_rate_where_the_seen_injection_misses_the_request():
    """A 2% request seen as +2.29% counts; seen as +2.31% or +1.69% (more than 0.3 pp
    off), or not measured at all, the benchmark is refused, named with why, and left
    out of the overall rate."""
    seen = {"ok": 1.0229, "over": 1.0231, "under": 1.0169}
    aa = [[_verdict(name, gd.UNCHANGED) for name in [*seen, "none"]] for _ in range(3)]
    inj = [
        [
            *(_verdict(name, gd.REGRESSION, r) for name, r in seen.items()),
            _verdict("none", gd.FAILED, None),
        ]
        for _ in range(3)
    ]
    t = selftest_tally.tally(aa, inj)
    record = selftest_tally.to_json(t, 0.02, 0.01, 1, ".")
    assert set(record["refused"]) == {"over", "under", "none"}
    assert "+2.31% for +2.00% injected, off by +0.31 pp" in record["refused"]["over"]
    assert "no injected ratio" in record["refused"]["none"]
    assert record["benchmarks"]["over"]["detection_rate"] is None
    assert record["benchmarks"]["ok"]["detection_rate"] == 1.0
    assert record["detection_rate"] == 1.0  # "over" and "under" were detected, not counted
    text = selftest_tally.render(t, 0.02)
    assert "no detection rate for 3 benchmark(s):" in text
    assert "  under: the gate saw +1.69% for +2.00% injected" in text


def _offline(monkeypatch, tmp_path):
    """``main`` with no git, no precompiling, no GPU and no calibration file."""
    monkeypatch.setattr(launch, "precompile", lambda *args, **kw: None)
    monkeypatch.setattr(git, "worktree", lambda work, side, sha: tmp_path)
    monkeypatch.setattr(git, "resolve", lambda *args, **kw: "0" * 40)
    monkeypatch.setattr(git, "ROOT", tmp_path)
    monkeypatch.setattr(discovery, "gate_subset", lambda root: ".")
    monkeypatch.setattr(selftest, "calibration_path", lambda: tmp_path / "none.json")
    monkeypatch.setattr("harness.measure.device.no_gpu_reason", lambda: None)


class InterruptingWorker(FakeWorker):
    """A worker that is interrupted (Ctrl-C) at its ``stop_at``-th call."""

    def __init__(self, stop_at):
        super().__init__()
        self.stop_at = stop_at

    def __call__(self, *args, **kwargs):
        if len(self.calls) + 1 == self.stop_at:
            raise KeyboardInterrupt
        return super().__call__(*args, **kwargs)


def test_an_interrupted_self_test_tallies_the_finished_iterations(monkeypatch, tmp_path, capsys):
    # Two full iterations (three runs each), then Ctrl-C in the third.
    monkeypatch.setattr(launch, "run_worker", InterruptingWorker(stop_at=8))
    _offline(monkeypatch, tmp_path)
    out = tmp_path / "tally.json"
    code = selftest.main(
        ["--n", "5", "--slowdown", "0.1", "--method", "process", "--json", str(out)]
    )
    assert code == EXIT_INTERRUPTED
    record = json.loads(out.read_text())
    assert record["n"] == 2 and record["interrupted"] is True
    assert "2 A/A and 2 injected comparisons" in capsys.readouterr().out


def test_iteration_lines_name_false_alarms_and_misses():
    aa = [_verdict("gemm.S(1)", gd.REGRESSION), _verdict("gemm.S(2)", gd.UNCHANGED)]
    injected = [_verdict("gemm.S(1)", gd.REGRESSION), _verdict("gemm.S(2)", gd.UNCHANGED)]
    text = selftest_tally.describe(aa, injected)
    assert "false alarm: gemm.S(1)" in text and "missed: gemm.S(2)" in text
    assert "gemm.S(2)" not in text.split("missed")[0]


def test_join_shards_keeps_only_iterations_every_gpu_finished():
    v = _verdict("gemm.S(0)", gd.UNCHANGED)
    parts = {0: [([v], [v]), ([v], [v])], 1: [([v], [v])]}
    assert len(selftest.join_shards(parts)) == 1
    assert selftest.join_shards({}) == []


def test_calibrated_thresholds_apply_per_benchmark(monkeypatch, tmp_path):
    monkeypatch.setattr(launch, "run_worker", FakeWorker())
    # gemm.S(0) is calibrated as too noisy for a 10% change; the rest keep the floor.
    setup = _setup(tmp_path, 2, thresholds={"gemm.S(0)": 0.5})
    results = selftest.iterate(setup, log=lambda line: None)
    t = selftest_tally.tally([aa for aa, _ in results], [inj for _, inj in results])
    assert t.detections["gemm.S(0)"] == 0
    assert all(t.detections[n] == 2 for n in NAMES[1:])


def test_missing_calibration_file_is_refused_before_measuring(tmp_path):
    import subprocess
    import sys

    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "harness.gate.selftest",
            "--calibration",
            str(tmp_path / "nope.json"),
        ],
        capture_output=True,
        text=True,
    )
    assert out.returncode == 2 and "--calibration" in out.stderr and "no such file" in out.stderr


@pytest.mark.parametrize("bad", ["0", "1", "1.5", "-0.02", "two"])
def test_slowdown_outside_zero_one_is_refused(bad, capsys):
    with pytest.raises(SystemExit) as exit_:
        selftest.main(["--slowdown", bad])
    assert exit_.value.code == 2 and "--slowdown" in capsys.readouterr().err


def test_a_slowdown_the_threshold_would_hide_is_refused(capsys):
    with pytest.raises(SystemExit) as exit_:
        selftest.main(["--slowdown", "0.01", "--method", "paired"])
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and "--slowdown=0.01: must exceed the threshold (0.01)" in err


class BrokenInjectionWorker(FakePairedWorker):
    """The paired worker whose injected side failed to build, as on the H200 where every
    benchmark printed ``injected error`` and the record said only that no ratio came."""

    def __call__(self, *args, **kwargs):
        run = super().__call__(*args, **kwargs)
        failed = records.Side(error="RuntimeError: delayed build failed\nmore")
        for entry in run.results.values():
            entry.sides["injected"] = failed
            entry.ratios.pop("injected", None)
        return dataclasses.replace(run, timer="cupti")


def test_the_injected_sides_error_reaches_the_refusal_and_the_timer_is_logged(
    monkeypatch, tmp_path
):
    monkeypatch.setattr(launch, "run_paired", BrokenInjectionWorker())
    setup = selftest.Setup(tmp_path, ".", 2, 1, 0.02, 0.01, tmp_path, None, "paired")
    lines, timers = [], {}
    results = selftest.iterate(setup, log=lines.append, timers=timers)
    assert list(timers) == ["cupti"] and "gate_selftest: timer: cupti" in lines
    t = selftest_tally.tally([aa for aa, _ in results], [inj for _, inj in results])
    refused = selftest_tally.refusals(t, 0.02)
    assert set(refused) == set(NAMES)
    for why in refused.values():
        assert why.startswith("no injected ratio was measured (")
        assert "injected: RuntimeError: delayed build failed)" in why and "more" not in why
    record = selftest_tally.to_json(t, 0.02, 0.01, 1, ".")
    assert "delayed build failed" in record["benchmarks"][NAMES[0]]["refused"]


def test_the_delay_is_calibrated_once_per_gpu_and_every_later_worker_sets_its_cycles(
    monkeypatch, tmp_path
):
    """Every iteration's worker calibrated every benchmark again (6 steps of up to 2000
    launch pairs each); now the first does, per GPU, and the rest read its cycles."""
    paired = FakePairedWorker()
    monkeypatch.setattr(launch, "run_paired", paired)
    monkeypatch.setattr(launch, "listing", FakeWorker().listing)
    setup = selftest.Setup(tmp_path, ".", 4, 2, 0.02, 0.01, tmp_path, None, "paired")
    calibrated, lines = {}, []
    selftest.split_iterate(setup, [0, 1], log=lines.append, calibrated=calibrated)
    for gpu in (0, 1):
        calls = [c for c in paired.calls if c["gpu"] == gpu]
        assert len(calls) == 4 * 2 and calls[0]["inject_cycles"] is None
        path = tmp_path / f"inject-cycles-gpu{gpu}.json"
        assert calls[1]["inject_cycles"] == [path]
        assert all(c["inject_cycles"] == [path] for c in calls[1:])
        cycles = inject.read_cycles(path.read_text(), [0.02])
        assert set(cycles) == set(calls[0]["shard"])
        assert cycles == {n: calibrated["injected"][n].cycles for n in cycles}
    assert set(calibrated) == {"injected"} and set(calibrated["injected"]) == set(NAMES)
    assert sum("injection of 2.0% calibrated for" in line for line in lines) == 2


def test_process_mode_calibrates_in_the_first_injected_run_only(monkeypatch, tmp_path):
    worker = FakeWorker()
    monkeypatch.setattr(launch, "run_worker", worker)
    monkeypatch.setattr(launch, "listing", FakeWorker().listing)
    selftest.iterate(_setup(tmp_path, 3), log=lambda line: None)
    injected = [c for c in worker.calls if c["inject"]]
    assert len(injected) == 3 and injected[0]["inject_cycles"] is None
    assert {c["inject_cycles"] for c in injected[1:]} == {tmp_path / "inject-cycles.json"}
    assert all(c["inject_cycles"] is None for c in worker.calls if not c["inject"])


def test_a_given_cycles_file_skips_calibrating(monkeypatch, tmp_path):
    paired = FakePairedWorker()
    monkeypatch.setattr(launch, "run_paired", paired)
    given = tmp_path / "given.json"
    given.write_text(json.dumps(inject.cycles_record(0.02, dict.fromkeys(NAMES, 5))))
    setup = selftest.Setup(tmp_path, ".", 2, 1, 0.02, 0.01, tmp_path, None, "paired", given)
    calibrated = {}
    selftest.iterate(setup, log=lambda line: None, calibrated=calibrated)
    assert [c["inject_cycles"] for c in paired.calls] == [[given], [given]] and calibrated == {}


class OffByCalibrationWorker(FakePairedWorker):
    """Its calibration saw exactly the request; what the gate saw in each iteration's
    injected comparison was more, whatever the cycles: the record must judge by the
    latter, settled cycles or not."""

    SEEN = [1.0240, 1.0230, 1.0236, 1.0180, 1.0250]  # per call, in turn; median 1.0236

    def __call__(self, *args, **kwargs):
        run = super().__call__(*args, **kwargs)
        ratio = self.SEEN[(len(self.calls) - 1) % len(self.SEEN)]
        for entry in run.results.values():
            entry.ratios["injected"] = (ratio,) * 10
        return run


def test_the_seen_injection_is_the_median_over_iterations_of_what_the_gate_saw(
    monkeypatch, tmp_path, capsys
):
    monkeypatch.setattr(launch, "run_paired", OffByCalibrationWorker())
    _offline(monkeypatch, tmp_path)
    out = tmp_path / "tally.json"
    assert selftest.main(["--n", "5", "--slowdown", "0.02", "--json", str(out)]) == 0
    record = json.loads(out.read_text())
    for name in NAMES:
        bench = record["benchmarks"][name]
        assert bench["seen_injection"] == pytest.approx(0.0236)
        assert bench["calibration_seen"] == 0.02  # the fake's calibration hit the request
        calibrated = 1000 + len(name) + 200
        # Settled once on the first three iterations (+2.36%), to no avail here.
        assert bench["settled_from"] == [calibrated, pytest.approx(0.0236)]
        assert bench["injection_cycles"] == round(calibrated * 0.02 / 0.0236)
        assert "the gate saw +2.36% for +2.00% injected" in bench["refused"]
    assert set(record["refused"]) == set(NAMES)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (None, "cannot read it"),
        ("{", "not valid JSON"),
        ('{"version": 1, "slowdown": 0.05, "cycles": {"a": 9}}', "calibrated for 5.00%"),
    ],
)
def test_a_bad_inject_cycles_file_is_refused_naming_the_option(tmp_path, capsys, text, message):
    path = tmp_path / "cycles.json"
    if text is not None:
        path.write_text(text)
    with pytest.raises(SystemExit) as exit_:
        selftest.main(["--slowdown", "0.02", "--inject-cycles", str(path)])
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and f"--inject-cycles={path}: " in err and message in err
