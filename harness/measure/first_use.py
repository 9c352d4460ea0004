"""Tuning on first use: a config for a GEMM shape the committed table lacks, found by
timing a few candidates on this GPU within a wall-clock budget, and kept in the local
first-use cache (``first_use_cache``) so the next run reuses it.

``tuned_config(shape, device)`` answers, in this order:

1. ``table``: the committed table's row (``kernels.tuned.lookup``), as ``pick_config``;
2. ``first-use cache``: this GPU's cached winner for the shape (same TileLang version);
3. ``tuned now``: the winner of a tuning run, recorded in the cache;
4. ``heuristic``: ``kernels.tuned.heuristic`` where every candidate failed.

A tuning run times the heuristic's pick first, then the other candidates of
``kernels.tuned.candidates`` spread over their decompositions (tile, split of K, grid):
the best of each by the heuristic's own score (``expected``) before a second of any, up
to ``Budget.candidates`` of them (``plan``). On the H200 the first version, by score
alone, tried sixteen variants of the pick's own tile on every off-table shape. Each is
checked against a float64 reference and timed through the project's one timing path
(``harness.measure.timing.measure``, L2 flushed, each launch's kernel time from CUPTI as
``harness.measure.versus`` takes it for the table and the off-table record; CUDA events
where CUPTI records nothing); a config that fails to
build, gives a wrong result or fails to launch is recorded with its error and skipped. A
candidate starts only while the budget has time left, so a run ends at most one
candidate past it, and it keeps the best so far. One line per candidate shows its id,
its latency, the best so far and the time left.

Why not ``tilelang.autotune``'s cache: its key is a hash of the TileLang version, the tuned
function's source and arguments, the whole candidate list and the compile and profile
arguments, not the GPU (the target is ``auto``), so it cannot answer "what did this GPU
pick for this shape"; it is switched off whenever a reference or input supplier is
given (the check against float64 needs both); it compiles every candidate before timing
any, with no wall-clock budget; and it times with its own settings, not this project's
timing path. The compiled kernels still land in TileLang's disk cache, so a shape tuned
once compiles nothing the next time.
"""

from __future__ import annotations

import datetime as dt
import itertools
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, fields
from pathlib import Path

from harness.measure.first_use_cache import CacheFile, Entry, Tried
from kernels import GemmConfig, GemmShape
from kernels.tuned import (
    TILES,
    TUNED_FILE,
    candidates,
    check_sms,
    fill,
    forms,
    heuristic,
    lookup,
    output_tiles,
    tile_efficiency,
    tile_of_c,
    waste,
)

# Where a config came from, as the commands print it.
TABLE = "table"
CACHE = "first-use cache"
TUNED = "tuned now"
HEURISTIC = "heuristic"
SOURCES = (TABLE, CACHE, TUNED, HEURISTIC)
# A brief timing per candidate, enough to rank them (the tuner ranks with 10 launches).
QUICK = {"warmup": 5, "repeat": 20}
# Candidates are ranked by kernel time as CUPTI records it, the measure the off-table
# record and the table take (``harness.measure.versus``). CUDA events around a launch also
# count the GPU's wait for the host between a split grid's zeroing of C and the GEMM: on
# the H200, first-use tuning by events picked 96x7168x2048 NT's unsplit 128x128 tile
# (0.664x torch under versus, reports/offtable_first_use_h200.json at 0c428d5) over the
# heuristic's split in two, which it timed first (0.869x; by CUPTI 14.3 us against the
# unsplit tile's 18.6 us, reports/offtable_sweeps_h200.jsonl).
RANK_BACKEND = "cupti"
FALLBACK_BACKEND = "event"


@dataclass(frozen=True, slots=True)
class Budget:
    """How much a first-use tuning may spend: wall-clock seconds (compiling, checking and
    timing) and candidates at most. Thirty-three: the pick, then on mid and large
    shapes up to seventeen forms (``kernels.tuned.forms``: the operands exchanged and
    ``FORMS``) in turn with the spread of the search space, so that a shape gets every
    form and fifteen or more of the spread's (4
    of the 17 off-table winners sat 12th-15th in the spread plan before the forms joined
    it, ``reports/offtable_first_use_h200.json`` at 0c428d5). On the H200 host (16 cores)
    a shape's 24 candidates took 1-8 s once compiled (the ``offtable_*first_use_h200``
    records' runs before the budget rose from 24)."""

    seconds: float = 60.0
    candidates: int = 33

    def __post_init__(self) -> None:
        s = self.seconds
        if isinstance(s, bool) or not isinstance(s, (int, float)) or not math.isfinite(s) or s <= 0:
            raise ValueError(f"Budget.seconds={s!r}: must be a finite number of seconds > 0")
        n = self.candidates
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise ValueError(f"Budget.candidates={n!r}: must be an int >= 1")


