"""The stage-04 markdown report: the prose is ``templates/stage04.md``, every figure comes
from the data (the sweep's rows, the tuned-config table, the tuner's log). Pure: no GPU,
no IO apart from reading the template (the plots it embeds are drawn by
``harness.report.plots`` from the same data)."""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

from harness.measure import metrics
from harness.measure.correctness import TOLERANCE
from harness.report import template
from harness.report.plots import Bar, Point
from kernels import GemmConfig, GemmShape
from kernels.gemm import ELEMENT_BYTES, MMA_ALIGN, SM90_SMEM_LIMIT, WARPGROUP
from kernels.tuned import CASES, H200_SMS, case_shape

BASELINE = GemmConfig()
# The case whose tuner log the knob comparisons and the per-config plot are drawn from.
KNOB_CASE = "square4096"
TABLE_HEAD = (
    "M",
    "N",
    "K",
    "dtype",
    "layout",
    "block_M",
    "block_N",
    "block_K",
    "threads",
    "stages",
    "torch ms",
    "tilelang ms",
    "TFLOPS",
    "speedup",
    "correct",
)


def fmt_optional(x, spec: str) -> str:
    """``format(x, spec)``, or ``-`` for a missing value."""
    return "-" if x is None else format(x, spec)


def _pct(x: float) -> str:
    return f"{100 * x:+.1f}%"


def _sci(x: float) -> str:
    """``2e-3`` rather than ``2e-03``."""
    mantissa, exponent = f"{x:.0e}".split("e")
    return f"{mantissa}e{int(exponent)}"


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def _pieces() -> Mapping[str, str]:
    return template.load("stage04")


def _fill(name: str, **values) -> str:
    # A piece ends where its text ends: a conditional part at its end keeps its line break.
    return template.fill(_pieces()[name], values).rstrip("\n")


def _lines(name: str, items: Sequence[Mapping]) -> str:
    return "\n".join(_fill(name, **item) for item in items)


def _best(rows):
    timed = [r for r in rows if r.tilelang_ms is not None and (r.check is None or r.check.ok)]
    return min(timed, key=lambda r: r.tilelang_ms) if timed else None


def _by_shape(results) -> dict:
    groups: dict = {}
    for r in results:
        groups.setdefault(r.shape, []).append(r)
    return groups


def _tile(c: GemmConfig) -> str:
    return f"{c.block_m}x{c.block_n}x{c.block_k}"


def _grid(shape: GemmShape, c: GemmConfig) -> int:
    """Output tiles the config launches for (times its K splits)."""
    return math.ceil(shape.m / c.block_m) * math.ceil(shape.n / c.block_n) * c.split_k


def _reuse(c: GemmConfig) -> float:
    """FLOPs per byte a block loads per K step: 2*bm*bn*bk / ((bm + bn) * bk * 2 B)."""
    return 2 * c.block_m * c.block_n / ((c.block_m + c.block_n) * ELEMENT_BYTES)


