"""The one timing path. Every caller (the CLI, asv, the gate) times through ``measure``.

It is built on ``tilelang.profiler.do_bench``: the L2 cache is flushed before every
launch, warm-up launches are kept out of the samples, and the device is timed with CUDA
events (one sample per launch). The ``cupti`` backend gives one sample per launch as well:
the launch's kernel time from CUPTI's activity records (``kernel_timer``), without the
launch gaps and event overhead that weigh on a kernel of a few microseconds; the gate's
paired loop (``interleave``) reads the same records.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from harness.measure import kernel_timer, metrics
from harness.measure.interleave import FLUSH_BYTES

BACKENDS = ("event", "cupti")


@dataclass(frozen=True, slots=True)
class Timing:
    """Samples of one measurement, in milliseconds, and how they were taken."""

    samples_ms: tuple[float, ...]
    backend: str
    warmup: int
    # Noise-based stopping: the target relative standard error of the median, the value
    # reached, and whether the target was met before the round or time budget ran out.
    target_rsd: float | None = None
    median_rsd: float | None = None
    target_met: bool | None = None
    # GPU state: batches discarded for throttling, whether a kept batch was throttled
    # (the retakes ran out, or the reason persisted through one), every reason seen, and
    # the SM clock during each batch (the median of NVML readings taken while it ran).
    discarded: int = 0
    throttled: bool = False
    throttle_reasons: tuple[str, ...] = ()
    clocks_mhz: tuple[int, ...] = ()

    @property
    def median_ms(self) -> float:
        return metrics.median(self.samples_ms)

    @property
    def rel_stdev(self) -> float:
        return metrics.rel_stdev(self.samples_ms)

    @property
    def samples_s(self) -> list[float]:
        return [x * 1e-3 for x in self.samples_ms]


def check_counts(warmup: int, repeat: int, rounds: int = 1) -> None:
    for name, value, low in (("warmup", warmup, 0), ("repeat", repeat, 1), ("rounds", rounds, 1)):
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            raise ValueError(f"{name}={value!r}: must be an integer >= {low} (an iteration count)")


def _check_stopping(target_rsd, max_rounds, rounds, budget_s, max_retakes) -> None:
    if target_rsd is not None and not 0 < target_rsd < 1:
        raise ValueError(f"target_rsd={target_rsd!r}: must be a fraction in (0, 1), e.g. 0.005")
    if isinstance(max_rounds, bool) or not isinstance(max_rounds, int) or max_rounds < rounds:
        raise ValueError(f"max_rounds={max_rounds!r}: must be an integer >= rounds ({rounds})")
    if budget_s is not None and not budget_s > 0:
        raise ValueError(f"budget_s={budget_s!r}: must be a positive number of seconds")
    if isinstance(max_retakes, bool) or not isinstance(max_retakes, int) or max_retakes < 0:
        raise ValueError(f"max_retakes={max_retakes!r}: must be an integer >= 0")


def _batch(fn, warmup: int, repeat: int, backend: str) -> list[float]:
    """``repeat`` per-launch samples: one do_bench call (events), or the kernel times CUPTI
    recorded (each launch after an L2 flush)."""
    n_warmup = max(warmup, 1)
    if backend == "cupti":
        return _cupti_batch(fn, n_warmup, repeat)
    from tilelang.profiler import do_bench

    if repeat == 1:
        return [float(do_bench(fn, _n_warmup=n_warmup, _n_repeat=1))]
    # Asking for the quantiles at i/(n-1) returns every sample, sorted: do_bench keeps
    # the per-launch event times but otherwise hands back only an aggregate.
    qs = [i / (repeat - 1) for i in range(repeat)]
    return [float(x) for x in do_bench(fn, _n_warmup=n_warmup, _n_repeat=repeat, quantiles=qs)]


def _cupti_batch(fn, warmup: int, repeat: int) -> list[float]:
    import torch

    cache = torch.empty(FLUSH_BYTES // 4, dtype=torch.int, device="cuda")
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()

    def run() -> None:
        for _ in range(repeat):
            kernel_timer.flush(cache)
            fn()

    return kernel_timer.segment_durations(kernel_timer.capture(run), repeat)


def measure(
    fn: Callable[[], object],
    *,
    warmup: int = 10,
    repeat: int = 50,
    backend: str = "event",
    rounds: int = 1,
    target_rsd: float | None = None,
    max_rounds: int = 20,
    budget_s: float | None = None,
    nvml=None,
    max_retakes: int = 3,
    batch: Callable[..., list[float]] = _batch,
) -> Timing:
    """Time ``fn`` on the current CUDA device.

    ``warmup`` and ``repeat`` are launch counts (``do_bench``'s own ``warmup``/``rep`` are
    millisecond budgets; its ``_n_warmup``/``_n_repeat`` overrides take counts). Each round
    is one batch:

    - ``event``: ``repeat`` samples, one per launch, each bracketed by CUDA events with the
      L2 flushed before it;
    - ``cupti``: ``repeat`` samples, each launch's kernel time as CUPTI records it, the
      L2 flushed before each (``kernel_timer.CuptiUnavailable`` where it records none).

    At least ``rounds`` batches are taken. With ``target_rsd`` set, batches continue until
    the relative standard error of the median falls to the target, ``max_rounds`` batches
    were taken or ``budget_s`` seconds passed. With an NVML reader (``harness.measure.gpu_state``),
    the GPU state is read while each batch runs; a batch during which the GPU reported
    throttling is discarded and re-taken, at most ``max_retakes`` times in all. Past that,
    or when the retake reports the same reason again (a steady state, such as a large GEMM
    at the card's power cap), the batch is kept and the result is flagged.
    """
    check_counts(warmup, repeat, rounds)
    if backend not in BACKENDS:
        raise ValueError(f"backend={backend!r}: must be one of {list(BACKENDS)}")
    _check_stopping(target_rsd, max_rounds, rounds, budget_s, max_retakes)
    start = time.perf_counter()
    samples: list[float] = []
    clocks: list[int] = []
    discarded, throttled, taken, rsd = 0, False, 0, None
    reasons: dict[str, None] = {}
    last_why = None
    while taken < max_rounds:
        if nvml is None:
            got, state = batch(fn, warmup, repeat, backend), None
        else:
            got, state = nvml.during(lambda: batch(fn, warmup, repeat, backend))
        if state is not None:
            clocks.append(state.sm_clock_mhz)
            why = state.throttled()
            if why:
                kind = state.reasons or ("clock",)
                reasons.update(dict.fromkeys(state.reasons or (why,)))
                # A reason that outlasts a retake is the card's steady state (a GEMM at
                # its power cap): retaking again would only spend time. Keep, and flag.
                if discarded < max_retakes and kind != last_why:
                    discarded += 1
                    last_why = kind
                    continue
                throttled = True
            else:
                last_why = None
        samples.extend(got)
        taken += 1
        if taken < rounds:
            continue
        if target_rsd is None:
            break
        rsd = metrics.median_rsd(samples)
        if rsd <= target_rsd:
            break
        if budget_s is not None and time.perf_counter() - start >= budget_s:
            break
    if target_rsd is not None and rsd is None:
        rsd = metrics.median_rsd(samples)
    return Timing(
        samples_ms=tuple(samples),
        backend=backend,
        warmup=warmup,
        target_rsd=target_rsd,
        median_rsd=rsd,
        target_met=None if target_rsd is None else rsd <= target_rsd,
        discarded=discarded,
        throttled=throttled,
        throttle_reasons=tuple(reasons),
        clocks_mhz=tuple(clocks),
    )


def measure_launch(fn: Callable[[], object], *, warmup: int = 10, repeat: int = 100) -> Timing:
    """Host launch overhead: wall time of one call of ``fn`` as the Python caller sees it,
    device work left running (do_bench's ``wall`` backend with no device to wait on). The
    queue is drained before and after, and ``repeat`` stays far below the launch queue's
    depth, so the calls never block on the GPU."""
    check_counts(warmup, repeat)
    import torch
    from tilelang.profiler import do_bench

    torch.cuda.synchronize()
    qs = [i / (repeat - 1) for i in range(repeat)] if repeat > 1 else [0.5]
    got = do_bench(fn, backend="wall", _n_warmup=max(warmup, 1), _n_repeat=repeat, quantiles=qs)
    torch.cuda.synchronize()
    values = got if isinstance(got, list) else [got]
    return Timing(samples_ms=tuple(float(x) for x in values), backend="wall", warmup=warmup)
