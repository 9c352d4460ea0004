"""Several kernels timed launch by launch in turn, for comparisons that must cancel drift.

``tilelang.profiler.do_bench`` times one function. A comparison of two builds of a kernel
(the gate's base and head, or a build and itself with an injected slowdown) needs their
launches mixed: a large GEMM at the card's power cap drifts by about 2% between
processes and between blocks of launches, and timed one after the other the two builds
would see different clocks. Here every launch of one function is followed by one of the
next, in a rotating order, with do_bench's method around each: the L2 cache flushed by
writing a 256 MB buffer, then CUDA events around the launch. A trial is ``launches``
launches of each function; its samples are reduced to one ratio of medians per function
against the first, and those ratios are what a decision reads.

Measured on the H200 (an A/A, 12 trials of 30 launches a side): the ratio's coefficient of
variation was 0.07-0.27% launch by launch against 0.24-3.2% in blocks of 30.

A kernel shorter than ``GRAPH_BELOW_MS`` (a 128^3 GEMM runs in a few microseconds) is
bound by the host's launch path, whose jitter then swamps the kernel: such functions are
captured in CUDA graphs of several launches (as do_bench's ``cudagraph`` backend does)
and each slot replays one graph, its time divided by the launches in it. Every function
of a call gets the same number of launches per slot.

Only torch is imported (lazily) and nothing of this project, so the gate's worker can load
this file by path while another revision's tree is on ``sys.path``.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Sequence

# do_bench's default flush buffer: more than the H200's 50 MB L2 several times over.
FLUSH_BYTES = 256 * 1024 * 1024
# Below this a launch is mostly host time; graphs of launches make a slot this long.
GRAPH_BELOW_MS = 0.02
GRAPH_SLOT_MS = 0.2


def check_counts(trials: int, launches: int, warmup: int) -> None:
    counts = (("trials", trials, 1), ("launches", launches, 1), ("warmup", warmup, 0))
    for name, value, low in counts:
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            raise ValueError(f"{name}={value!r}: must be an integer >= {low}")


def launch_order(n: int, trial: int, launch: int) -> list[int]:
    """The order of the ``n`` functions at one launch slot: a rotation that moves on every
    launch and every trial, so each function follows each other one equally often."""
    start = (trial + launch) % n
    return [(start + i) % n for i in range(n)]


def graph_launches(first_ms: float) -> int:
    """Launches per slot for a function whose single launch takes ``first_ms``: 1, or
    enough to fill ``GRAPH_SLOT_MS`` when it is host-bound."""
    if first_ms >= GRAPH_BELOW_MS:
        return 1
    return max(2, math.ceil(GRAPH_SLOT_MS / max(first_ms, 1e-4)))


def _single_ms(fn, cache) -> float:
    import torch

    times = []
    for _ in range(3):
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        cache.zero_()
        start.record()
        fn()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def _graphs(fns, per_slot: int):
    """Each function captured as a CUDA graph of ``per_slot`` launches: their replays."""
    import torch

    replays = []
    for fn in fns:
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            for _ in range(per_slot):
                fn()
        replays.append(graph.replay)
    torch.cuda.synchronize()
    return replays


def interleaved(
    fns: Sequence[Callable[[], object]],
    *,
    trials: int = 20,
    launches: int = 6,
    warmup: int = 3,
    flush_bytes: int = FLUSH_BYTES,
    graphs: bool = True,
    info: dict | None = None,
) -> list[list[list[float]]]:
    """``out[f][t]``: the ``launches`` latencies (ms) of function ``f`` in trial ``t``,
    taken with every function launched in turn, on the current CUDA device. With
    ``graphs``, host-bound functions are replayed from CUDA graphs (a latency is then a
    slot's time over its launches); ``info["graph_launches"]`` says how many per slot."""
    check_counts(trials, launches, warmup)
    if not fns:
        raise ValueError("fns: need at least one function")
    import torch

    cache = torch.empty(flush_bytes // 4, dtype=torch.int, device="cuda")
    for _ in range(warmup):
        for fn in fns:
            fn()
    torch.cuda.synchronize()
    per_slot = graph_launches(_single_ms(fns[0], cache)) if graphs else 1
    if per_slot > 1:
        try:
            fns = _graphs(fns, per_slot)
        except Exception as err:  # a launch path that cannot be captured: time it directly
            per_slot = 1
            if info is not None:
                info["graph_error"] = f"{type(err).__name__}: {err}"[:200]
    if info is not None:
        info["graph_launches"] = per_slot
    out: list[list[list[float]]] = [[[] for _ in range(trials)] for _ in fns]
    for t in range(trials):
        events = []
        for j in range(launches):
            for f in launch_order(len(fns), t, j):
                start = torch.cuda.Event(enable_timing=True)
                end = torch.cuda.Event(enable_timing=True)
                cache.zero_()
                start.record()
                fns[f]()
                end.record()
                events.append((f, start, end))
        torch.cuda.synchronize()
        for f, start, end in events:
            out[f][t].append(start.elapsed_time(end) / per_slot)
    return out


def trial_ratios(samples: list[list[list[float]]], reference: int = 0) -> list[list[float]]:
    """Per function, one ratio per trial: its median latency over the ``reference``
    function's median in the same trial (the reference's own ratios are all 1)."""
    ref = [statistics.median(trial) for trial in samples[reference]]
    return [
        [statistics.median(trial) / r for trial, r in zip(per_fn, ref, strict=True)]
        for per_fn in samples
    ]