def efficiency(shape: GemmShape, config: GemmConfig) -> float:
    """The heuristic's efficiency of ``config``'s tile on ``shape``'s layout
    (``kernels.tuned.tile_efficiency``: ``TILES``, then ``FITTED``). A tile the heuristic
    does not list is scaled from 128x128's by the products it feeds per loaded element,
    bm bn / (bm + bn): the rule that gave the 64x64 tile its 0.4."""
    listed = tile_efficiency(shape, config)
    if listed is not None:
        return listed
    ref = next(t for t in TILES if (t.config.block_m, t.config.block_n) == (128, 128))
    bm, bn = config.block_m, config.block_n
    return ref.efficiency * (bm * bn / (bm + bn)) / (128 * 128 / 256)


def expected(shape: GemmShape, config: GemmConfig, sms: int) -> float:
    """The heuristic's score of any config (``kernels.tuned.score`` for its tile): the
    tile's efficiency, times the share of SM slots its blocks (split K included) fill,
    over the padding it computes."""
    rows, cols = tile_of_c(config)
    tiles = output_tiles(shape, rows, cols)
    value = efficiency(shape, config) * fill(tiles * config.split_k, sms)
    return value / waste(shape, rows, cols)


def _distance(a: GemmConfig, b: GemmConfig) -> int:
    return sum(getattr(a, f.name) != getattr(b, f.name) for f in fields(GemmConfig))


def _structure(config: GemmConfig) -> tuple:
    """What decomposes the work: the tile, its K step and warpgroups, the split of K and
    the grid (data-parallel, persistent, stream-K, two-block clusters, the operands
    exchanged). Configs alike in these differ only in stages, block order, epilogue or
    warp policy."""
    c = config
    grid = "stream_k" if c.stream_k else "persistent" if c.persistent else "tiles"
    grid += f"_pairs_{c.multicast}" if c.multicast else ""
    grid += "_exchanged" if c.swap_ab else ""
    return (c.block_m, c.block_n, c.block_k, c.threads, c.split_k, grid, c.async_mma)


def spread(shape: GemmShape, sms: int, pick: GemmConfig) -> list[GemmConfig]:
    """The search space (``candidates``, without the hand-written pipeline) spread over
    its decompositions (``_structure``): the best-scored config of each decomposition,
    best decomposition first, then the second best of each, and so on (ties: the fewest
    fields away from ``pick``, which is left out)."""
    ranked = sorted(
        (c for c in candidates(shape, sms) if c != pick),
        key=lambda c: (-expected(shape, c, sms), _distance(c, pick)),
    )
    groups: dict[tuple, list[GemmConfig]] = {}
    for c in ranked:
        groups.setdefault(_structure(c), []).append(c)
    return [c for layer in itertools.zip_longest(*groups.values()) for c in layer if c]


def plan(shape: GemmShape, sms: int, limit: int) -> list[GemmConfig]:
    """The configs a first-use tuning tries, in order, ``limit`` in all: the heuristic's
    pick, then the forms that won the sweeps over mid shapes (``kernels.tuned.forms``,
    most on the hand-written pipeline) in turn with the ``spread`` of the search space,
    each config once. A budget of a few candidates thus tries other tiles, grids and
    splits of K, not only the pick's neighbours."""
    check_sms(sms)
    pick = heuristic(shape, sms)
    turns = itertools.zip_longest(forms(shape, sms), spread(shape, sms, pick))
    ordered = [pick, *(c for pair in turns for c in pair if c is not None)]
    return list(dict.fromkeys(ordered))[:limit]


@dataclass(frozen=True, slots=True)
class Step:
    """Progress after one candidate."""

    index: int
    total: int
    tried: Tried
    best: Tried | None
    left_s: float


def progress_line(step: Step) -> str:
    """``[i/n] config  latency  best so far  time left``, as each candidate finishes."""
    t = step.tried
    got = f"{t.latency_ms:.4f} ms" if t.error is None else f"FAILED {t.error}"
    best = "none yet" if step.best is None else f"{step.best.config} {step.best.latency_ms:.4f} ms"
    return (
        f"[{step.index}/{step.total}] {t.config:<28} {got}; best {best}; "
        f"{max(step.left_s, 0.0):.0f} s left"
    )


@dataclass(frozen=True, slots=True)
class Outcome:
    """What a budgeted run tried, its best (None where every candidate failed) and the
    seconds it spent."""

    tried: tuple[Tried, ...]
    best: Tried | None
    spent_s: float


def run_budgeted(
    configs: list[GemmConfig],
    time_config: Callable[[GemmConfig], float],
    seconds: float,
    *,
    clock: Callable[[], float] = time.monotonic,
    report: Callable[[Step], None] = lambda step: None,
) -> Outcome:
    """Time ``configs`` in order with ``time_config`` (latency in ms; an exception is the
    candidate's error) while ``seconds`` have not passed since the start: the last one
    starts before the budget is spent, so a run ends at most one candidate past it."""
    start = clock()
    tried: list[Tried] = []
    best: Tried | None = None
    for index, config in enumerate(configs, 1):
        if clock() - start >= seconds:
            break
        try:
            ms = float(time_config(config))
        except Exception as err:  # a candidate that fails to build, check or run is skipped
            tried.append(Tried(config.id, error=f"{type(err).__name__}: {err}".splitlines()[0]))
        else:
            tried.append(Tried(config.id, ms))
            if best is None or ms < best.latency_ms:
                best = tried[-1]
        report(Step(index, len(configs), tried[-1], best, seconds - (clock() - start)))
    return Outcome(tuple(tried), best, clock() - start)


