"""``python3 -m families.grouped_gemm.cli --moe``: every layout the asv family tracks,
checked against float64 and timed with its baseline, one row each, and the markdown table
of them (``--markdown``). Ctrl-C keeps the rows already measured, and the table says the
sweep stopped early."""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from pathlib import Path

from families.grouped_gemm.bench import GroupedGemm, moe_shape
from families.grouped_gemm.kernel import GroupedGemmShape, heuristic
from harness.cli import progress_bar, sweep_status
from harness.measure import metrics


@dataclass(frozen=True, slots=True)
class Layout:
    """One of the asv family's parameter combinations."""

    experts: int
    size: int  # K = N
    routing: str
    dtype: str

    @property
    def shape(self) -> GroupedGemmShape:
        return moe_shape(self.experts, self.size, self.routing, self.dtype)

    @property
    def label(self) -> str:
        return f"{self.experts} experts, K=N={self.size}, {self.routing}, {self.dtype}"


def layouts() -> list[Layout]:
    """The asv family's combinations, in its parameter order."""
    return [Layout(*p) for p in itertools.product(*GroupedGemm.params)]


@dataclass(frozen=True, slots=True)
class Measured:
    """One layout's row: its baseline and why (where it is the fallback), the kernel
    config, both median latencies (None where it failed) and the correctness verdict."""

    layout: Layout
    baseline: str
    why: str
    base_ms: float | None
    config: str
    kernel_ms: float | None
    correct: str
    error: str | None = None

    @property
    def speedup(self) -> float | None:
        if self.base_ms is None or self.kernel_ms is None:
            return None
        return metrics.speedup(self.kernel_ms, self.base_ms)

    @property
    def tflops(self) -> float | None:
        if self.kernel_ms is None:
            return None
        return metrics.tflops(self.layout.shape.flops, self.kernel_ms * 1e-3)


def line(row: Measured) -> str:
    """A row as one console line."""
    if row.kernel_ms is None:
        return f"{row.layout.label}: {row.config} FAILED: {row.error}"
    return (
        f"{row.layout.label}: {row.config} {row.kernel_ms:.4f} ms ({row.tflops:.0f} TFLOPS), "
        f"{row.baseline} {row.base_ms:.4f} ms, speedup {row.speedup:.2f}, {row.correct}"
    )


def markdown(rows: list[Measured], on: str, timing: str, total: int) -> str:
    """The sweep's table: one row per layout, the fallbacks' reasons under it."""
    out = [
        "# Grouped GEMM (MoE layers) against its baseline",
        "",
        f"Measured on {on} by `python3 -m families.grouped_gemm.cli --moe` ({timing}). "
        "Rows: 4096 tokens routed top-2 (8192 rows); skewed routing leaves the last eighth "
        "of the experts empty. speedup = baseline latency / kernel latency; TFLOPS = "
        "2 * sum(M_g) * N * K / s / 1e12. Each kernel was checked against a float64 "
        "reference per expert on a NaN-poisoned output first.",
        "",
    ]
    if len(rows) < total:
        out += [f"**Interrupted: {len(rows)} of {total} layouts measured.**", ""]
    out += [
        "| experts | K = N | routing | dtype | baseline | baseline ms | config | kernel ms "
        "| TFLOPS | speedup | correct |",
        "|---:|---:|---|---|---|---:|---|---:|---:|---:|---|",
    ]

    def ms(x: float | None) -> str:
        return "failed" if x is None else f"{x:.4f}"

    for r in rows:
        lay = r.layout
        speed = "-" if r.speedup is None else f"{r.speedup:.2f}"
        tf = "-" if r.tflops is None else f"{r.tflops:.0f}"
        correct = r.correct if r.error is None else f"{r.correct} ({r.error})"
        out.append(
            f"| {lay.experts} | {lay.size} | {lay.routing} | {lay.dtype} | {r.baseline} "
            f"| {ms(r.base_ms)} | `{r.config}` | {ms(r.kernel_ms)} | {tf} | {speed} "
            f"| {correct} |"
        )
    whys = sorted({(r.layout.dtype, r.why) for r in rows if r.why})
    if whys:
        out += ["", "Fallback baselines:"]
        out += [f"- {dtype}: {why}" for dtype, why in whys]
    speedups = [r.speedup for r in rows if r.speedup is not None]
    if speedups:
        out += [
            "",
            f"Speedup over {len(speedups)} layouts: median {metrics.median(speedups):.2f}, "
            f"range {min(speedups):.2f}-{max(speedups):.2f}.",
        ]
    return "\n".join(out) + "\n"


def main(args, on: str, measure_rows) -> int:
    """Measure every layout (``measure_rows`` is the CLI's, one config each), print a line
    per layout, write ``args.markdown``; the exit status of a measuring command."""
    from rich.console import Console

    todo = layouts()
    rows: list[Measured] = []
    interrupted = incorrect = failed = False
    console = Console()
    try:
        with progress_bar(console) as bar:
            task = bar.add_task("grouped GEMM layouts", total=len(todo))
            for lay in todo:
                shape = lay.shape
                config = heuristic(shape)
                bar.update(task, description=lay.label)
                try:
                    base, why, (got,), status = measure_rows(args, shape, [config])
                except Exception as err:  # the baseline itself failed: this row, not the sweep
                    first = f"{type(err).__name__}: {err}".splitlines()[0]
                    row = Measured(lay, "-", "", None, config.id, None, "-", first)
                    failed = True
                else:
                    row = Measured(
                        lay,
                        base.name,
                        why,
                        base.median_ms,
                        got.name,
                        got.median_ms,
                        got.correct,
                        got.error,
                    )
                    failed = failed or got.median_ms is None
                    wrong = got.median_ms is not None and not got.correct.startswith("ok")
                    incorrect = incorrect or wrong
                rows.append(row)
                bar.console.print(line(row))
                bar.advance(task)
    except KeyboardInterrupt:
        interrupted = True
        console.print(f"interrupted: keeping the {len(rows)} layouts measured")
    if args.markdown:
        timing = f"{args.backend} timer, {args.warmup} warm-up and {args.repeat} timed launches"
        path = Path(args.markdown)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(markdown(rows, on, timing, len(todo)))
        console.print(f"wrote {path}")
    return sweep_status(interrupted, incorrect, failed)
