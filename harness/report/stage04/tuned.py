"""The stage-04 report's Tuned Configs section: the tuned-config table's rows for the
run's GPU, the tuner's log (knob comparisons, brief timings) and what holds the cases
below parity."""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

from harness.measure import metrics
from harness.measure.versus import TRIALS as VERSUS_TRIALS
from harness.report import offtable
from harness.report.plots import Bar, Point
from harness.report.stage04.common import (
    KNOB_CASE,
    Device,
    fill,
    grid,
    lines,
    pct,
    shape_text,
    tile,
    warpgroups,
)
from kernels import GemmConfig, GemmShape
from kernels.tuned import CASES, case_shape


@dataclass(frozen=True, slots=True)
class TunedRow:
    """One case of the tuned-config table, as measured by the tuner."""

    case: str
    shape: GemmShape
    config: str
    tilelang_ms: float
    torch_ms: float
    speedup: float  # median over rounds of torch ms / TileLang ms
    spread: tuple[float, float]  # lowest and highest round's ratio
    sm_clock_mhz: tuple[int, int] | None = None  # lowest and highest during the rounds
    throttled: bool | None = None  # NVML flagged a throttled batch; None: not recorded
    measured: str | None = None  # date of ``tune_gemm --remeasure``'s figures; None: tuning's
    timer: str | None = None  # ``versus``'s timer where its figures are versus's; None: rounds

    @property
    def tflops(self) -> float:
        return metrics.tflops(self.shape.flops, self.tilelang_ms * 1e-3)

    @property
    def torch_tflops(self) -> float:
        return metrics.tflops(self.shape.flops, self.torch_ms * 1e-3)

    @property
    def name(self) -> str:
        return f"{self.case} {self.shape.dtype}"


def tuned_rows(got: Mapping[str, dict]) -> list[TunedRow]:
    """One GPU's rows of the table (shape id -> row, ``kernels.tuned.gpu_entry``), in the
    tuner's case order, fp16 before bf16."""
    rows = []
    for name in CASES:
        for dtype in ("float16", "bfloat16"):
            shape = case_shape(name, dtype)
            row = got.get(shape.id)
            if row is not None:
                ratio = row.get("speedup", row["torch_ms"] / row["tilelang_ms"])
                spread = tuple(row.get("ratio_spread", (ratio, ratio)))
                clocks = row.get("sm_clock_mhz")
                rows.append(
                    TunedRow(
                        name,
                        shape,
                        row["config"],
                        row["tilelang_ms"],
                        row["torch_ms"],
                        ratio,
                        spread,
                        None if not clocks else (min(clocks), max(clocks)),
                        row.get("throttled"),
                        row.get("measured"),
                        row.get("timer"),
                    )
                )
    return rows


def roofline_points(
    rows: Sequence[TunedRow], records: Sequence[offtable.Record] = ()
) -> list[Point]:
    """Each tuned case's TileLang and torch.matmul throughput at its intensity, and each
    timed shape of the off-table ``records`` (median latencies over their rounds)."""
    points = []
    for r in rows:
        ai = metrics.arithmetic_intensity(r.shape.flops, r.shape.min_bytes)
        label = f"{r.case} {'f16' if r.shape.dtype == 'float16' else 'bf16'}"
        points.append(Point(label, ai, r.tflops, "TileLang"))
        points.append(Point(label, ai, r.torch_tflops, "torch.matmul"))
    for record in records:
        for r in record.rows:
            if not r.measured:
                continue
            shape = GemmShape(r.m, r.n, r.k, r.dtype, r.layout)
            ai = metrics.arithmetic_intensity(shape.flops, shape.min_bytes)
            for kind, samples in (("TileLang", r.kernel_ms), ("torch.matmul", r.torch_ms)):
                tflops = metrics.tflops(shape.flops, statistics.median(samples) * 1e-3)
                points.append(Point(r.shape, ai, tflops, f"{kind} (off-table)"))
    return points


def sweep_bars(log: Sequence[dict], shape: GemmShape) -> list[Bar]:
    """Brief timings of every config the tuner ranked for ``shape`` (its JSONL log)."""
    return [
        Bar(r["config"], r["tflops"]) for r in log if r.get("shape") == shape.id and "quick_ms" in r
    ]


