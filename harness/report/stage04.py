"""The stage-04 markdown report, rendered from measured rows. Pure: no GPU, no IO (the
plots it embeds are drawn by ``harness.report.plots`` from the same rows)."""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from harness.measure import metrics
from harness.report.plots import Bar, Point
from kernels import GemmConfig, GemmShape
from kernels.tuned import CASES, case_shape

BASELINE = GemmConfig()  # 128x128x32, 128 threads, 3 stages


def fmt_optional(x, spec: str) -> str:
    """``format(x, spec)``, or ``-`` for a missing value."""
    return "-" if x is None else format(x, spec)


def _best(rows):
    timed = [r for r in rows if r.tilelang_ms is not None and (r.check is None or r.check.ok)]
    return min(timed, key=lambda r: r.tilelang_ms) if timed else None


def _by_shape(results) -> dict:
    groups: dict = {}
    for r in results:
        groups.setdefault(r.shape, []).append(r)
    return groups


def benchmark_table(results: Sequence) -> str:
    head = (
        "| M | N | K | dtype | layout | block_M | block_N | block_K | threads | stages "
        "| torch ms | tilelang ms | TFLOPS | x torch | correct |"
    )
    lines = [head, "|" + "---|" * 15]
    best = {shape: _best(rows) for shape, rows in _by_shape(results).items()}
    for r in results:
        c = r.config
        cfg = ["-"] * 5 if c is None else [c.block_m, c.block_n, c.block_k, c.threads, c.num_stages]
        mark = " **best**" if r is best.get(r.shape) and c is not None else ""
        correct = "-" if r.check is None else ("yes" if r.check.ok else "**NO**")
        cells = [
            r.shape.m,
            r.shape.n,
            r.shape.k,
            r.shape.dtype,
            r.shape.layout,
            *cfg,
            f"{r.torch_ms:.4f}",
            fmt_optional(r.tilelang_ms, ".4f") + mark,
            f"{r.tflops:.1f}",
            fmt_optional(r.speedup, ".2f"),
            correct,
        ]
        lines.append("| " + " | ".join(str(x) for x in cells) + " |")
    return "\n".join(lines)


def _correctness(results) -> str:
    checked = [r for r in results if r.check is not None]
    if not checked:
        return "No TileLang kernel ran (the sweep was run without `--run-tilelang`)."
    ok = sum(r.check.ok for r in checked)
    worst: dict[str, float] = {}
    for r in checked:
        worst[r.shape.dtype] = max(worst.get(r.shape.dtype, 0.0), r.check.rel_error)
    worst_txt = ", ".join(f"{d}: {e:.1e}" for d, e in sorted(worst.items()))
    return (
        f"{ok} of {len(checked)} kernels matched the reference. Each kernel ran once on fresh "
        "normal(0, 1) inputs into an output filled with NaN; the result was compared with "
        "the float64 product of the same inputs by relative Frobenius error, and every "
        "output element had to be written. The bound is 2e-3 for fp16 and 1e-2 for bf16: "
        "accumulation is fp32, so the error is the rounding of C to the 16-bit output type. "
        f"Largest relative error per dtype: {worst_txt}."
    )


def _bottleneck(results) -> str:
    out = []
    for shape, rows in _by_shape(results).items():
        best = _best(rows)
        ms = best.tilelang_ms if best else rows[0].torch_ms
        peak = metrics.H200_PEAK_TFLOPS[shape.dtype]
        ai = metrics.arithmetic_intensity(shape.flops, shape.min_bytes)
        ridge = peak / metrics.H200_HBM_TBPS
        roof = metrics.roofline_tflops(ai, peak, metrics.H200_HBM_TBPS)
        achieved = metrics.tflops(shape.flops, ms * 1e-3)
        bound = "compute-bound" if ai >= ridge else "memory-bound"
        who = f"best TileLang config {best.config.id}" if best else "torch.matmul"
        torch_tf = rows[0].torch_tflops
        out.append(
            f"- **{shape.id}**: arithmetic intensity {ai:.0f} FLOP/B (A and B read once, C "
            f"written once) against a ridge of {ridge:.0f} FLOP/B ({peak:.0f} TFLOP/s dense "
            f"over {metrics.H200_HBM_TBPS} TB/s): {bound}, roof {roof:.0f} TFLOP/s. "
            f"The {who} reaches {achieved:.1f} TFLOP/s = {100 * achieved / roof:.1f}% of the "
            f"roof; torch.matmul reaches {torch_tf:.1f} TFLOP/s."
        )
    out.append("")
    out.append(
        "Guess: at 128^3 the grid is a single 128x128 tile on one of 132 SMs, so the run "
        "is launch latency and one block's short K loop; neither roof applies, and only "
        "batching or fusing more work into the launch helps. At 4096^3 the problem is far "
        "right of the ridge, so the kernel should be tensor-core bound; the gap to cuBLAS is "
        "in feeding the tensor cores. The baseline's 128x128x32 tile has one consumer "
        "warpgroup and only two 16-deep wgmma steps per pipeline stage, so barrier waits and "
        "TMA issue are paid often per FLOP, and each loaded element feeds 64 FLOPs. A "
        "128x256x64 tile with two consumer warpgroups does four times the math per stage and "
        "85 FLOPs per loaded element; rows with larger tiles or deeper pipelines show how "
        "much of the gap that closes."
    )
    return "\n".join(out)


