"""Calibration math, per-benchmark thresholds and the self-test's bookkeeping, on the CPU."""

import json
import random

import pytest

from harness.gate import decide as gd
from harness.gate import samples as gs
from harness.gate.calibrate import benchmark_names, failures, spread_and_mde, summarise
from harness.gate.selftest_tally import render, tally
from harness.revisions import calibration, fanout, git, launch, placement
from tests.fakes import paired_run, process_run


def test_spread_and_mde_from_run_medians():
    rng = random.Random(9)
    medians = [rng.gauss(1.0, 0.01) for _ in range(400)]
    spread, mde = spread_and_mde(medians)
    assert spread == pytest.approx(0.01, rel=0.15)
    assert mde == pytest.approx((3.09 + 1.28) * 2**0.5 * spread)
    # A paired run's value is already a ratio of the sides: no sqrt(2).
    assert spread_and_mde(medians, paired=True)[1] == pytest.approx((3.09 + 1.28) * spread)
    with pytest.raises(ValueError, match="at least 3"):
        spread_and_mde([1.0, 1.01])


def test_one_slow_run_cannot_set_a_huge_threshold():
    # Four runs within 0.3% and one 20% slow (the 24.9% threshold seen on the H200 came
    # from such a run): the stdev would make it ~9%, the robust spread stays small.
    values = [1.000, 1.003, 0.998, 1.001, 1.2]
    spread, mde = spread_and_mde(values)
    assert spread < 0.005 and mde < 0.03
    runs = [process_run({"gemm.T(a)": {"track_latency": [v]}}) for v in values]
    out = summarise(runs, floor=0.02)
    assert out["gemm.T(a)"].threshold < 0.05 and not out["gemm.T(a)"].too_noisy


def test_a_benchmark_noisy_in_most_runs_is_marked_too_noisy():
    values = [1.0, 1.1, 0.9, 1.15, 0.85]
    runs = [process_run({"gemm.T(a)": {"track_latency": [v]}}) for v in values]
    out = summarise(runs, floor=0.02, cap=0.05)
    assert out["gemm.T(a)"].too_noisy and out["gemm.T(a)"].threshold > 0.05


def test_paired_calibration_reads_the_median_ratio_of_each_run():
    rng = random.Random(4)
    runs = [
        paired_run({"gemm.T(a)": {"ratios": {"head": [rng.gauss(1.0, 0.001) for _ in range(10)]}}})
        for _ in range(5)
    ]
    out = summarise(runs, floor=0.01, method="paired")
    assert out["gemm.T(a)"].threshold == 0.01 and out["gemm.T(a)"].runs == 5
    assert out["gemm.T(a)"].launches is None  # the records said nothing of them


def test_paired_calibration_records_the_launches_the_worker_chose():
    runs = [
        paired_run({"gemm.T(a)": {"ratios": {"head": [1.0] * 10}, "launches": n}})
        for n in (72, 72, 66, 72, 72)
    ]
    assert summarise(runs, floor=0.01, method="paired")["gemm.T(a)"].launches == (66, 72)


def test_a_paired_a_a_that_sits_off_one_raises_the_threshold_by_the_offset():
    # Every run's A/A at +1.2%, tightly: the spread alone would leave the 1% floor, but a
    # 1% threshold would then flag that offset at the first extra wobble.
    runs = [
        paired_run({"gemm.T(a)": {"ratios": {"head": [1.012 + 0.0002 * i] * 10}}}) for i in range(5)
    ]
    out = summarise(runs, floor=0.01, method="paired")["gemm.T(a)"]
    assert out.offset == pytest.approx(0.0124)
    assert out.threshold == pytest.approx(out.offset + out.mde) and out.threshold > 0.01


def _run(rng, noise):
    return process_run(
        {
            "gemm.Quiet(a)": {"track_latency": [rng.gauss(1e-3, 1e-3 * 0.001) for _ in range(50)]},
            "gemm.Noisy(b)": {"track_latency": [rng.gauss(1e-3, 1e-3 * noise) for _ in range(3)]},
            "gemm.Broken(c)": {"error": "boom"},
        }
    )


