"""Several kernels timed launch by launch in turn, for comparisons that must cancel drift.

``tilelang.profiler.do_bench`` times one function. A comparison of two builds of a kernel
(the gate's base and head, or a build and itself with an injected slowdown) needs their
launches mixed: a large GEMM at the card's power cap drifts by about 2% between
processes and between blocks of launches, and timed one after the other the two builds
would see different clocks. Here every launch of one function is followed by one of the
next, in an order that changes every slot, with do_bench's method around each: the L2
cache flushed by writing a 256 MB buffer, then CUDA events around the launch. A trial is
``launches`` launches of each function; its samples are reduced to one ratio per function
against the first (of means without stray launches, ``trial_center``), and those ratios are what a
decision reads.

Measured on the H200 (an A/A, 12 trials of 30 launches a side): the ratio's coefficient of
variation was 0.07-0.27% launch by launch against 0.24-3.2% in blocks of 30.

Small kernels are timed on the GPU, not through the host's launch path: each flush is
tens of microseconds of GPU work, and nothing waits between launches, so the host queues
ahead and a launch starts as soon as its flush ends (a 128^3 GEMM measured 8.9 us on the
H200 this way).

The order of the functions changes every launch slot, in rounds of ``n!`` slots that
take every permutation once: each function takes each position, and follows each other
one, equally often in a round (the default 6 launches cover 2 and 3 functions exactly).
A fixed rotation always puts the same function after the same one: with one, the H200
self-test saw A/A offsets of +0.4% on 128^3, where base always followed the injected
side's spin. Each round takes its permutations in a shuffled order: the GPU has launch
cycles of its own (decode16's launches ran slow at 4 phases of a cycle of 11 on the
H200), and a fixed cycle of permutations fell in step with it, handing base or head the
slow launches in alternate trials (A/A trial ratios 0.983-1.022).

Two timers (``timer``): ``event`` brackets each launch with CUDA events; ``cupti`` runs the
same launches under the profiler and reads each launch's kernel time from CUPTI's
activity records (``kernel_timer.py``), without the launch gaps and event overhead that
weigh a few microseconds on a 9 us kernel. ``cupti`` raises ``CuptiUnavailable`` where
the profiler records no kernels; the caller decides whether to fall back.

Only torch is imported (lazily) and nothing of this project (``kernel_timer.py`` beside
this file is loaded by path), so the gate's worker can load this file by path while
another revision's tree is on ``sys.path``.
"""

from __future__ import annotations

import functools
import importlib.util
import itertools
import random
import statistics
import sys
from collections.abc import Callable, Sequence
from pathlib import Path


def _kernel_timer():
    """``kernel_timer.py`` beside this file, loaded by path once."""
    name = "_interleave_kernel_timer"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(
            name, Path(__file__).with_name("kernel_timer.py")
        )
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


kernel_timer = _kernel_timer()
TIMERS = ("event", "cupti")

# do_bench's default flush buffer: more than the H200's 50 MB L2 several times over.
FLUSH_BYTES = 256 * 1024 * 1024

# Launches a function gets per trial (``launches_for``): a multiple of the slots that put
# two or three functions through every order (3! = 6), at least one such round, and as
# many rounds as fit ``TRIAL_BUDGET_MS`` of GPU time a function (each launch with its
# flush), up to ``MAX_TRIAL_LAUNCHES``. A trial's ratio is of means (``trial_center``),
# whose noise falls with the square root of the launches: a 2 ms GEMM's launches vary by a
# few tenths of a percent and 6 do, a 9 us kernel's by a few percent, and it needs dozens
# to bring its A/A ratio's spread between processes under a quarter of a percent (it
# measured 0.2-0.9% on the H200 with 6, CUPTI timing).
LAUNCH_ROUND = 6
TRIAL_BUDGET_MS = 8.0
MAX_TRIAL_LAUNCHES = 120


def check_counts(trials: int, launches: int, warmup: int) -> None:
    counts = (("trials", trials, 1), ("launches", launches, 1), ("warmup", warmup, 0))
    for name, value, low in counts:
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            raise ValueError(f"{name}={value!r}: must be an integer >= {low}")