DATA_FLOW = """\
- **A** `[M, K]` and **B** (`[K, N]`, or `[N, K]` for NT) live in global memory (HBM).
  **C** `[M, N]` is written to global memory once, at the end.
- Each thread block owns one `block_M x block_N` tile of C (`bx` over N, `by` over M).
- Each iteration `ko` of the `T.Pipelined` K loop moves one `block_M x block_K` slab of A
  and one `block_K x block_N` slab of B (2 bytes per element) from global into
  `A_shared`/`B_shared`: `(block_M + block_N) * block_K * 2` bytes per stage. On sm_90a the
  copies are TMA bulk copies issued by a producer warpgroup, `num_stages` slots deep, so the
  loads of later slabs overlap the math on the current one.
- `T.gemm` multiplies the two shared tiles on the tensor cores (wgmma on Hopper) and adds the
  product into `C_local`, a register **fragment** of fp32 accumulators spread over the
  consumer threads. Nothing of C touches memory inside the loop.
- After the last slab, `T.copy(C_local, C[...])` converts to the output dtype and stores
  the tile to global memory (masked at the matrix edges).
- **Why `T.clear` first:** `C_local` is registers, which hold whatever the last kernel
  left there; the loop only ever does `C_local += A_tile @ B_tile`. Without zeroing it first
  the result would be garbage plus the product, differently in every run.
"""

QUESTIONS = """\
**Why is the work 2*M*N*K?** Each of the M*N outputs is a dot product of length K: K
multiplies and K adds (a fused multiply-add counts as two floating-point operations). So
TFLOPS = 2*M*N*K / seconds / 1e12.

**Why can block_K be too large or too small?** Too small: each pipeline stage carries
little math per synchronisation, the wgmma instructions are short (K=16 per instruction),
and the fixed cost of each stage (barrier waits, TMA issue, loop overhead) is paid more
often per FLOP. Too large: shared memory per stage is `(block_M + block_N) * block_K * 2`
bytes, so fewer stages fit in 227 KiB (less latency hiding) and occupancy drops; the
prologue that fills the pipeline gets longer; and with a small K the last slab is mostly
padding. 32-64 is the sweet spot for 16-bit inputs on Hopper.

**Where does shared-memory reuse show?** Each A element loaded into `A_shared` is used by
all `block_N` columns of the tile, and each B element by all `block_M` rows. Global traffic
per K step is `(block_M + block_N) * block_K` elements for `2 * block_M * block_N * block_K`
FLOPs, so intensity per block grows with the tile: 128x128 gives 64 FLOP per loaded element,
128x256 gives 85. The table shows it: the larger tiles run closer to cuBLAS at 4096^3,
while at 128^3 (one tile, nothing to reuse across blocks) every config is launch-bound.

**How are attention's QK^T and P@V this GEMM?** For one head, S = Q K^T with Q `[L, d]` and
K `[L, d]`: that is this kernel with M = L, N = L, K = d and B = K given as `[N, K]`, the
**NT** layout (`transpose_B=True`, both operands K-major). O = P V with P `[L, L]` and V
`[L, d]` is the **NN** layout with M = L, N = d, K = L. FlashAttention fuses the two with a
softmax in between, keeping S and P in registers, but each half is this tile loop.
"""