def _warpgroups(c: GemmConfig) -> str:
    return _plural(c.threads // WARPGROUP, "consumer warpgroup")


def config_cells(r) -> list[str]:
    """block_M, block_N, block_K, threads and stages of a row: its config's, the fields
    asked for when the validator rejected them, or dashes."""
    c = r.config
    if c is not None:
        return [str(x) for x in (c.block_m, c.block_n, c.block_k, c.threads, c.num_stages)]
    asked = r.requested or {}
    names = ("block_m", "block_n", "block_k", "threads", "num_stages")
    return [str(asked.get(name, "-")) for name in names]


def requested_id(asked: Mapping[str, object]) -> str:
    """A config id (``b128x128x32_t128_s3``, ``_w8`` for a swizzle) of fields that the
    validator may have rejected; ``?`` for a field not given."""
    get = {k: asked.get(k, "?") for k in ("block_m", "block_n", "block_k", "threads")}
    text = "b{block_m}x{block_n}x{block_k}_t{threads}".format_map(get)
    text += f"_s{asked.get('num_stages', '?')}"
    return text + (f"_w{asked['swizzle']}" if asked.get("swizzle") else "")


def config_label(r) -> str:
    """The config's id, or the fields asked for when the validator rejected them."""
    return r.config.id if r.config is not None else requested_id(r.requested or {})


def short_error(error: str, width: int = 160) -> str:
    """The first line of an error, cut to ``width`` characters: a compile error runs to
    pages; the JSON lines keep all of it."""
    first = error.strip().splitlines()[0] if error.strip() else "error"
    return first if len(first) <= width else first[: width - 3] + "..."


def benchmark_table(results: Sequence) -> str:
    lines = ["| " + " | ".join(TABLE_HEAD) + " |", "|" + "---|" * len(TABLE_HEAD)]
    best = {shape: _best(rows) for shape, rows in _by_shape(results).items()}
    for r in results:
        mark = " **best**" if r is best.get(r.shape) and r.config is not None else ""
        if r.failed:
            correct = "**FAILED**"
        else:
            correct = "-" if r.check is None else ("yes" if r.check.ok else "**NO**")
        cells = [
            r.shape.m,
            r.shape.n,
            r.shape.k,
            r.shape.dtype,
            r.shape.layout,
            *config_cells(r),
            f"{r.torch_ms:.4f}",
            fmt_optional(r.tilelang_ms, ".4f") + mark,
            fmt_optional(r.tflops, ".1f"),
            fmt_optional(r.speedup, ".2f"),
            correct,
        ]
        lines.append("| " + " | ".join(str(x) for x in cells) + " |")
    return "\n".join(lines)


def _row_values(r) -> dict:
    return {
        "shape": r.shape.id,
        "config": config_label(r),
        "tilelang_ms": fmt_optional(r.tilelang_ms, ".4f"),
        "torch_ms": f"{r.torch_ms:.4f}",
        "tflops": fmt_optional(r.tflops, ".1f"),
        "speedup": fmt_optional(r.speedup, ".2f"),
        "correct": "-" if r.check is None else ("yes" if r.check.ok else "NO"),
        "check": "-" if r.check is None else str(r.check),
        "error": None if r.error is None else short_error(r.error),
    }


def _correctness(results) -> str:
    checked = [r for r in results if r.check is not None]
    count = sum(r.failed for r in results)
    failed = _plural(count, "config") if count else None
    if not checked:
        return _fill("correctness_all_failed" if failed else "correctness_none_ran", failed=failed)
    worst: dict[str, float] = {}
    for r in checked:
        worst[r.shape.dtype] = max(worst.get(r.shape.dtype, 0.0), r.check.rel_error)
    return _fill(
        "correctness_checked",
        ok=sum(r.check.ok for r in checked),
        checked=len(checked),
        failed=failed,
        tol_float16=_sci(TOLERANCE["float16"]),
        tol_bfloat16=_sci(TOLERANCE["bfloat16"]),
        worst=", ".join(f"{d}: {e:.1e}" for d, e in sorted(worst.items())),
    )


def _roof(shape: GemmShape) -> tuple[float, float, float, float]:
    """Intensity, ridge, peak and roof (TFLOP/s) of ``shape`` on the H200's datasheet."""
    peak = metrics.H200_PEAK_TFLOPS[shape.dtype]
    ai = metrics.arithmetic_intensity(shape.flops, shape.min_bytes)
    return (
        ai,
        peak / metrics.H200_HBM_TBPS,
        peak,
        metrics.roofline_tflops(ai, peak, metrics.H200_HBM_TBPS),
    )


def _bottleneck(results) -> dict:
    lines, guesses = [], []
    for shape, rows in _by_shape(results).items():
        best = _best(rows)
        ms = best.tilelang_ms if best else rows[0].torch_ms
        ai, ridge, peak, roof = _roof(shape)
        achieved = metrics.tflops(shape.flops, ms * 1e-3)
        percent = f"{100 * achieved / roof:.1f}"
        lines.append(
            {
                "shape": shape.id,
                "intensity": f"{ai:.0f}",
                "ridge": f"{ridge:.0f}",
                "peak": f"{peak:.0f}",
                "bandwidth": metrics.H200_HBM_TBPS,
                "bound": "compute-bound" if ai >= ridge else "memory-bound",
                "roof": f"{roof:.0f}",
                "best": None if best is None else best.config.id,
                "achieved": f"{achieved:.1f}",
                "percent": percent,
                "torch_tflops": f"{rows[0].torch_tflops:.1f}",
            }
        )
        if best is None:
            continue
        c = best.config
        tiles = _grid(shape, c)
        piece = (
            "guess_underfilled"
            if tiles < H200_SMS
            else ("guess_compute" if ai >= ridge else "guess_memory")
        )
        guesses.append(
            _fill(
                piece,
                shape=shape.id,
                tiles=_plural(tiles, "tile"),
                tile=_tile(c),
                sms=H200_SMS,
                waves=f"{tiles / H200_SMS:.1f}",
                k_steps=math.ceil(shape.k / (c.block_k * c.split_k)),
                block_k=c.block_k,
                speedup=fmt_optional(best.speedup, ".2f"),
                percent=percent,
            )
        )
    return {
        "bottleneck_lines": _lines("bottleneck_line", lines),
        "guess_lines": "\n".join(guesses)
        or "- no kernel was timed, so there is nothing to guess from",
        "tiles_compared": _tiles_compared(results),
    }


def _tiles_compared(results) -> str | None:
    """The baseline's tile against the best config of the largest shape, when both ran."""
    groups = _by_shape(results)
    if not groups:
        return None
    shape = max(groups, key=lambda s: s.flops)
    best = _best(groups[shape])
    if best is None or best.config == BASELINE or _tile(best.config) == _tile(BASELINE):
        return None
    c = best.config
    math_ratio = (c.block_m * c.block_n * c.block_k) / (
        BASELINE.block_m * BASELINE.block_n * BASELINE.block_k
    )
    return _fill(
        "tiles_compared",
        base_tile=_tile(BASELINE),
        base_warpgroups=_warpgroups(BASELINE),
        base_steps=BASELINE.block_k // MMA_ALIGN,
        mma_k=MMA_ALIGN,
        base_reuse=f"{_reuse(BASELINE):.0f}",
        shape=shape.id,
        best=c.id,
        best_tile=_tile(c),
        best_warpgroups=_warpgroups(c),
        math_ratio=f"{math_ratio:g}",
        best_reuse=f"{_reuse(c):.0f}",
    )


def _question_values(results) -> dict:
    groups = _by_shape(results)
    configs = {r.config for r in results if r.config is not None} or {BASELINE}
    tiles = sorted({(c.block_m, c.block_n): _reuse(c) for c in configs}.items())
    evidence, block_k = [], None
    for shape, rows in groups.items():
        per_tile: dict[str, float] = {}
        for r in rows:
            if r.speedup is not None and (r.check is None or r.check.ok):
                key = f"{r.config.block_m}x{r.config.block_n}"
                per_tile[key] = max(per_tile.get(key, 0.0), r.speedup)
        if per_tile:
            cells = ", ".join(f"{t} {s:.2f}" for t, s in per_tile.items())
            evidence.append(f"`{shape.id}`: {cells}")
    if groups:
        shape = max(groups, key=lambda s: s.flops)
        per_k: dict[int, float] = {}
        for r in groups[shape]:
            if r.tflops is not None and (r.check is None or r.check.ok):
                per_k[r.config.block_k] = max(per_k.get(r.config.block_k, 0.0), r.tflops)
        if len(per_k) > 1:
            cells = ", ".join(f"block_K {k} {t:.1f} TFLOP/s" for k, t in sorted(per_k.items()))
            block_k = f"at `{shape.id}`, {cells}"
    underfilled = []
    for shape, rows in groups.items():
        grids = [_grid(shape, r.config) for r in rows if r.config is not None]
        if grids and max(grids) < H200_SMS:
            underfilled.append(shape.id)
    return {
        "mma_k": MMA_ALIGN,
        "smem_kib": SM90_SMEM_LIMIT // 1024,
        "block_k_evidence": block_k,
        "reuse_per_tile": ", ".join(f"{m}x{n} gives {x:.0f}" for (m, n), x in tiles),
        "reuse_evidence": "; ".join(evidence) or None,
        "underfilled": ", ".join(f"`{s}`" for s in underfilled) or None,
    }


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

    @property
    def tflops(self) -> float:
        return metrics.tflops(self.shape.flops, self.tilelang_ms * 1e-3)

    @property
    def torch_tflops(self) -> float:
        return metrics.tflops(self.shape.flops, self.torch_ms * 1e-3)

    @property
    def name(self) -> str:
        return f"{self.case} {self.shape.dtype}"


def tuned_rows(table: Mapping[str, Mapping[str, dict]], gpu: str) -> list[TunedRow]:
    """The table's rows for ``gpu``, in the tuner's case order, fp16 before bf16."""
    rows = []
    got = table.get(gpu, {})
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
                    )
                )
    return rows


