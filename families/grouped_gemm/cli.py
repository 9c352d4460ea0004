"""Time the TileLang grouped GEMM of a mixture-of-experts layer against its baseline.

    python3 -m families.grouped_gemm.cli --experts 8 --m-sizes 512 0 300 1024 77 640 128 256 \\
        --n 4096 --k 4096 --dtype bf16 --warmup 10 --repeat 50

    python3 -m families.grouped_gemm.cli --moe --markdown reports/grouped_gemm_h200.md

A is [sum M_g, K], B is [G, K, N]; expert g multiplies its M_g rows of A by B[g]. The
baseline is ``torch._grouped_mm`` where the installed torch has it and a trial call on
these inputs runs; otherwise one ``torch.matmul`` per expert, and the table says why.
Each kernel config is first checked against a float64 reference per expert (on a
NaN-poisoned output), then both are timed through the project's one timing path.
``--moe`` does that for every layout of the asv family (``bench.GroupedGemm``: 8 and 64
experts, K = N = 4096 and 7168, balanced and skewed routing, both dtypes) with its
heuristic config, and ``--markdown`` writes their table.

Exit status: 0 every config measured and correct; 2 bad input; 3 no GPU; 4 a kernel gave
a wrong result; 5 a config failed to build or run (the rest are measured); 6 a kernel's
launch never finished (the run stops there).
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass

from benchmarks.bench_gemm import add_timing_options
from families.grouped_gemm.kernel import (
    GroupedGemmShape,
    check_config,
    check_shape_config,
    heuristic,
)
from harness.cli import (
    EXIT_FAILED,
    EXIT_INCORRECT,
    EXIT_NO_GPU,
    count,
    output_file,
    positive_int,
)
from harness.measure import device, metrics
from harness.measure.timing import check_counts
from kernels import GemmConfig
from kernels.gemm import SHORT_DTYPES

PROG = "python3 -m families.grouped_gemm.cli"


def _config_id(text: str) -> GemmConfig:
    try:
        config = GemmConfig.from_id(text)
        check_config(config)
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from None
    return config


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=PROG,
        description=(
            "Check and time the TileLang grouped GEMM (one launch over all experts) and its "
            "baseline: torch._grouped_mm where this torch runs it, else torch.matmul per "
            "expert. Latencies are medians of per-launch samples with the L2 flushed before "
            "each launch; TFLOPS = 2*sum(M_g)*N*K / seconds / 1e12; speedup = baseline "
            "latency / kernel latency (above 1 beats the baseline)."
        ),
        epilog="Needs a CUDA GPU; without one it says so and exits with status 3. Exit status: "
        "0 all configs measured and correct, 2 bad input, 4 a wrong result, 5 a config failed "
        "to build or run.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    g = p.add_argument_group("problem")
    g.add_argument("--experts", type=positive_int, default=8, help="G, the number of experts")
    g.add_argument(
        "--m-sizes",
        type=count,
        nargs="+",
        default=[512],
        metavar="M",
        help="rows (tokens) of each expert, one per expert, or one value for all; 0 is an "
        "expert no token was routed to",
    )
    g.add_argument("--n", type=positive_int, default=4096, help="columns of each expert's B")
    g.add_argument("--k", type=positive_int, default=4096, help="reduction size (hidden size)")
    g.add_argument("--dtype", choices=sorted(SHORT_DTYPES), default="f16")
    c = p.add_argument_group("kernel")
    c.add_argument(
        "--config",
        type=_config_id,
        nargs="+",
        metavar="ID",
        help="kernel configs by id, e.g. b128x256x64_t256_s3 (default: the heuristic's "
        "choice for the shape)",
    )
    s = p.add_argument_group("sweep")
    s.add_argument(
        "--moe",
        action="store_true",
        help="every layout the asv family tracks (its experts, K = N, routing and dtype "
        "replace the problem options), each with the heuristic's config",
    )
    s.add_argument(
        "--markdown",
        type=output_file,
        metavar="PATH",
        help="with --moe: write the table there (baseline, config, latencies, speedup)",
    )
    add_timing_options(
        p, "the per-expert torch.matmul loop is several kernels: time it with the event backend"
    )
    return p


def shape_of(args) -> GroupedGemmShape:
    """The shape the options describe; ValueError names the option and the rule."""
    sizes = list(args.m_sizes)
    if len(sizes) == 1:
        sizes *= args.experts
    elif len(sizes) != args.experts:
        raise ValueError(
            f"--m-sizes: {len(sizes)} values for --experts {args.experts}: give one per "
            "expert, or one for all"
        )
    if not any(sizes):
        raise ValueError("--m-sizes: every expert has 0 rows; at least one must have rows")
    return GroupedGemmShape(tuple(sizes), args.n, args.k, SHORT_DTYPES[args.dtype])


@dataclass(frozen=True, slots=True)
class Row:
    """One line of the table: the baseline (``config`` None) or one kernel config, with
    its median latency, or the error that stopped it."""

    name: str
    median_ms: float | None
    correct: str = "-"
    error: str | None = None


def table(shape: GroupedGemmShape, baseline: Row, why: str, kernels: list[Row]) -> list[str]:
    """The report's lines: the problem, which baseline ran (and why that one), then one
    line per row with latency, TFLOPS and speedup = baseline / kernel."""
    busy = sum(1 for m in shape.m_sizes if m)
    lines = [
        f"grouped GEMM {shape.id}: {shape.groups} experts ({busy} with rows), "
        f"sum M_g={shape.total_m}, N={shape.n}, K={shape.k}, {shape.dtype}",
        f"baseline: {baseline.name}" + (f" (fallback: {why})" if why else ""),
        "speedup = baseline latency / kernel latency (above 1.00 beats the baseline)",
        "",
        f"{'what':<28} {'latency ms':>11} {'TFLOPS':>8} {'speedup':>8}  correct",
    ]
    for row in [baseline, *kernels]:
        if row.median_ms is None:
            lines.append(f"{row.name:<28} {'FAILED':>11} {'-':>8} {'-':>8}  {row.error}")
            continue
        tflops = metrics.tflops(shape.flops, row.median_ms * 1e-3)
        speedup = (
            "-"
            if row is baseline or baseline.median_ms is None
            else f"{metrics.speedup(row.median_ms, baseline.median_ms):.2f}"
        )
        lines.append(
            f"{row.name:<28} {row.median_ms:>11.4f} {tflops:>8.1f} {speedup:>8}  {row.correct}"
        )
    return lines


def measure_rows(args, shape: GroupedGemmShape, configs: list[GemmConfig]):
    """Check and time every config and the baseline on one set of inputs: (the baseline's
    row, why it is the fallback or "", the configs' rows, exit status)."""
    from families.grouped_gemm.op import OPERATOR as GROUPED_GEMM
    from harness.measure.correctness import check_built
    from harness.measure.timing import measure
    from harness.ops.registry import build_combination

    timing = {"warmup": args.warmup, "repeat": args.repeat, "backend": args.backend}
    inputs = GROUPED_GEMM.inputs(shape, args.seed)
    baseline = GROUPED_GEMM.baseline(inputs)
    base_ms = measure(baseline.fn, **timing).median_ms
    rows, status = [], 0
    for config in configs:
        try:
            check = check_built(GROUPED_GEMM, shape, config, seed=args.seed + 1)
            launch = build_combination(GROUPED_GEMM, shape, config)(inputs)
            rows.append(Row(config.id, measure(launch, **timing).median_ms, str(check)))
            if not check.ok:
                status = EXIT_INCORRECT
        except Exception as err:  # a config that fails to build or run is a row, not the end
            first = f"{type(err).__name__}: {err}".splitlines()[0]
            rows.append(Row(config.id, None, error=first))
            status = status or EXIT_FAILED
    return Row(baseline.name, base_ms), baseline.why, rows, status


def run(args, shape: GroupedGemmShape, configs: list[GemmConfig]) -> tuple[list[str], int]:
    """The table of every config and the baseline on one set of inputs, and the status."""
    base, why, rows, status = measure_rows(args, shape, configs)
    return table(shape, base, why, rows), status


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        check_counts(args.warmup, args.repeat)
        shape = shape_of(args)
    except ValueError as err:
        parser.error(str(err))
    if args.markdown and not args.moe:
        parser.error("--markdown: writes the --moe sweep's table; add --moe")
    if args.moe and args.config:
        parser.error("--config: --moe times each layout's heuristic config; drop one of them")
    configs = args.config or [heuristic(shape)]
    for config in configs:
        try:
            check_shape_config(shape, config)
        except ValueError as err:
            parser.error(f"--config {config.id}: {err}")
    reason = device.no_gpu_reason()
    if reason:
        print(f"{PROG}: error: {reason}; this command times kernels on a GPU", file=sys.stderr)
        return EXIT_NO_GPU
    on = f"{device.gpu_name()} ({', '.join(f'{k} {v}' for k, v in device.versions().items())})"
    print(f"on {on}")
    if args.moe:
        from families.grouped_gemm import cli_moe

        return cli_moe.main(args, on, measure_rows)
    lines, status = run(args, shape, configs)
    print("\n".join(lines))
    return status


if __name__ == "__main__":
    sys.exit(main())
