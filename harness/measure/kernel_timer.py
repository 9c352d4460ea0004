"""Kernel durations as the GPU records them (CUPTI activity records, through
``torch.profiler``): the time each launch's kernels ran, without the launch gaps and
event overhead that CUDA events put around a short kernel.

Measured on the H200 (``do_bench``, 128^3 f16): events read 7.68 us with a spread of
0.62% across calls, CUPTI 4.78 us with 0.18%: about 3 us of the event figure is
overhead, and its jitter is most of the spread.

Every timed launch is preceded by an L2 flush, a kernel this module recognises by name
(``flush``: an in-place bitwise NOT over a large buffer, a kernel nothing else launches),
so the records split into one segment per launch: the kernels after a flush and before
the next belong to that launch, whatever they are called (a GEMM that zeroes its output
first contributes both kernels). ``segment_durations`` does the split and is pure.

Only torch is imported (lazily) and nothing of this project, so the gate's worker can
load this file by path while another revision's tree is on ``sys.path``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

# The flush kernel's name contains this (torch's elementwise bitwise_not kernel).
FLUSH_NAME = "bitwise_not"


class CuptiUnavailable(RuntimeError):
    """The profiler could not record kernel activity here (no CUPTI, or no records)."""


def flush(cache) -> None:
    """Evict the L2: rewrite ``cache`` (a buffer several times the L2) in place."""
    cache.bitwise_not_()


def segment_durations(
    kernels: Sequence[tuple[str, int, int]], slots: int, flush_name: str = FLUSH_NAME
) -> list[float]:
    """Per launch slot, the summed duration (ms) of the kernels between its flush and the
    next one. ``kernels`` holds ``(name, start_ns, duration_ns)`` records in any order;
    exactly ``slots`` of them must be flushes, each followed by at least one kernel."""
    ordered = sorted(kernels, key=lambda k: k[1])
    out: list[float] = []
    current: float | None = None
    for name, _, duration in ordered:
        if flush_name in name:
            if current is not None:
                out.append(current)
            current = 0.0
            continue
        if current is None:
            continue  # a kernel before the first flush (warm-up): not a timed launch
        current += duration * 1e-6
    if current is not None:
        out.append(current)
    if len(out) != slots:
        raise ValueError(f"kernel records: {len(out)} flushes found, {slots} launches timed")
    empty = [i for i, ms in enumerate(out) if ms <= 0]
    if empty:
        raise ValueError(f"kernel records: launch slot {empty[0]} has no kernel after its flush")
    return out


def capture(run: Callable[[], None]) -> list[tuple[str, int, int]]:
    """``(name, start_ns, duration_ns)`` of every GPU kernel ``run`` launched, recorded
    by CUPTI through ``torch.profiler``. CuptiUnavailable, saying why, where it cannot."""
    import torch

    try:
        from torch.autograd import DeviceType
        from torch.profiler import ProfilerActivity, profile

        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            run()
            torch.cuda.synchronize()
        records = [
            (e.name(), e.start_ns(), e.duration_ns())
            for e in prof.profiler.kineto_results.events()
            if e.device_type() == DeviceType.CUDA
        ]
    except Exception as err:  # the profiler's own errors vary by build
        raise CuptiUnavailable(f"torch.profiler could not record CUDA activity: {err}") from err
    if not records:
        raise CuptiUnavailable("torch.profiler recorded no CUDA kernels (is CUPTI available?)")
    return records