def roofline_points(rows: Sequence[TunedRow]) -> list[Point]:
    points = []
    for r in rows:
        ai = metrics.arithmetic_intensity(r.shape.flops, r.shape.min_bytes)
        label = f"{r.case} {'f16' if r.shape.dtype == 'float16' else 'bf16'}"
        points.append(Point(label, ai, r.tflops, "TileLang"))
        points.append(Point(label, ai, r.torch_tflops, "torch.matmul"))
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
    "hand-written async pipeline (_a)": lambda c: replace(c, async_mma=False),
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
    return _pct(lo) if f"{lo:.3f}" == f"{hi:.3f}" else f"{_pct(lo)} to {_pct(hi)}"


@dataclass(frozen=True, slots=True)
class Tuned:
    """What the Tuned Configs section is drawn from: the table's rows for the GPU, the
    tuner's log (its meta line and records; may be empty) and the plots' file names."""

    rows: Sequence[TunedRow]
    gpu: str
    meta: Mapping = field(default_factory=dict)
    log: Sequence[dict] = ()
    plots: Mapping[str, str] = field(default_factory=dict)

    def row(self, case: str, dtype: str = "float16") -> TunedRow | None:
        shape = case_shape(case, dtype)
        return next((r for r in self.rows if r.shape == shape), None)