def launches_for(
    kernel_ms: float, flush_ms: float, budget_ms: float = TRIAL_BUDGET_MS, scale: int = 1
) -> int:
    """Launches a function gets per trial when one launch takes ``kernel_ms`` after a
    flush of ``flush_ms``: whole rounds of ``LAUNCH_ROUND`` that fit ``budget_ms``, at
    least one and at most ``MAX_TRIAL_LAUNCHES``; a benchmark's launch scale (its
    calibration's, for a noisy one) multiplies the budget and the ceiling."""
    if isinstance(scale, bool) or not isinstance(scale, int) or scale < 1:
        raise ValueError(f"scale={scale!r}: must be an integer >= 1")
    budget_ms *= scale
    for name, value in (("kernel_ms", kernel_ms), ("flush_ms", flush_ms), ("budget_ms", budget_ms)):
        if not (isinstance(value, (int, float)) and value >= 0 and value == value):
            raise ValueError(f"{name}={value!r}: must be a number >= 0")
    if kernel_ms + flush_ms <= 0:
        raise ValueError("kernel_ms + flush_ms: must be > 0")
    rounds = int(budget_ms // (LAUNCH_ROUND * (kernel_ms + flush_ms)))
    return LAUNCH_ROUND * max(1, min(scale * MAX_TRIAL_LAUNCHES // LAUNCH_ROUND, rounds))


@functools.cache
def _permutations(n: int) -> list[tuple[int, ...]]:
    if n > 4:  # 5! slots would not fit a trial: rotate instead
        return [tuple((start + i) % n for i in range(n)) for start in range(n)]
    return list(itertools.permutations(range(n)))


@functools.lru_cache(maxsize=4096)
def _round(n: int, index: int) -> tuple[int, ...]:
    """The order in which round ``index`` (one slot per permutation) takes the
    permutations of ``n`` functions: shuffled, reproducibly (seeded by the round)."""
    order = list(range(len(_permutations(n))))
    random.Random(index * 1009 + n).shuffle(order)
    return tuple(order)


def launch_order(n: int, trial: int, launch: int, launches: int = 6) -> tuple[int, ...]:
    """The order of the ``n`` functions at one launch slot of a trial of ``launches``:
    slots go in rounds that take every permutation of ``range(n)`` once, each round in
    a shuffled order, continuing across trials. A fixed cycle of permutations falls in
    step with a cycle of the GPU's own (the H200 timed decode16's launches in a cycle of
    11, slow at 4 of its phases) and hands one side more slow launches trial after trial;
    shuffled rounds leave that to chance, while each round still puts every function in
    every position, and after every other one, equally often."""
    perms = _permutations(n)
    slot = trial * launches + launch
    return perms[_round(n, slot // len(perms))[slot % len(perms)]]


def interleaved(
    fns: Sequence[Callable[[], object]],
    *,
    trials: int = 20,
    launches: int = 6,
    warmup: int = 3,
    flush_bytes: int = FLUSH_BYTES,
    timer: str = "event",
) -> list[list[list[float]]]:
    """``out[f][t]``: the ``launches`` latencies (ms) of function ``f`` in trial ``t``,
    taken with every function launched in turn, on the current CUDA device, by ``timer``."""
    check_counts(trials, launches, warmup)
    if not fns:
        raise ValueError("fns: need at least one function")
    if timer not in TIMERS:
        raise ValueError(f"timer={timer!r}: must be one of {list(TIMERS)}")
    import torch

    cache = torch.empty(flush_bytes // 4, dtype=torch.int, device="cuda")
    for _ in range(warmup):
        for fn in fns:
            fn()
    torch.cuda.synchronize()
    if timer == "cupti":
        return _interleaved_cupti(fns, trials, launches, cache)
    out: list[list[list[float]]] = [[[] for _ in range(trials)] for _ in fns]
    for t in range(trials):
        events = []
        for j in range(launches):
            for f in launch_order(len(fns), t, j, launches):
                start = torch.cuda.Event(enable_timing=True)
                end = torch.cuda.Event(enable_timing=True)
                cache.zero_()
                start.record()
                fns[f]()
                end.record()
                events.append((f, start, end))
        torch.cuda.synchronize()
        for f, start, end in events:
            out[f][t].append(start.elapsed_time(end))
    return out


def _interleaved_cupti(fns, trials: int, launches: int, cache) -> list[list[list[float]]]:
    """The launches of ``interleaved`` with no events: each launch's kernel time from
    CUPTI's records, one segment per flush."""
    order = [
        (f, t)
        for t in range(trials)
        for j in range(launches)
        for f in launch_order(len(fns), t, j, launches)
    ]

    def run() -> None:
        for f, _ in order:
            kernel_timer.flush(cache)
            fns[f]()

    durations = kernel_timer.segment_durations(kernel_timer.capture(run), len(order))
    out: list[list[list[float]]] = [[[] for _ in range(trials)] for _ in fns]
    for (f, t), ms in zip(order, durations, strict=True):
        out[f][t].append(ms)
    return out


# A launch further than both of these from its trial's median is a stray (an interrupt, a
# clock step) and left out of the trial's mean: a fraction of the median, and a multiple of
# the launches' median absolute deviation (so a trial whose launches split into two
# clusters further apart than the fraction, as a power-capped GEMM's can, keeps them all).
STRAY_BAND = 0.05
STRAY_MADS = 5.0


def trial_center(latencies: Sequence[float]) -> float:
    """One trial's latency of one function: the mean of its launches without strays
    (``STRAY_BAND``, ``STRAY_MADS``). As robust to a stray launch as the median, and
    unlike it (or any trimmed mean) not stuck to the timer's tick: CUPTI stamps kernels in
    32 ns steps on the H200, so a 4.7 us kernel reads 146 or 147 ticks, in the proportion
    that makes their mean the true time, while their median moves in steps of 0.7%. At
    least half the launches are always kept (those within one deviation of the median)."""
    if not latencies:
        raise ValueError("latencies: need at least one launch")
    middle = statistics.median(latencies)
    deviation = statistics.median(abs(x - middle) for x in latencies)
    band = max(STRAY_BAND * abs(middle), STRAY_MADS * deviation)
    return statistics.fmean(x for x in latencies if abs(x - middle) <= band)


def trial_ratios(samples: list[list[list[float]]], reference: int = 0) -> list[list[float]]:
    """Per function, one ratio per trial: its ``trial_center`` over the ``reference``
    function's in the same trial (the reference's own ratios are all 1)."""
    ref = [trial_center(trial) for trial in samples[reference]]
    return [
        [trial_center(trial) / r for trial, r in zip(per_fn, ref, strict=True)]
        for per_fn in samples
    ]
