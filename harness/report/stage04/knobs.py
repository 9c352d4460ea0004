"""What the stage-04 report's Tuned Configs section reads off the tuner's log and the
table: each knob's effect (a config against its twin without the knob), the hand-written
pipeline's standing against its automatic twin, and the knob case's winner and its grid,
for the account of what holds the cases below parity."""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from harness.report.stage04.common import KNOB_CASE, fill, grid, pct, shape_text, tile, warpgroups
from kernels import GemmConfig, GemmShape

if TYPE_CHECKING:
    from harness.report.stage04.tuned import Tuned


# Knobs of the search space, each as the config with that knob undone: a config and its
# twin differ in that knob alone.
KNOBS = {
    "shared-memory epilogue (_e)": lambda c: replace(c, smem_epilogue=False),
    "swizzled block order (_w)": lambda c: replace(c, swizzle=0),
    # TileLang's persistent grid (T.Persistent) and the hand-written pipeline's
    # persistent form are different loops: each is its own knob.
    "persistent grid (_p)": lambda c: c if c.async_mma else replace(c, persistent=0),
    "hand-written persistent form (_p..._a)": lambda c: (
        replace(c, persistent=0) if c.async_mma else c
    ),
    "row/col warp policy (_pr/_pc)": lambda c: replace(c, policy="square"),
    "split K (_k)": lambda c: replace(c, split_k=1),
    "stream-K (_sk)": lambda c: replace(c, stream_k=0),
    "hand-written async pipeline (_a)": lambda c: replace(c, async_mma=False),
    "two-block clusters (_mb/_ma)": lambda c: replace(c, multicast=""),
}
ASYNC = "hand-written async pipeline (_a)"
PERSISTENT = "persistent grid (_p)"


@dataclass(frozen=True, slots=True)
class KnobEffect:
    """Brief timings of every config with a knob against its twin without it."""

    knob: str
    pairs: tuple[tuple[float, GemmConfig, float], ...]  # (relative change, config, ms)

    @property
    def median(self) -> float:
        return statistics.median(p[0] for p in self.pairs)

    @property
    def fastest(self) -> tuple[float, GemmConfig, float]:
        return min(self.pairs, key=lambda p: p[2])


def brief_timings(log: Sequence[dict], shape: GemmShape) -> dict[GemmConfig, float]:
    """The tuner's brief timing (ms) of every config it ranked at ``shape``."""
    return {
        GemmConfig.from_id(r["config"]): r["quick_ms"]
        for r in log
        if r.get("shape") == shape.id and "quick_ms" in r
    }


def knob_effects(log: Sequence[dict], shape: GemmShape) -> list[KnobEffect]:
    """For each knob the tuner varied at ``shape``: every config with it against its twin
    without it."""
    timed = brief_timings(log, shape)
    out = []
    for name, undo in KNOBS.items():
        pairs = []
        for config, ms in timed.items():
            try:
                twin = undo(config)
            except ValueError:
                continue
            if twin != config and twin in timed:
                pairs.append((ms / timed[twin] - 1, config, ms))
        if pairs:
            out.append(KnobEffect(name, tuple(pairs)))
    return out


def change_range(changes: Sequence[float]) -> str:
    lo, hi = min(changes), max(changes)
    return pct(lo) if f"{lo:.3f}" == f"{hi:.3f}" else f"{pct(lo)} to {pct(hi)}"


def async_values(tuned: Tuned | None) -> dict:
    """The hand-written pipeline against its automatic twin in the tuner's brief timings
    at the knob case: its fastest config, and the pairs with the winner's tile and stage
    count."""
    none = dict.fromkeys(
        (
            "async_best",
            "async_best_change",
            "async_best_warpgroups",
            "async_tile",
            "async_tile_changes",
            "async_trails",
        )
    )
    winner = tuned.row(KNOB_CASE) if tuned else None
    # Where the hand-written pipeline neither trails nor won, it is yet to be confirmed.
    confirm = winner is None or not GemmConfig.from_id(winner.config).async_mma
    if winner is None or not tuned.log:
        return none | {"async_confirm": confirm}
    effect = next((e for e in knob_effects(tuned.log, winner.shape) if e.knob == ASYNC), None)
    if effect is None:
        return none | {"async_confirm": confirm}
    change, best, _ = effect.fastest
    win = GemmConfig.from_id(winner.config)
    like_winner = [
        p[0]
        for p in effect.pairs
        if tile(p[1]) == tile(win)
        and p[1].num_stages == win.num_stages
        and p[1].persistent == win.persistent
    ]
    trails = bool(like_winner) and statistics.median(like_winner) > 0
    return {
        **none,
        "async_best": best.id,
        "async_best_change": pct(change),
        "async_best_warpgroups": warpgroups(best),
        "async_tile": f"{tile(win)} ({win.num_stages} stages)" if like_winner else None,
        "async_tile_changes": change_range(like_winner) if like_winner else None,
        "async_trails": trails,
        "async_confirm": confirm and not trails,
    }