NEXT_EXPERIMENTS = """\
- Done since the first sweep: larger tiles, block_K 64/128, rasterisation panels, warp
  policies, a shared-memory (TMA-store) epilogue, a persistent grid, split-K and a
  hand-written producer/consumer pipeline (`_a`), searched per case by
  `python3 -m benchmarks.tune_gemm` (see Tuned Configs).
- Make the hand-written pipeline win on the 128x256 tile, where it now trails its
  automatic twin by 5-8% (it wins by 15% on 128x128): one elected producer arrival per
  stage instead of 128, each consumer warpgroup releasing its stage on its own barrier,
  and a read of the SASS for the consumer loop's barrier traffic.
- Overlap the epilogue of one tile with the main loop of the next (a persistent kernel with
  two consumer warpgroups in ping-pong), and try 2-CTA clusters with TMA multicast of the
  shared operand (`T.Kernel(..., cluster_dims=2)`, `T.copy_cluster`), as cuBLAS does.
- For bf16 decode (M = 16), a split-K whose reduction is not on the critical path (one
  fp32 workspace, one cast), or a GEMV-style kernel that streams B with no wasted rows.
"""


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

    @property
    def tflops(self) -> float:
        return metrics.tflops(self.shape.flops, self.tilelang_ms * 1e-3)

    @property
    def torch_tflops(self) -> float:
        return metrics.tflops(self.shape.flops, self.torch_ms * 1e-3)


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
                rows.append(
                    TunedRow(
                        name,
                        shape,
                        row["config"],
                        row["tilelang_ms"],
                        row["torch_ms"],
                        ratio,
                        spread,
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


def knob_effects(log: Sequence[dict], shape: GemmShape) -> list[str]:
    """For each knob the tuner varied at ``shape``: brief timings of every config with it
    against its twin without it, as the median change over the pairs and the best pair."""
    timed = {
        GemmConfig.from_id(r["config"]): r["quick_ms"]
        for r in log
        if r.get("shape") == shape.id and "quick_ms" in r
    }
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
            change, best, ms = min(pairs, key=lambda p: p[2])
            median = statistics.median(p[0] for p in pairs)
            out.append(
                f"- {name}: {100 * median:+.1f}% median over {len(pairs)} pairs; in the "
                f"fastest such config (`{best.id}`, {ms:.4f} ms) {100 * change:+.1f}%"
            )
    return out


LIMITS = """\
**What holds the squares at 0.97-1.00x and the up-projection at 0.98x.** The knob
comparisons above are brief timings from the tuner's ranking at 4096^3 fp16; 128x128 tiles
(one consumer warpgroup) and block_K 128 ranked 12-22% behind the best. The tiles are right
(two consumer warpgroups on 128x256, 168 registers a thread with `setmaxnreg` 240 for the
consumers, no spills in the ptxas report) and the shared-memory epilogue is the largest
single gain. What no config of the automatic pipeline changes is its inner loop: in the
generated CUDA the consumer warpgroups issue a stage's wgmma batch, then wait for it to
finish (`warpgroup_wait<0>`) before releasing the stage, so only one batch is ever in
flight. TileLang 0.1.15's automatic warp specialisation declines a delayed wait ("delayed
wgmma waits are not supported yet", `role_based_scheduler.cc`). The hand-written sibling
(`_a`, kernels/gemm_async.py) keeps one batch in flight (`wait_wgmma<1>`) and releases each
stage a step late. It passes the float64 checks and helps exactly where one consumer
warpgroup waits alone: 128x128x64 with 5 stages runs 15% faster than its automatic twin.
On the winning 128x256 tile it runs 5-8% slower than its twin, so the tuner still picks the
automatic pipeline. Likely costs, not yet isolated: all 128 producer threads arrive on each
stage's barrier, and the two consumer warpgroups release a stage together (256 arrivals)
rather than each on its own. At 4096^3 the 512 tiles of 128x256 fill 132 SMs in 3.9 waves;
the persistent grid does not help because `T.Persistent` runs a block's tiles back to back
without overlapping one tile's epilogue with the next tile's loads. At 8192^3 and in the MLP
projections both libraries run at the card's power cap (NVML reports "power cap", SM clock
1.2-1.6 GHz of 1.98), so the rounds' ratios spread over several percent; the rounds
alternate, so both libraries see the same clocks.
"""


def render_tuned(
    rows: Sequence[TunedRow],
    gpu: str,
    meta: Mapping,
    plots: Mapping[str, str],
    effects: Sequence[str] = (),
) -> str:
    """Tuned Configs: the table of every case, which reach parity, and the plots."""
    lines = [
        "| case | M | N | K | dtype | layout | best config | TileLang ms | torch ms | x torch "
        "| rounds' range | TFLOPS |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        sh = r.shape
        lines.append(
            f"| {r.case} | {sh.m} | {sh.n} | {sh.k} | {sh.dtype} | {sh.layout} | `{r.config}` "
            f"| {r.tilelang_ms:.4f} | {r.torch_ms:.4f} | {r.speedup:.3f} "
            f"| {r.spread[0]:.3f}-{r.spread[1]:.3f} | {r.tflops:.1f} |"
        )
    parity = [r for r in rows if r.speedup >= 1.0]
    below = [r for r in rows if r.speedup < 1.0]
    name = lambda r: f"{r.case} {r.shape.dtype}"  # noqa: E731
    out = [
        f"Measured on the {gpu} by `{meta.get('command', 'python3 -m benchmarks.tune_gemm')}` "
        f"({meta.get('date', '')}). Per case, every config of the documented search space "
        "(`kernels.tuned.candidates`) was compiled and briefly timed; the three fastest were "
        "checked against a float64 reference and then timed against torch.matmul in six "
        "alternating rounds of 25 launches each way (L2 flushed before every launch). "
        "`x torch` is the median per-round ratio of torch.matmul latency to TileLang "
        "latency; the ms columns are medians of all rounds' samples. The table is "
        "`kernels/tuned_configs.json`; `kernels.tuned.pick_config` reads it.",
        "",
        *lines,
        "",
        f"- At or above parity (>= 1.00x): {', '.join(name(r) for r in parity) or 'none'}.",
        f"- Below parity: {', '.join(f'{name(r)} ({r.speedup:.3f}x)' for r in below) or 'none'}.",
        "",
    ]
    if effects:
        out += [
            "Effect of each knob at 4096^3 fp16 (each config against its twin without the knob):",
            "",
            *effects,
            "",
            LIMITS,
        ]
    for key, caption in (
        ("sweep", "TFLOP/s of every config the tuner ranked at 4096^3 (brief timings)"),
        ("roofline", "Roofline with the tuned cases: TileLang (o) and torch.matmul (x)"),
    ):
        if key in plots:
            out += [f"![{caption}]({plots[key]})", ""]
    return "\n".join(out)


def render_stage04(
    results: Sequence, meta: Mapping[str, object], title: str, tuned: str | None = None
) -> str:
    """The report in the stage template: baseline, correctness, table, data flow,
    bottleneck guess, next experiments and the stage's questions; ``tuned`` is an
    optional Tuned Configs section (``render_tuned``)."""
    baseline_rows = [r for r in results if r.config == BASELINE]
    base_lines = [
        f"- `{r.shape.id}`: TileLang {r.tilelang_ms:.4f} ms vs torch.matmul {r.torch_ms:.4f} ms "
        f"({r.speedup:.2f}x torch.matmul's speed, {r.tflops:.1f} TFLOP/s), correct: "
        f"{'yes' if r.check.ok else 'NO'} ({r.check})"
        for r in baseline_rows
        if r.tilelang_ms is not None
    ]
    best_lines = []
    for shape, rows in _by_shape(results).items():
        best = _best(rows)
        if best is not None:
            best_lines.append(
                f"- `{shape.id}`: best `{best.config.id}` at {best.tilelang_ms:.4f} ms, "
                f"{best.tflops:.1f} TFLOP/s, {best.speedup:.2f}x torch.matmul's speed "
                f"(torch.matmul {best.torch_ms:.4f} ms)"
            )
    parts = [
        f"# {title}",
        "",
        f"- GPU: {meta.get('gpu')}",
        f"- TileLang {meta.get('tilelang')}, torch {meta.get('torch')} (CUDA {meta.get('cuda')})",
        f"- Date: {meta.get('date')}",
        f"- Timing: `tilelang.profiler.do_bench`, backend `{meta.get('backend')}`, L2 flushed "
        f"before every launch, {meta.get('warmup')} warm-up launches, median of "
        f"{meta.get('repeat')} timed launches",
        f"- Command: `{meta.get('command')}`",
        "",
        "## Baseline Config",
        "",
        "`block_M=128, block_N=128, block_K=32, threads=128, num_stages=3`, fp16 in, fp32 "
        "accumulate, NN layout: `C[M, N] = A[M, K] @ B[K, N]` (`kernels/gemm.py`, compiled "
        "by `_compile_gemm`).",
        "",
        *(base_lines or ["- (the baseline config was not part of this sweep)"]),
        "",
        "## Correctness",
        "",
        _correctness(results),
        "",
        "## Benchmark Table",
        "",
        "Latencies are medians; `x torch` is torch.matmul latency over TileLang latency "
        "(1.00 is parity, above 1.00 beats cuBLAS); TFLOPS is the TileLang kernel's.",
        "",
        benchmark_table(results),
        "",
        *best_lines,
        "",
        *(["## Tuned Configs", "", tuned, ""] if tuned else []),
        "## Data Flow",
        "",
        DATA_FLOW,
        "## Bottleneck Guess",
        "",
        _bottleneck(results),
        "",
        "## Next Experiments",
        "",
        NEXT_EXPERIMENTS,
        "## Questions",
        "",
        QUESTIONS,
    ]
    return "\n".join(parts)