def _async_values(tuned: Tuned | None) -> dict:
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
        p[0]
        for p in effect.pairs
        if _tile(p[1]) == _tile(win) and p[1].num_stages == win.num_stages
    ]
    return {
        **none,
        "async_best": best.id,
        "async_best_change": _pct(change),
        "async_best_warpgroups": _warpgroups(best),
        "async_tile": f"{_tile(win)} ({win.num_stages} stages)" if like_winner else None,
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
        per_tile[_tile(config)] = min(per_tile.get(_tile(config), math.inf), ms)
    fastest = min(per_tile.values())
    ranking = ", ".join(
        f"{tile} {'(fastest)' if ms == fastest else _pct(ms / fastest - 1)}"
        for tile, ms in sorted(per_tile.items(), key=lambda kv: kv[1])
    )
    gains = [e for e in effects if e.median < 0]
    persistent = next((e for e in effects if e.knob == PERSISTENT), None)
    compute_below = []
    for r in tuned.rows:
        ai, ridge, _, _ = _roof(r.shape)
        if ai >= ridge and r.speedup < 1.0:
            compute_below.append(f"{r.name} at {r.speedup:.3f}")
    throttled = [r for r in tuned.rows if r.throttled and r.sm_clock_mhz]
    widest = max(throttled, key=lambda r: r.spread[1] - r.spread[0], default=None)
    tiles = _grid(shape, win)
    return _fill(
        "limits",
        compute_below=", ".join(compute_below) or None,
        knob_shape=_shape_text(shape),
        tile_ranking=ranking,
        largest_gain=min(gains, key=lambda e: e.median).knob if gains else None,
        tilelang=tuned.meta.get("tilelang", "?"),
        winner=winner.config,
        waves_tiles=tiles,
        sms=H200_SMS,
        waves=f"{tiles / H200_SMS:.1f}",
        persistent_change=None if persistent is None else _pct(persistent.median),
        throttled=", ".join(
            f"{r.name} ({r.sm_clock_mhz[0]}-{r.sm_clock_mhz[1]} MHz)" for r in throttled
        )
        or None,
        widest_spread=None
        if widest is None
        else f"{widest.spread[0]:.3f}-{widest.spread[1]:.3f} ({widest.name})",
        **_async_values(tuned),
    )


def _shape_text(shape: GemmShape) -> str:
    return f"{shape.m}x{shape.n}x{shape.k} {shape.dtype}"


def render_tuned(tuned: Tuned) -> str:
    """Tuned Configs: the table of every case, which reach parity, the effect of each knob
    and what holds the rest back (with the tuner's log), and the plots."""
    head = (
        "| case | M | N | K | dtype | layout | best config | TileLang ms | torch ms | speedup "
        "| rounds' range | TFLOPS |"
    )
    lines = [head, "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in tuned.rows:
        sh = r.shape
        lines.append(
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
                "median": _pct(e.median),
                "pairs": len(e.pairs),
                "config": config.id,
                "ms": f"{ms:.4f}",
                "change": _pct(change),
            }
        )
    meta = tuned.meta
    sweep = tuned.plots.get("sweep")
    return _fill(
        "tuned",
        gpu=tuned.gpu,
        command=meta.get("command", "python3 -m benchmarks.tune_gemm"),
        date=meta.get("date", ""),
        top=meta.get("top"),
        rounds=meta.get("rounds"),
        round_launches=meta.get("round_launches"),
        table="\n".join(lines),
        parity=", ".join(r.name for r in tuned.rows if r.speedup >= 1.0) or "none",
        below=", ".join(f"{r.name} ({r.speedup:.3f})" for r in tuned.rows if r.speedup < 1.0)
        or "none",
        effects=_lines("knob_line", effect_lines),
        knob_shape=None if winner is None else _shape_text(winner.shape),
        limits=_limits(tuned, effects) if effects else None,
        sweep_png=sweep,
        sweep_shape=_shape_text(case_shape(KNOB_CASE, "float16")).split()[0],
        roofline_png=tuned.plots.get("roofline"),
    )


def render_stage04(
    results: Sequence, meta: Mapping[str, object], title: str, tuned: Tuned | None = None
) -> str:
    """The report from the stage template: baseline, correctness, table, data flow,
    bottleneck guess, next experiments and the stage's questions; with ``tuned``, a
    Tuned Configs section."""
    groups = _by_shape(results)
    best_lines = [_row_values(b) for b in map(_best, groups.values()) if b is not None]
    failed = [_row_values(r) for r in results if r.failed]
    decode_below = []
    if tuned is not None:
        # Skinny M is the decode regime (kernels.tuned.candidates).
        decode_below = [
            f"{r.name} at {r.speedup:.3f}" for r in tuned.rows if r.shape.m <= 64 and r.speedup < 1
        ]
    values = {
        "title": title,
        **{k: meta.get(k) for k in ("gpu", "tilelang", "torch", "cuda", "date", "backend")},
        **{k: meta.get(k) for k in ("warmup", "repeat", "command")},
        "run": meta.get("run"),
        "base_block_m": BASELINE.block_m,
        "base_block_n": BASELINE.block_n,
        "base_block_k": BASELINE.block_k,
        "base_threads": BASELINE.threads,
        "base_stages": BASELINE.num_stages,
        "baseline_lines": _lines(
            "baseline_line", [_row_values(r) for r in results if r.config == BASELINE]
        ),
        "correctness": _correctness(results),
        "table": benchmark_table(results),
        "failed_lines": _lines("failed_line", failed),
        "best_lines": _lines("best_line", best_lines),
        "tuned": None if tuned is None else render_tuned(tuned),
        **_bottleneck(results),
        **_async_values(tuned),
        "decode_below": ", ".join(decode_below) or None,
        **_question_values(results),
    }
    return template.fill(_pieces()[template.MAIN], values)