# Knobs of the search space, each as the config with that knob undone: a config and its
# twin differ in that knob alone.
KNOBS = {
    "shared-memory epilogue (_e)": lambda c: replace(c, smem_epilogue=False),
    "swizzled block order (_w)": lambda c: replace(c, swizzle=0),
    "persistent grid (_p)": lambda c: replace(c, persistent=0),
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


def _range(changes: Sequence[float]) -> str:
    lo, hi = min(changes), max(changes)
    return pct(lo) if f"{lo:.3f}" == f"{hi:.3f}" else f"{pct(lo)} to {pct(hi)}"


@dataclass(frozen=True, slots=True)
class Tuned:
    """What the Tuned Configs section is drawn from: the table's rows for the GPU and the
    SM count it records, the tuner's log (its meta line and records; may be empty) and
    the plots' file names."""

    rows: Sequence[TunedRow]
    gpu: str
    sm_count: int
    meta: Mapping = field(default_factory=dict)
    log: Sequence[dict] = ()
    plots: Mapping[str, str] = field(default_factory=dict)
    # Off-table measurements (``python3 -m benchmarks.offtable --json``), each its own table.
    offtable: Sequence[offtable.Record] = ()

    @property
    def device(self) -> Device:
        return Device.named(self.gpu, self.sm_count)

    def row(self, case: str, dtype: str = "float16") -> TunedRow | None:
        shape = case_shape(case, dtype)
        return next((r for r in self.rows if r.shape == shape), None)


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
    if winner is None or not tuned.log:
        return none
    effect = next((e for e in knob_effects(tuned.log, winner.shape) if e.knob == ASYNC), None)
    if effect is None:
        return none
    change, best, _ = effect.fastest
    win = GemmConfig.from_id(winner.config)
    like_winner = [
        p[0] for p in effect.pairs if tile(p[1]) == tile(win) and p[1].num_stages == win.num_stages
    ]
    return {
        **none,
        "async_best": best.id,
        "async_best_change": pct(change),
        "async_best_warpgroups": warpgroups(best),
        "async_tile": f"{tile(win)} ({win.num_stages} stages)" if like_winner else None,
        "async_tile_changes": _range(like_winner) if like_winner else None,
        "async_trails": bool(like_winner) and statistics.median(like_winner) > 0,
    }


def _limits(tuned: Tuned, effects: Sequence[KnobEffect]) -> str:
    winner = tuned.row(KNOB_CASE)
    shape = winner.shape
    win = GemmConfig.from_id(winner.config)
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
    tiles = grid(shape, win)
    return fill(
        "limits",
        compute_below=", ".join(compute_below) or None,
        knob_shape=shape_text(shape),
        tile_ranking=ranking,
        largest_gain=min(gains, key=lambda e: e.median).knob if gains else None,
        tilelang=tuned.meta.get("tilelang", "?"),
        winner=winner.config,
        waves_tiles=tiles,
        sms=tuned.sm_count,
        waves=f"{tiles / tuned.sm_count:.1f}",
        persistent_change=None if persistent is None else pct(persistent.median),
        throttled=", ".join(
            f"{r.name} ({r.sm_clock_mhz[0]}-{r.sm_clock_mhz[1]} MHz)" for r in throttled
        )
        or None,
        widest_spread=None
        if widest is None
        else f"{widest.spread[0]:.3f}-{widest.spread[1]:.3f} ({widest.name})",
        **async_values(tuned),
    )


def _offtable_part(record: offtable.Record) -> str:
    meta = record.meta
    return fill(
        "offtable_part",
        command=meta.get("command", "python3 -m benchmarks.offtable"),
        date=meta.get("date", ""),
        rounds=meta.get("rounds", "?"),
        timer=meta.get("timer", "?"),
        first_use=bool(meta.get("first_use")),
        table="\n".join(offtable.table_lines(record)),
    )


def render_tuned(tuned: Tuned) -> str:
    """Tuned Configs: the table of every case, which reach parity, the effect of each knob
    and what holds the rest back (with the tuner's log), and the plots."""
    head = (
        "| case | M | N | K | dtype | layout | best config | TileLang ms | torch ms | speedup "
        "| rounds' range | TFLOPS |"
    )
    table = [head, "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in tuned.rows:
        sh = r.shape
        table.append(
            f"| {r.case} | {sh.m} | {sh.n} | {sh.k} | {sh.dtype} | {sh.layout} | `{r.config}` "
            f"| {r.tilelang_ms:.4f} | {r.torch_ms:.4f} | {r.speedup:.3f} "
            f"| {r.spread[0]:.3f}-{r.spread[1]:.3f} | {r.tflops:.1f} |"
        )
    winner = tuned.row(KNOB_CASE)
    effects = knob_effects(tuned.log, winner.shape) if winner and tuned.log else []
    effect_lines = []
    for e in effects:
        change, config, ms = e.fastest
        effect_lines.append(
            {
                "knob": e.knob,
                "median": pct(e.median),
                "pairs": len(e.pairs),
                "config": config.id,
                "ms": f"{ms:.4f}",
                "change": pct(change),
            }
        )
    meta = tuned.meta
    sweep = tuned.plots.get("sweep")
    return fill(
        "tuned",
        gpu=tuned.gpu,
        command=meta.get("command", "python3 -m benchmarks.tune_gemm"),
        date=meta.get("date", ""),
        top=meta.get("top"),
        rounds=meta.get("rounds"),
        round_launches=meta.get("round_launches"),
        versus_rows=sum(1 for r in tuned.rows if r.timer) or None,
        remeasured_rows=sum(1 for r in tuned.rows if r.measured),
        retuned_rows=sum(1 for r in tuned.rows if r.timer and not r.measured),
        versus_timers=", ".join(sorted({r.timer for r in tuned.rows if r.timer})),
        rows_count=len(tuned.rows),
        versus_trials=VERSUS_TRIALS,
        table="\n".join(table),
        parity=", ".join(r.name for r in tuned.rows if r.speedup >= 1.0) or "none",
        below=", ".join(f"{r.name} ({r.speedup:.3f})" for r in tuned.rows if r.speedup < 1.0)
        or "none",
        effects=lines("knob_line", effect_lines),
        knob_shape=None if winner is None else shape_text(winner.shape),
        limits=_limits(tuned, effects) if effects else None,
        offtable="\n\n".join(_offtable_part(r) for r in tuned.offtable) or None,
        sweep_png=sweep,
        sweep_shape=shape_text(case_shape(KNOB_CASE, "float16")).split()[0],
        roofline_png=tuned.plots.get("roofline"),
        roofline_caption="Roofline with the tuned cases: TileLang (o) and torch.matmul (x)"
        + (", and the first set of shapes nobody tuned (hollow o, +)" if tuned.offtable else ""),
    )
