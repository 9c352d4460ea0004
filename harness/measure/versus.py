"""A kernel against its baseline, launched in turn: the one way a speedup over
torch.matmul is measured here, by the tuner's confirmation (``benchmarks.tune_gemm``), the
suite's ``track_vs_torch`` (``asv_bench.gemm``) and the off-table record
(``benchmarks.offtable``), so that what the tuner writes into the tuned table is what asv
then tracks.

The two functions go through ``harness.measure.interleave``: every launch follows an L2
flush, the order changes every slot, and a trial is as many launches of each as fit the
trial's GPU budget (``interleave.launches_for``, from one probe trial's wall time). Each
launch's kernel time comes from CUPTI (no launch gaps or event overhead, which weigh a few
microseconds on a 10 us kernel), or from CUDA events where CUPTI records nothing. A trial's
latency per function is ``interleave.trial_center`` (the mean of its launches, strays
left out); its ratio is the kernel's over the baseline's. The callers measure over
``PLACEMENTS`` input sets at once (``placed``), the trials shared out among them, since
the baseline's time moves with where its operands lie.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass

from harness.measure import interleave

# Trials per measurement where the caller has no count of its own: the suite's
# ``track_vs_torch`` samples and the tuner's confirmation, so both read the same estimator.
TRIALS = 10
# Input sets one speedup is measured over (``placed``), each at an address of its own.
PLACEMENTS = 3
WARMUP = 3  # untimed launches of each before the probe
EVENT_FALLBACK = "event (CUPTI recorded nothing)"


@dataclass(frozen=True, slots=True)
class Versus:
    """Per trial, the kernel's and the baseline's latency (ms), and how they were taken."""

    kernel_ms: tuple[float, ...]
    baseline_ms: tuple[float, ...]
    launches: int  # of each function per trial
    timer: str  # "cupti", or EVENT_FALLBACK where CUPTI recorded nothing

    @property
    def ratios(self) -> list[float]:
        """Kernel over baseline per trial (what ``track_vs_torch`` stores; lower is
        better)."""
        return [k / b for k, b in zip(self.kernel_ms, self.baseline_ms, strict=True)]

    @property
    def speedups(self) -> list[float]:
        """Baseline over kernel per trial (above 1: the kernel is faster)."""
        return [b / k for k, b in zip(self.kernel_ms, self.baseline_ms, strict=True)]

    @property
    def speedup(self) -> float:
        """The median of ``speedups``: the figure the tuned table records."""
        return statistics.median(self.speedups)


def versus(
    kernel: Callable[[], object],
    baseline: Callable[[], object],
    trials: int = TRIALS,
    warmup: int = WARMUP,
    timer: str = "cupti",
) -> Versus:
    """``kernel`` and ``baseline`` launched in turn for ``trials`` trials on the current
    CUDA device (``timer`` "cupti" falls back to events where CUPTI records nothing)."""
    interleave.check_counts(trials, 1, warmup)
    fns = [kernel, baseline]
    got, launches, used = interleaved_trials(fns, trials, warmup, timer)
    kernel_ms, baseline_ms = (tuple(interleave.trial_center(t) for t in f) for f in got)
    return Versus(kernel_ms, baseline_ms, launches, used)


def placed(
    bind: Callable[[int], tuple[Callable[[], object], Callable[[], object]]],
    trials: int = TRIALS,
    placements: int = PLACEMENTS,
    warmup: int = WARMUP,
    timer: str = "cupti",
) -> Versus:
    """``versus`` over ``placements`` input sets, its ``trials`` shared out among them
    (the first sets one more where they do not divide) and pooled in order. ``bind(i)``
    returns the kernel and baseline launches on the i-th set; each set is held until the
    last is measured, so a fresh one lies at addresses of its own. cuBLAS's time on one
    shape moves with where its operands lie (the H200, attn_qk_t fp16: 14.29-15.18 us over
    eight placements, the kernel 12.91-13.14 us), so a speedup taken on one set carries
    that set's luck; the median over the pooled trials does not hang on one set."""
    if isinstance(placements, bool) or not isinstance(placements, int) or placements < 1:
        raise ValueError(f"placements={placements!r}: must be an int >= 1")
    if isinstance(trials, bool) or not isinstance(trials, int) or trials < placements:
        raise ValueError(f"trials={trials!r}: must be an int >= placements ({placements})")
    held, parts = [], []
    for i in range(placements):
        held.append(bind(i))
        share = trials // placements + (i < trials % placements)
        parts.append(versus(*held[-1], share, warmup, timer))
    timers = {p.timer for p in parts}
    return Versus(
        tuple(ms for p in parts for ms in p.kernel_ms),
        tuple(ms for p in parts for ms in p.baseline_ms),
        min(p.launches for p in parts),
        timers.pop() if len(timers) == 1 else EVENT_FALLBACK,
    )


def interleaved_trials(fns, trials: int, warmup: int, timer: str) -> tuple[list, int, str]:
    """``fns`` launched in turn: the per-function, per-trial latencies, the launches per
    trial (as many as fit the trial's GPU budget, from one probe trial's wall time) and
    the timer that recorded them."""
    import torch

    # The warm-up launches come first and untimed: a function's first launch in a process
    # pays its one-time costs (a kernel module loaded on first use, cuBLAS choosing its
    # algorithm for a shape), which in the probe's wall time made a 40 us kernel look
    # like a millisecond one, so it got 6 launches a trial where it needs dozens (the H200,
    # decode16 fp16: the first measurement in a process 6 launches, speedups 1.116-1.139
    # over three processes; the next ones 48-72 launches, 1.120-1.127).
    for _ in range(warmup):
        for fn in fns:
            fn()
    torch.cuda.synchronize()
    start = time.perf_counter()
    interleave.interleaved(fns, trials=1, launches=interleave.LAUNCH_ROUND, warmup=0)
    torch.cuda.synchronize()
    per_launch = (time.perf_counter() - start) * 1e3 / (len(fns) * interleave.LAUNCH_ROUND)
    launches = interleave.launches_for(per_launch, 0.0)
    try:
        got = interleave.interleaved(fns, trials=trials, launches=launches, warmup=0, timer=timer)
    except interleave.kernel_timer.CuptiUnavailable:
        timer = EVENT_FALLBACK
        got = interleave.interleaved(fns, trials=trials, launches=launches, warmup=0)
    return got, launches, timer