def test_summarise_gives_noisy_benchmarks_a_higher_threshold():
    rng = random.Random(10)
    out = summarise([_run(rng, 0.08) for _ in range(6)], floor=0.05)
    assert set(out) == {"gemm.Quiet(a)", "gemm.Noisy(b)"}
    assert out["gemm.Quiet(a)"].threshold == 0.05  # never below the floor
    assert out["gemm.Noisy(b)"].threshold > 0.05
    assert out["gemm.Noisy(b)"].mde > out["gemm.Quiet(a)"].mde


def test_gate_reads_calibration_thresholds(tmp_path):
    path = tmp_path / "h200.json"
    path.write_text(json.dumps({"benchmarks": {"gemm.X(a)": {"threshold": 0.08}}}))
    assert gs.thresholds(path) == {"gemm.X(a)": 0.08}
    assert gs.thresholds(tmp_path / "missing.json") == {}
    # A file holds one method's thresholds; the other method's gate ignores it.
    path.write_text(
        json.dumps({"method": "paired", "benchmarks": {"gemm.X(a)": {"threshold": 0.03}}})
    )
    assert gs.thresholds(path, "paired") == {"gemm.X(a)": 0.03}
    assert gs.thresholds(path, "process") == {}


def _verdict(name, status, ratio=1.0):
    return gd.Verdict(name, status, 1.0, 1.0, ratio, 1.0, 0.5, 0.9, 1.1, 0.05, "")


def test_tally_counts_false_alarms_and_detections():
    aa = [[_verdict("a", gd.UNCHANGED), _verdict("b", gd.UNCHANGED)] for _ in range(9)]
    aa.append([_verdict("a", gd.REGRESSION), _verdict("b", gd.UNCHANGED)])
    inj = [
        [
            _verdict("a", gd.REGRESSION, 1.03),
            _verdict("b", gd.REGRESSION if i < 7 else gd.UNCHANGED, 1.03),
        ]
        for i in range(10)
    ]
    t = tally(aa, inj)
    assert t.comparisons == 10 and t.false_alarm_runs == 1 and t.false_alarm_rate == 0.1
    assert t.false_alarms == {"a": 1, "b": 0} and t.detections == {"a": 10, "b": 7}
    text = render(t, 0.03)
    assert "false alarms: 1/10" in text and "7/10" in text and "3.0%" in text
    with pytest.raises(ValueError, match="differ"):
        tally(aa, inj[:3])


def test_gpu_summary_reports_clocks_and_throttling():
    rounds = [
        {
            "base": process_run({"x": {"gpu": {"sm_mhz": 1980, "throttle": None}}}),
            "head": process_run({"x": {"gpu": {"sm_mhz": 1755, "throttle": "power cap"}}}),
        }
    ]
    text = gs.gpu_summary(gs.runs_of(rounds, "process"))
    assert "1755-1980 MHz" in text and "1 of 2 (power cap)" in text
    empty = [{"base": process_run({}), "head": process_run({})}]
    assert gs.gpu_summary(gs.runs_of(empty, "process")) == "no NVML readings"
    paired = [paired_run({"x": {"gpu": {"sm_mhz": 1700, "throttle": None}}})]
    assert "1700-1700 MHz" in gs.gpu_summary(gs.runs_of(paired, "paired"))


def _paired_run(ratios: dict[str, float | None], **fields):
    """One paired calibration run: per benchmark its A/A ratio, or None for an error."""
    results = {}
    for name, ratio in ratios.items():
        if ratio is None:
            results[name] = {"sides": {"base": {"error": "boom"}, "head": {"error": "boom"}}}
        else:
            results[name] = {"sides": {"base": {}, "head": {}}, "ratios": {"head": [ratio]}}
    results["gemm.Invalid(x)"] = {"sides": {"base": {"skipped": "rule"}, "head": {"skipped": "r"}}}
    return paired_run(results, **fields)


