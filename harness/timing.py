"""The one timing path. Every caller (the CLI, asv, the gate) times through ``measure``.

It is built on ``tilelang.profiler.do_bench``: the L2 cache is flushed before every
launch, warm-up launches are kept out of the samples, and the device is timed with CUDA
events (one sample per launch) or CUPTI (kernel time only, one sample per batch).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from harness import metrics

BACKENDS = ("event", "cupti")


@dataclass(frozen=True, slots=True)
class Timing:
    """Samples of one measurement, in milliseconds, and how they were taken."""

    samples_ms: tuple[float, ...]
    backend: str
    warmup: int

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


def measure(
    fn: Callable[[], object],
    *,
    warmup: int = 10,
    repeat: int = 50,
    backend: str = "event",
    rounds: int = 1,
) -> Timing:
    """Time ``fn`` on the current CUDA device.

    ``warmup`` and ``repeat`` are launch counts (``do_bench``'s own ``warmup``/``rep`` are
    millisecond budgets; its ``_n_warmup``/``_n_repeat`` overrides take counts).

    - ``event``: ``rounds * repeat`` samples, one per launch, each bracketed by CUDA events
      with the L2 flushed before it.
    - ``cupti``: ``rounds`` samples, each the mean kernel time of ``repeat`` launches as
      CUPTI records it (no launch gaps, no flush kernel), because do_bench's CUPTI path
      reports only a mean.
    """
    check_counts(warmup, repeat, rounds)
    if backend not in BACKENDS:
        raise ValueError(f"backend={backend!r}: must be one of {list(BACKENDS)}")
    from tilelang.profiler import do_bench

    samples: list[float] = []
    for _ in range(rounds):
        if backend == "cupti":
            samples.append(
                float(do_bench(fn, _n_warmup=max(warmup, 1), _n_repeat=repeat, backend="cupti"))
            )
            continue
        if repeat == 1:
            samples.append(float(do_bench(fn, _n_warmup=max(warmup, 1), _n_repeat=1)))
            continue
        # Asking for the quantiles at i/(n-1) returns every sample, sorted: do_bench keeps
        # the per-launch event times but otherwise hands back only an aggregate.
        qs = [i / (repeat - 1) for i in range(repeat)]
        samples.extend(
            float(x) for x in do_bench(fn, _n_warmup=max(warmup, 1), _n_repeat=repeat, quantiles=qs)
        )
    return Timing(samples_ms=tuple(samples), backend=backend, warmup=warmup)
