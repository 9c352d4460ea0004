"""Metric math, the timing path's input checks, and a case result's figures and record
schema (harness.measure.cases.CaseResult), on the CPU."""

import math
import random

import pytest

from harness.measure import metrics
from harness.measure.timing import Timing, check_counts, measure


def test_tflops_is_two_mnk_over_seconds():
    m, n, k = 4096, 2048, 1024
    assert metrics.gemm_flops(m, n, k) == 2 * m * n * k
    # 2*4096*2048*1024 FLOP in 1 ms -> 17.18 TFLOP/s
    assert metrics.tflops(metrics.gemm_flops(m, n, k), 1e-3) == pytest.approx(17.179869184)


@pytest.mark.parametrize("seconds", [0.0, -1.0, math.inf, math.nan])
def test_tflops_rejects_bad_time(seconds):
    with pytest.raises(ValueError, match="seconds"):
        metrics.tflops(10, seconds)


def test_ratio_and_speedup():
    assert metrics.ratio(0.36, 0.18) == pytest.approx(2.0)
    assert metrics.speedup(0.36, 0.18) == pytest.approx(0.5)
    with pytest.raises(ValueError, match="reference"):
        metrics.ratio(1.0, 0.0)


def test_median_and_rel_stdev_on_random_samples():
    rng = random.Random(7)
    samples = [rng.gauss(100.0, 2.0) for _ in range(4001)]
    assert metrics.median(samples) == pytest.approx(100.0, abs=0.2)
    assert metrics.rel_stdev(samples) == pytest.approx(0.02, rel=0.1)
    assert metrics.rel_stdev([5.0]) == 0.0
    with pytest.raises(ValueError):
        metrics.median([])


def test_roofline():
    # 4096^3 fp16: 2*4096^3 / (3 * 4096^2 * 2 B) = 1365 FLOP/B, past the ridge.
    ai = metrics.arithmetic_intensity(2 * 4096**3, 3 * 4096**2 * 2)
    assert ai == pytest.approx(4096 / 3)
    assert metrics.roofline_tflops(ai, 989.4, 4.8) == 989.4
    assert metrics.roofline_tflops(10.0, 989.4, 4.8) == pytest.approx(48.0)


def test_timing_summary():
    t = Timing(samples_ms=(1.0, 3.0, 2.0), backend="event", warmup=1)
    assert t.median_ms == 2.0
    assert t.samples_s == [1e-3, 3e-3, 2e-3]


@pytest.mark.parametrize(
    "warmup, repeat, field", [(-1, 5, "warmup"), (1, 0, "repeat"), (1, 2.5, "repeat")]
)
def test_counts_are_validated(warmup, repeat, field):
    with pytest.raises(ValueError, match=field):
        check_counts(warmup, repeat)


def test_measure_rejects_bad_input_before_touching_a_gpu():
    with pytest.raises(ValueError, match="backend='wall'"):
        measure(lambda: None, backend="wall")
    with pytest.raises(ValueError, match="repeat=0"):
        measure(lambda: None, repeat=0)


def test_asv_spread_per_track_from_stored_samples():
    from harness.suite.asv_stats import spread

    stored = {
        "gemm.Stage.track_latency": (
            [["'a'", "'b'"], ["1"]],
            [[1.0, 1.02, 0.98], [2.0, 2.2, 1.8]],
        ),
        "gemm.Stage.track_vs_torch": ([["'a'"]], [[1.0]]),  # one sample: no spread
        "static.Sm90aResources.track_registers": ([["'x'"]], [None]),
    }
    table = spread(stored)
    assert list(table) == ["track_latency"]
    row = table["track_latency"]
    assert row["combinations"] == 2
    assert row["median_rel_stdev"] == pytest.approx((0.02 + 0.1) / 2)
    assert row["max_rel_stdev"][1] == "gemm.Stage.track_latency('b', 1)"


def _result(tilelang_ms=None, **kwargs):
    from harness.measure.cases import CaseResult
    from kernels import GemmConfig, GemmShape

    t = Timing((0.2, 0.18, 0.19), "event", 0)
    kernel = None if tilelang_ms is None else Timing((tilelang_ms,), "event", 0)
    return CaseResult(GemmShape(4096, 4096, 4096), GemmConfig(), t, kernel, **kwargs)


def test_case_result_throughput_and_speedup_are_the_kernels():
    ran = _result(0.38)
    assert ran.tflops == pytest.approx(metrics.tflops(2 * 4096**3, 0.38e-3))
    assert ran.speedup == pytest.approx(0.19 / 0.38)  # torch / kernel: below 1 is slower
    # No kernel ran: no TileLang throughput, not torch's under its name.
    torch_only = _result()
    assert torch_only.tflops is None and torch_only.speedup is None
    assert torch_only.torch_tflops == pytest.approx(metrics.tflops(2 * 4096**3, 0.19e-3))
    record = ran.to_dict()
    assert record["speedup"] == pytest.approx(0.5) and "vs_torch" not in record


def test_case_result_keeps_a_failure_through_its_record():
    from harness.measure.cases import CaseResult

    failed = _result(error="RuntimeError: boom")
    assert failed.failed and failed.tflops is None
    again = CaseResult.from_dict(failed.to_dict())
    assert again.error == "RuntimeError: boom" and again.tilelang is None and again.check is None
    asked = {"block_m": 100, "block_n": 128, "block_k": 32, "threads": 128, "num_stages": 3}
    rejected = CaseResult.from_dict({**failed.to_dict(), "config": None, "requested": asked})
    assert rejected.config is None and rejected.requested == asked


@pytest.mark.parametrize(
    "change, message",
    [
        ({"torch_samples_ms": [0.1, -0.1]}, r"torch_samples_ms\[1\]=-0.1: must be a positive"),
        ({"torch_samples_ms": [math.nan]}, r"torch_samples_ms\[0\]=nan"),
        ({"tilelang_samples_ms": [0.0]}, r"tilelang_samples_ms\[0\]=0.0"),
        ({"tilelang_samples_ms": "fast"}, "tilelang_samples_ms: must be a non-empty list"),
        ({"m": 0}, r"GemmShape.m=0: must be >= 1"),
        ({"config": 3}, "config=3: must be a config id or null"),
        ({"rel_error": "small"}, "rel_error='small': must be a number"),
        ({"error": 1}, "error=1: must be a string or null"),
    ],
)
def test_case_result_refuses_a_record_off_the_schema(change, message):
    from harness.measure.cases import CaseResult

    with pytest.raises(ValueError, match=message):
        CaseResult.from_dict({**_result(0.38).to_dict(), **change})
    with pytest.raises(ValueError, match="missing 'dtype'"):
        CaseResult.from_dict({k: v for k, v in _result().to_dict().items() if k != "dtype"})