def test_calibration_fails_naming_each_benchmark_it_cannot_gate():
    """A threshold over the cap, or a benchmark some runs could not measure, fails the
    calibration with a line that names it and what to fix; an invalid combination is
    not a benchmark."""
    wild = [1.0, 1.08, 0.93, 1.0, 1.09]
    runs = [
        _paired_run({"gemm.Quiet(a)": 1.0 + d, "gemm.Wild(b)": w, "gemm.Broken(c)": None})
        for d, w in zip([0.0, 1e-4, -1e-4, 2e-4, 0.0], wild, strict=True)
    ]
    names = benchmark_names(runs)
    assert names == {"gemm.Quiet(a)", "gemm.Wild(b)", "gemm.Broken(c)"}
    benchmarks = summarise(runs, floor=0.01, method="paired")
    lines = failures(benchmarks, names, runs=5)
    assert len(lines) == 2
    broken, wild_line = lines
    assert broken.startswith("gemm.Broken(c): measured in fewer than 3 of 5 runs")
    assert wild_line.startswith("gemm.Wild(b): needs a ") and "above the 5% cap" in wild_line
    assert "make its measurement quieter" in wild_line
    assert (
        failures({k: v for k, v in benchmarks.items() if k != "gemm.Wild(b)"}, {"gemm.Quiet(a)"}, 5)
        == []
    )


def test_calibrate_exits_2_and_names_the_noisy_benchmark(monkeypatch, tmp_path, capsys):
    from harness.gate import calibrate
    from harness.measure import device

    runs = iter(_paired_run({"gemm.Quiet(a)": 1.0, "gemm.Wild(b)": w}) for w in (1.0, 1.08, 0.93))
    monkeypatch.setattr(device, "no_gpu_reason", lambda: None)
    monkeypatch.setattr(device, "gpu_name", lambda index=0: "NVIDIA H200")
    monkeypatch.setattr(git, "resolve", lambda rev: "0" * 40)
    monkeypatch.setattr(git, "worktree", lambda work, name, sha: tmp_path)
    monkeypatch.setattr(launch, "precompile", lambda trees, bench: None)
    monkeypatch.setattr(git, "ROOT", tmp_path)
    monkeypatch.setattr(launch, "run_paired", lambda *a, **k: next(runs))
    out = tmp_path / "h200.json"
    code = calibrate.main(["--runs", "3", "--bench", ".", "--out", str(out)])
    err = capsys.readouterr().err
    assert code == 2
    assert "calibrate: error: 1 benchmark(s) cannot be gated:" in err
    assert "gemm.Wild(b): needs a" in err and "gemm.Quiet(a)" not in err
    record = json.loads(out.read_text())
    assert record["benchmarks"]["gemm.Wild(b)"]["too_noisy"] is True
    assert len(record["failures"]) == 1


def test_the_h200_calibration_is_committed_where_the_gate_reads_it():
    path = calibration.calibration_path("h200")
    assert path.relative_to(git.ROOT).as_posix() == "calibration/h200.json"
    assert path.is_file()
    thresholds = gs.thresholds(path, "paired")
    assert thresholds and all(t > 0 for t in thresholds.values())
    # A benchmark over the cap is never silently there: the file names it as a failure.
    failures = json.loads(path.read_text()).get("failures", [])
    for name, t in thresholds.items():
        assert t <= gd.MAX_THRESHOLD or any(f.startswith(f"{name}:") for f in failures), name