class WrongResult(RuntimeError):
    """A candidate's output does not match the float64 reference."""


def gpu_timer(
    shape: GemmShape, seed: int = 0, say: Callable[[str], None] = print
) -> Callable[[GemmConfig], float]:
    """Check, then briefly time, a config of ``shape`` on the visible GPU: the median
    kernel time in ms (``QUICK`` launches, L2 flushed, ``RANK_BACKEND``; where CUPTI
    records nothing, CUDA events for this candidate and the rest, said once through
    ``say``). The inputs are made on first call."""
    cases = []
    backend = [RANK_BACKEND]

    def time_config(config: GemmConfig) -> float:
        from harness.measure.cases import Case
        from harness.measure.kernel_timer import CuptiUnavailable

        if not cases:
            cases.append(Case(shape, seed=seed))
        case = cases[0]
        check = case.check(config, seed=seed + 1)
        if not check.ok:
            raise WrongResult(f"wrong result: {check}")
        try:
            return case.time_tilelang(config, backend=backend[0], **QUICK).median_ms
        except CuptiUnavailable as err:
            if backend[0] == FALLBACK_BACKEND:
                raise
            say(f"{shape.id}: {err}; ranking by CUDA events instead")
            backend[0] = FALLBACK_BACKEND
            return case.time_tilelang(config, backend=backend[0], **QUICK).median_ms

    return time_config


@dataclass(frozen=True, slots=True)
class Pick:
    """The config for a shape, where it came from (one of ``SOURCES``) and, for the cache
    and a fresh tuning, its measured latency, the cache file and every candidate the
    tuning tried (``tried``, in the order it timed them)."""

    config: GemmConfig
    source: str
    latency_ms: float | None = None
    path: Path | None = None
    tried: tuple[Tried, ...] = ()

    def line(self, shape: GemmShape) -> str:
        ms = "" if self.latency_ms is None else f", {self.latency_ms:.4f} ms when tuned"
        where = "" if self.path is None else f", {self.path}"
        return f"{shape.id}: {self.config.id} ({self.source}{ms}{where})"


def _tilelang_version() -> str:
    from harness.measure.device import versions

    return versions()["tilelang"]


def peek(shape: GemmShape, gpu: str, sms: int, cache: CacheFile | None = None) -> Pick:
    """What ``tuned_config`` would answer without tuning: the table, the cache, else the
    heuristic (which a tuning would start from)."""
    check_sms(sms)
    row = lookup(shape, gpu, TUNED_FILE)
    if row is not None:
        return Pick(row.config, TABLE)
    cache = cache or CacheFile.for_gpu(gpu, sms)
    entry = cache.get(shape, _tilelang_version())
    if entry is not None:
        return Pick(entry.config, CACHE, entry.latency_ms, cache.path, entry.tried)
    return Pick(heuristic(shape, sms), HEURISTIC)


def tuned_config(
    shape: GemmShape,
    device,
    *,
    budget: Budget = Budget(),
    cache: CacheFile | None = None,
    say: Callable[[str], None] = print,
    time_config: Callable[[GemmConfig], float] | None = None,
    clock: Callable[[], float] = time.monotonic,
) -> Pick:
    """The config to run ``shape`` with on ``device`` (anything with the GPU's ``name``
    and ``sm_count``, as ``DeviceSpec``): the table's, the cached one, or tuned now within
    ``budget`` and recorded in ``cache`` (default: the device's file in ``cache_dir()``).
    ``say`` gets the progress lines; ``time_config`` times one config (default: on the
    visible GPU, ``gpu_timer``)."""
    gpu, sms = device.name, check_sms(device.sm_count)
    cache = cache or CacheFile.for_gpu(gpu, sms)
    found = peek(shape, gpu, sms, cache)
    if found.source != HEURISTIC:
        return found
    configs = plan(shape, sms, budget.candidates)
    say(
        f"{shape.id}: not in the table for {gpu}; tuning {len(configs)} candidates within "
        f"{budget.seconds:.0f} s (heuristic's pick first)"
    )
    outcome = run_budgeted(
        configs,
        time_config or gpu_timer(shape, say=say),
        budget.seconds,
        clock=clock,
        report=lambda step: say(progress_line(step)),
    )
    if outcome.best is None:
        say(f"{shape.id}: every candidate failed; using the heuristic's pick, nothing recorded")
        return Pick(configs[0], HEURISTIC)
    best = outcome.best
    entry = Entry(
        shape,
        GemmConfig.from_id(best.config),
        best.latency_ms,
        outcome.tried,
        float(budget.seconds),
        outcome.spent_s,
        dt.date.today().isoformat(),
        _tilelang_version(),
    )
    cache.put(entry)
    say(
        f"{shape.id}: {best.config} ({best.latency_ms:.4f} ms), best of {len(outcome.tried)} "
        f"in {outcome.spent_s:.0f} s; recorded in {cache.path}"
    )
    return Pick(entry.config, TUNED, best.latency_ms, cache.path, outcome.tried)