def winner_values(tuned: Tuned | None) -> dict:
    """The knob case's winner and its grid: its waves on the GPU's SMs, the tiles in the
    last one, and whether it is the hand-written pipeline's persistent form (and, with
    fewer than 4 stages, its consumers wait for each batch: ``kernels/gemm_async.py``)."""
    winner = tuned.row(KNOB_CASE) if tuned else None
    if winner is None:
        return dict.fromkeys(
            (
                "winner_id",
                "winner_tiles",
                "winner_sms",
                "winner_waves",
                "winner_last_wave",
                "winner_persistent_async",
                "winner_waits_each",
                "winner_streamk",
                "winner_shape",
                "winner_idle",
            )
        )
    win = GemmConfig.from_id(winner.config)
    tiles = grid(winner.shape, win)
    persistent_async = win.async_mma and bool(win.persistent)
    return {
        "winner_id": winner.config,
        "winner_tiles": tiles,
        "winner_sms": tuned.sm_count,
        "winner_waves": f"{tiles / tuned.sm_count:.1f}",
        "winner_last_wave": tiles % tuned.sm_count or None,
        "winner_persistent_async": persistent_async,
        "winner_waits_each": win.num_stages if persistent_async and win.num_stages < 4 else None,
        # The persistent form's remaining loss: a last wave that leaves SMs idle.
        "winner_streamk": persistent_async and bool(tiles % tuned.sm_count),
        "winner_shape": shape_text(winner.shape),
        "winner_idle": (tuned.sm_count - tiles % tuned.sm_count) % tuned.sm_count or None,
    }


def limits(tuned: Tuned, effects: Sequence[KnobEffect]) -> str:
    winner = tuned.row(KNOB_CASE)
    shape = winner.shape
    timed = brief_timings(tuned.log, shape)
    per_tile: dict[str, float] = {}
    for config, ms in timed.items():
        per_tile[tile(config)] = min(per_tile.get(tile(config), math.inf), ms)
    fastest = min(per_tile.values())
    ranking = ", ".join(
        f"{tile} {'(fastest)' if ms == fastest else pct(ms / fastest - 1)}"
        for tile, ms in sorted(per_tile.items(), key=lambda kv: kv[1])
    )
    gains = [e for e in effects if e.median < 0]
    persistent = next((e for e in effects if e.knob == PERSISTENT), None)
    device = tuned.device
    compute_below = []  # none known without peak figures
    for r in tuned.rows:
        roof = device.roof(r.shape)
        if roof is not None and roof.compute_bound and r.speedup < 1.0:
            compute_below.append(f"{r.name} at {r.speedup:.3f}")
    throttled = [r for r in tuned.rows if r.throttled and r.sm_clock_mhz]
    widest = max(throttled, key=lambda r: r.spread[1] - r.spread[0], default=None)
    return fill(
        "limits",
        compute_below=", ".join(compute_below) or None,
        knob_shape=shape_text(shape),
        tile_ranking=ranking,
        largest_gain=min(gains, key=lambda e: e.median).knob if gains else None,
        tilelang=tuned.meta.get("tilelang", "?"),
        persistent_change=None if persistent is None else pct(persistent.median),
        throttled=", ".join(
            f"{r.name} ({r.sm_clock_mhz[0]}-{r.sm_clock_mhz[1]} MHz)" for r in throttled
        )
        or None,
        widest_spread=None
        if widest is None
        else f"{widest.spread[0]:.3f}-{widest.spread[1]:.3f} ({widest.name})",
        **async_values(tuned),
        **winner_values(tuned),
    )
