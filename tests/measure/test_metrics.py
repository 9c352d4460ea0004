"""Metric math and the timing path's input checks, on the CPU."""

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
