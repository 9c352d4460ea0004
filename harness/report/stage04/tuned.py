"""The stage-04 report's Tuned Configs section: the tuned-config table's rows for the
run's GPU, the re-tunes since, the off-table records and the plots' points; what it
reads off the tuner's log (knob comparisons, what holds the cases below parity) is
``knobs``."""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from harness.measure import metrics
from harness.measure.versus import TRIALS as VERSUS_TRIALS
from harness.report import offtable
from harness.report.plots import Bar, Point
from harness.report.stage04.common import KNOB_CASE, Device, fill, lines, pct, shape_text
from harness.report.stage04.knobs import knob_effects, limits
from kernels import GemmShape
from kernels.tuned import CASES, case_shape, heuristic


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
    placements: int | None = None  # input sets ``versus.placed`` pooled; None: one

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
                        row.get("placements"),
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


@dataclass(frozen=True, slots=True)
class Retune:
    """A focused re-tune's log (``tune_gemm --only``): its command and date, how many
    configs it ranked, and the table rows whose config is one of its winners."""

    command: str
    date: str
    ranked: int
    rows: tuple[str, ...]  # TunedRow.name of each row it set

    @classmethod
    def from_log(cls, path, records: Sequence[dict], rows: Sequence[TunedRow]) -> Retune:
        """From the log's records (``path`` names it in errors): the meta line first,
        then a ``winner`` record per case it tuned."""
        meta = next((r["meta"] for r in records if "meta" in r), None)
        if meta is None or "command" not in meta:
            raise ValueError(f"{path}: no meta line with the tuner's command")
        winners = {r["shape"]: r["winner"] for r in records if "winner" in r}
        if not winners:
            raise ValueError(f"{path}: no winner records (a tune_gemm --jsonl log)")
        set_here = tuple(
            r.name for r in rows if winners.get(r.shape.id, {}).get("config") == r.config
        )
        ranked = max(w.get("candidates", 0) for w in winners.values())
        return cls(meta["command"], meta.get("date", ""), ranked, set_here)


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
    # Focused re-tunes since the log's run, each with the rows it set.
    retunes: Sequence[Retune] = ()

    @property
    def device(self) -> Device:
        return Device.named(self.gpu, self.sm_count)

    def row(self, case: str, dtype: str = "float16") -> TunedRow | None:
        shape = case_shape(case, dtype)
        return next((r for r in self.rows if r.shape == shape), None)


def _heuristic_now(row: offtable.ShapeResult, sms: int) -> str:
    return heuristic(GemmShape(row.m, row.n, row.k, row.dtype, row.layout), sms).id


def _offtable_part(record: offtable.Record) -> str:
    meta = record.meta
    since = offtable.picks_since(record, _heuristic_now)
    return fill(
        "offtable_part",
        command=meta.get("command", "python3 -m benchmarks.offtable"),
        date=meta.get("date", ""),
        rounds=meta.get("rounds", "?"),
        timer=meta.get("timer", "?"),
        first_use=bool(meta.get("first_use")),
        table="\n".join(offtable.table_lines(record)),
        changed="; ".join(f"`{shape}` now `{config}`" for shape, config in since.items()) or None,
        changed_count=len(since),
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
    placed = [r for r in tuned.rows if r.placements]
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
        placed_rows=len(placed) or None,
        placements=", ".join(str(n) for n in sorted({r.placements for r in placed})),
        table="\n".join(table),
        parity=", ".join(r.name for r in tuned.rows if r.speedup >= 1.0) or "none",
        below=", ".join(f"{r.name} ({r.speedup:.3f})" for r in tuned.rows if r.speedup < 1.0)
        or "none",
        effects=lines("knob_line", effect_lines),
        knob_shape=None if winner is None else shape_text(winner.shape),
        limits=limits(tuned, effects) if effects else None,
        offtable="\n\n".join(_offtable_part(r) for r in tuned.offtable) or None,
        retunes=lines(
            "retune_line",
            [
                {
                    "command": r.command,
                    "date": r.date,
                    "ranked": r.ranked,
                    "rows": ", ".join(r.rows) or "none still in the table",
                }
                for r in tuned.retunes
            ],
        )
        or None,
        sweep_png=sweep,
        sweep_shape=shape_text(case_shape(KNOB_CASE, "float16")).split()[0],
        roofline_png=tuned.plots.get("roofline"),
        roofline_caption="Roofline with the tuned cases: TileLang (o) and torch.matmul (x)"
        + (", and the first set of shapes nobody tuned (hollow o, +)" if tuned.offtable else ""),
    )
