"""Small pure functions over measured numbers. No GPU, no torch."""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence

from harness.policy import POLICY


def tflops(flops: int, seconds: float) -> float:
    """Throughput in TFLOP/s: ``flops / seconds / 1e12``."""
    if seconds <= 0 or not math.isfinite(seconds):
        raise ValueError(f"seconds={seconds!r}: must be a positive finite time")
    return flops / seconds / 1e12


def gemm_flops(m: int, n: int, k: int) -> int:
    """Each of the m*n outputs takes k multiplies and k adds."""
    return 2 * m * n * k


def ratio(value: float, reference: float) -> float:
    """``value / reference``: for latencies, below 1 means faster than the reference."""
    if reference <= 0:
        raise ValueError(f"reference={reference!r}: must be positive")
    return value / reference


def speedup(latency: float, reference_latency: float) -> float:
    """How many times faster than the reference (``reference / latency``); 1.0 is parity."""
    return ratio(reference_latency, latency)


def median(samples: Sequence[float]) -> float:
    if not samples:
        raise ValueError("samples: must not be empty")
    return statistics.median(samples)


def rel_stdev(samples: Sequence[float]) -> float:
    """Sample standard deviation over the mean; 0.0 for fewer than two samples."""
    if len(samples) < 2:
        return 0.0
    mean = statistics.fmean(samples)
    return statistics.stdev(samples) / mean if mean else math.inf


def median_rsd(samples: Sequence[float]) -> float:
    """Relative standard error of the sample median, robustly: the spread is taken from
    the median absolute deviation (x1.4826 for a normal's sigma) so outliers do not inflate
    it, and the median's standard error is sqrt(pi/2) times the mean's (large-n normal)."""
    n = len(samples)
    if n < 2:
        return math.inf
    med = statistics.median(samples)
    mad = statistics.median(abs(x - med) for x in samples)
    if med == 0:
        return math.inf
    return math.sqrt(math.pi / 2) * POLICY.robust_sd(mad) / math.sqrt(n) / abs(med)


def arithmetic_intensity(flops: int, bytes_moved: int) -> float:
    """FLOP per byte of device memory traffic."""
    if bytes_moved <= 0:
        raise ValueError(f"bytes_moved={bytes_moved!r}: must be positive")
    return flops / bytes_moved


def roofline_tflops(intensity: float, peak_tflops: float, bandwidth_tbps: float) -> float:
    """Attainable TFLOP/s at ``intensity``: the lower of the compute and memory roofs."""
    return min(peak_tflops, intensity * bandwidth_tbps)