def test_calibrate_shards_over_gpus_as_the_gate_does(monkeypatch, tmp_path):
    from harness.gate import calibrate
    from harness.measure import device

    calls = []

    def paired_gpus(trees, bench, out, gpus, names, tag="pair", launch_scale=None):
        calls.append((gpus, names, tag))
        return _paired_run({"gemm.Quiet(a)": 1.0}, timer="cupti")

    monkeypatch.setattr(device, "no_gpu_reason", lambda: None)
    monkeypatch.setattr(device, "gpu_name", lambda index=0: "NVIDIA H200")
    monkeypatch.setattr(placement, "parse_gpus", lambda spec, visible: [0, 1])
    monkeypatch.setattr(git, "resolve", lambda rev: "0" * 40)
    monkeypatch.setattr(git, "worktree", lambda work, name, sha: tmp_path)
    monkeypatch.setattr(launch, "precompile", lambda trees, bench: None)
    monkeypatch.setattr(git, "ROOT", tmp_path)
    monkeypatch.setattr(launch, "list_names", lambda t, b, o: ["gemm.Quiet(a)"])
    monkeypatch.setattr(fanout, "paired_gpus", paired_gpus)
    argv = ["--runs", "3", "--bench", ".", "--gpus", "all", "--out", str(tmp_path / "c.json")]
    assert calibrate.main(argv) == 0
    assert [c[2] for c in calls] == ["calibrate0", "calibrate1", "calibrate2"]
    assert all(c[0] == [0, 1] and c[1] == ["gemm.Quiet(a)"] for c in calls)
    # The record and the output say which timer the paired runs used.
    assert json.loads((tmp_path / "c.json").read_text())["timer"] == "cupti"


def test_sharded_paired_runs_keep_their_timer(monkeypatch, tmp_path):
    def run_paired(trees, bench, out_file, gpu=None, only=None, **kw):
        timer = "cupti" if gpu == 0 else "event (no CUPTI)"
        return paired_run({f"gemm.X({gpu})": {}}, timer=timer)

    monkeypatch.setattr(launch, "run_paired", run_paired)
    merged = fanout.paired_gpus({"base": tmp_path}, ".", tmp_path, [0, 1], ["a", "b"])
    assert merged.timer == "cupti; event (no CUPTI)"
    assert set(merged.results) == {"gemm.X(0)", "gemm.X(1)"}
    assert fanout.timer_of([process_run({})]) is None


def test_calibrate_gpus_needs_the_paired_method(capsys):
    from harness.gate import calibrate

    with pytest.raises(SystemExit):
        calibrate.main(["--method", "process", "--gpus", "all"])
    assert "--gpus=all: needs --method paired" in capsys.readouterr().err


def test_a_lower_floor_re_derives_calibrated_thresholds_from_the_noise(tmp_path):
    """The 1% self-test runs at --threshold 0.005: a file written under the 1% floor holds
    1% for every quiet benchmark, which would hide a 1% slowdown; under the caller's floor
    each threshold is what its noise asks for (mde + offset), floored again."""
    path = tmp_path / "h200.json"
    quiet = {"threshold": 0.01, "mde": 0.002, "offset": 0.0005}
    noisy = {"threshold": 0.03, "mde": 0.028, "offset": 0.002}
    old = {"threshold": 0.02}  # a file from before mde was recorded
    benchmarks = {"gemm.Q(a)": quiet, "gemm.N(b)": noisy, "gemm.O(c)": old}
    path.write_text(json.dumps({"method": "paired", "floor": 0.01, "benchmarks": benchmarks}))
    assert gs.thresholds(path, "paired") == {
        "gemm.Q(a)": 0.01,
        "gemm.N(b)": 0.03,
        "gemm.O(c)": 0.02,
    }
    got = gs.thresholds(path, "paired", floor=0.005)
    assert got["gemm.Q(a)"] == 0.005
    assert got["gemm.N(b)"] == pytest.approx(0.03)
    assert got["gemm.O(c)"] == 0.02
    quiet["mde"] = 0.006
    path.write_text(json.dumps({"method": "paired", "benchmarks": benchmarks}))
    assert gs.thresholds(path, "paired", floor=0.005)["gemm.Q(a)"] == pytest.approx(0.0065)
