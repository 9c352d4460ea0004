"""Time torch.matmul and the TileLang GEMM over a sweep of shapes and configs.

    python3 -m benchmarks.bench_gemm --m 128 --n 128 --k 128 --warmup 10 --repeat 50 --run-tilelang
    python3 -m benchmarks.bench_gemm --m 4096 --n 4096 --k 4096 --threads 128 256 \\
        --num-stages 2 3 4 --run-tilelang --report reports/stage04_gemm.md

Every list option sweeps: the run covers the product of all values. Each finished row is
appended to ``--jsonl`` at once, so an interrupted sweep keeps what it measured; Ctrl-C
prints and reports the rows done so far.
"""

from __future__ import annotations

import argparse
import datetime as dt
import itertools
import json
import shlex
import sys
from pathlib import Path

from harness.cli import count, positive_int
from harness.measure import device, metrics
from harness.measure.timing import BACKENDS, check_counts
from harness.report.stage04 import fmt_optional
from kernels import DTYPES, LAYOUTS, GemmConfig, GemmShape

PROG = "python3 -m benchmarks.bench_gemm"
EXIT_NO_GPU = 3
EXIT_INCORRECT = 4
EXIT_INTERRUPTED = 130


def _shape(text: str) -> tuple[int, int, int]:
    parts = text.lower().split("x")
    if len(parts) != 3:
        raise argparse.ArgumentTypeError(f"{text!r} must be MxNxK, e.g. 4096x4096x4096")
    return tuple(positive_int(x) for x in parts)


def _config_id(text: str) -> GemmConfig:
    try:
        return GemmConfig.from_id(text)
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from None


def build_parser() -> argparse.ArgumentParser:
    d = GemmConfig()
    p = argparse.ArgumentParser(
        prog=PROG,
        description=(
            "Time torch.matmul and, with --run-tilelang, compile, check and time the "
            "TileLang GEMM for every combination of the values given. Latencies are "
            "medians of per-launch samples with the L2 flushed before each launch; "
            "TFLOPS = 2*M*N*K / seconds / 1e12."
        ),
        epilog="Needs a CUDA GPU; without one it says so and exits with status 3.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    g = p.add_argument_group("problem (each takes one or more values)")
    g.add_argument("--m", type=positive_int, nargs="+", default=[4096], help="rows of A and C")
    g.add_argument("--n", type=positive_int, nargs="+", default=[4096], help="columns of C")
    g.add_argument("--k", type=positive_int, nargs="+", default=[4096], help="reduction size")
    g.add_argument(
        "--shape",
        type=_shape,
        nargs="+",
        metavar="MxNxK",
        help="explicit shapes, instead of the product of --m, --n and --k",
    )
    g.add_argument("--dtype", nargs="+", choices=sorted(DTYPES), default=["float16"])
    g.add_argument(
        "--layout",
        nargs="+",
        choices=LAYOUTS,
        default=["NN"],
        help="NN: B is [K, N]; NT: B is [N, K] and C = A @ B.T (attention's QK^T)",
    )
    c = p.add_argument_group("kernel config (each takes one or more values)")
    c.add_argument("--block-m", type=positive_int, nargs="+", default=[d.block_m])
    c.add_argument("--block-n", type=positive_int, nargs="+", default=[d.block_n])
    c.add_argument("--block-k", type=positive_int, nargs="+", default=[d.block_k])
    c.add_argument("--threads", type=positive_int, nargs="+", default=[d.threads])
    c.add_argument("--num-stages", type=positive_int, nargs="+", default=[d.num_stages])
    c.add_argument(
        "--swizzle",
        type=count,
        nargs="+",
        default=[d.swizzle],
        help="block rasterisation panel (T.use_swizzle); 0 is off",
    )
    c.add_argument(
        "--config",
        type=_config_id,
        nargs="+",
        default=[],
        metavar="ID",
        help="extra configs by id, e.g. b128x256x64_t256_s3 (swept alongside the product)",
    )
    t = p.add_argument_group("timing")
    t.add_argument("--warmup", type=count, default=10, help="warm-up launches (not timed)")
    t.add_argument("--repeat", type=positive_int, default=50, help="timed launches")
    t.add_argument(
        "--backend",
        choices=BACKENDS,
        default="event",
        help="event: CUDA events per launch; cupti: kernel time from CUPTI (one mean per run)",
    )
    t.add_argument("--seed", type=count, default=0, help="seed of the random inputs")
    o = p.add_argument_group("what to run and write")
    o.add_argument(
        "--run-tilelang",
        action="store_true",
        help="also compile, check against a float64 reference and time the TileLang kernel",
    )
    o.add_argument(
        "--launch",
        action="store_true",
        help="also time the host launch overhead (wall time of one call, device work not "
        "waited for) of torch.matmul and, with --run-tilelang, of each TileLang kernel",
    )
    o.add_argument("--report", type=Path, help="write the stage-04 markdown report here")
    o.add_argument("--jsonl", type=Path, help="append one JSON line per finished row here")
    o.add_argument(
        "--tuned",
        type=Path,
        metavar="TABLE",
        help="with --report: add a Tuned Configs section from this table "
        "(kernels/tuned_configs.json) for the run's GPU, with a roofline plot",
    )
    o.add_argument(
        "--tune-log",
        type=Path,
        metavar="JSONL",
        help="with --tuned: the tuner's log, for the TFLOP/s-per-config plot at 4096^3",
    )
    o.add_argument(
        "--replay",
        type=Path,
        metavar="JSONL",
        help="no measuring: print the table (and --report) from a recorded --jsonl file",
    )
    o.add_argument("--title", default="Stage 04: TileLang GEMM", help="report title")
    return p


def plan(args) -> tuple[list[GemmShape], list[GemmConfig], list[str]]:
    """Shapes and valid configs of the sweep, and one line per config skipped and why.
    Raises ValueError when nothing valid remains."""
    sizes = args.shape or list(itertools.product(args.m, args.n, args.k))
    shapes = [
        GemmShape(m, n, k, dtype, layout)
        for (m, n, k), dtype, layout in itertools.product(sizes, args.dtype, args.layout)
    ]
    configs, skipped = [], []
    for bm, bn, bk, th, st, sw in itertools.product(
        args.block_m, args.block_n, args.block_k, args.threads, args.num_stages, args.swizzle
    ):
        try:
            configs.append(GemmConfig(bm, bn, bk, th, st, sw))
        except ValueError as err:
            skipped.append(f"skipped b{bm}x{bn}x{bk}_t{th}_s{st}: {err}")
    configs += [c for c in args.config if c not in configs]
    if not configs:
        raise ValueError("no valid kernel config in the sweep:\n  " + "\n  ".join(skipped))
    return shapes, configs, skipped


TABLE_COLUMNS = (
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
    "x torch",
    "correct",
)


def table_row(r) -> list[str]:
    cfg = r.config
    return [
        str(r.shape.m),
        str(r.shape.n),
        str(r.shape.k),
        r.shape.dtype,
        r.shape.layout,
        *(
            ["-"] * 5
            if cfg is None
            else [
                str(cfg.block_m),
                str(cfg.block_n),
                str(cfg.block_k),
                str(cfg.threads),
                str(cfg.num_stages),
            ]
        ),
        f"{r.torch_ms:.4f}",
        fmt_optional(r.tilelang_ms, ".4f"),
        f"{r.tflops:.1f}",
        fmt_optional(r.speedup, ".2f"),
        "-" if r.check is None else f"{'ok' if r.check.ok else 'FAIL'} {r.check.rel_error:.1e}",
    ]


def print_table(results, console) -> None:
    from rich.table import Table

    table = Table(title="GEMM latency (median); x torch = torch ms / tilelang ms", show_lines=False)
    for col in TABLE_COLUMNS:
        table.add_column(col, justify="left" if col in ("dtype", "layout", "correct") else "right")
    for r in results:
        table.add_row(*table_row(r))
    console.print(table)


def run_meta(args, argv: list[str]) -> dict:
    """What the numbers depend on: GPU, versions, date, command and timing settings."""
    return {
        "gpu": device.gpu_name(),
        "date": dt.date.today().isoformat(),
        "command": shlex.join([*PROG.split(), *argv]),
        "warmup": args.warmup,
        "repeat": args.repeat,
        "backend": args.backend,
        **device.versions(),
    }


def load_jsonl(path: Path) -> tuple[dict, list]:
    """The meta line and the rows of a recorded sweep."""
    from harness.measure.cases import CaseResult

    meta, records = _read_jsonl(path)
    # Launch-overhead lines have no latency row.
    rows = [CaseResult.from_dict(r) for r in records if "launch_us" not in r]
    if not rows:
        raise ValueError(f"--replay {path}: holds no measured rows")
    return meta, rows


def _read_jsonl(path: Path) -> tuple[dict, list[dict]]:
    """The meta line and the other records of a JSONL file (this CLI's or the tuner's)."""
    meta, rows = {}, []
    for line in path.read_text().splitlines():
        if line.strip():
            record = json.loads(line)
            if "meta" in record:
                meta = record["meta"]
            else:
                rows.append(record)
    return meta, rows


def tuned_section(report: Path, table_path: Path, log_path: Path | None, gpu: str) -> str:
    """The report's Tuned Configs section; its plots are written next to ``report``."""
    from harness.report import plots
    from harness.report.stage04 import (
        knob_effects,
        render_tuned,
        roofline_points,
        sweep_bars,
        tuned_rows,
    )
    from kernels.tuned import case_shape

    rows = tuned_rows(json.loads(table_path.read_text()), gpu)
    if not rows:
        raise ValueError(f"{table_path} has no tuned configs for {gpu!r}")
    drawn, meta, effects = {}, {}, []
    stem = report.with_suffix("")
    path = plots.roofline(
        roofline_points(rows), Path(f"{stem}_roofline.png"), f"Tuned GEMMs on the {gpu}"
    )
    drawn["roofline"] = path.name
    if log_path is not None:
        meta, log = _read_jsonl(log_path)
        effects = knob_effects(log, case_shape("square4096", "float16"))
        panels = []
        for dtype in ("float16", "bfloat16"):
            shape = case_shape("square4096", dtype)
            bars = sweep_bars(log, shape)
            torch = next((r.torch_tflops for r in rows if r.shape == shape), None)
            if bars:
                panels.append((f"{shape.id}: {len(bars)} configs", bars, torch))
        if panels:
            path = plots.config_sweep(
                panels, Path(f"{stem}_tflops_4096.png"), f"TFLOP/s per config, {gpu}"
            )
            drawn["sweep"] = path.name
    return render_tuned(rows, gpu, meta, drawn, effects)


def launch_row(case, config, console, jsonl) -> None:
    """Host launch overhead of torch.matmul (``config`` None) or one TileLang kernel."""
    from harness.measure.timing import measure_launch

    fn = case.torch_fn if config is None else case.tilelang_fn(config)
    samples = measure_launch(fn).samples_ms
    us = metrics.median(samples) * 1e3
    what = "torch.matmul" if config is None else config.id
    console.print(f"launch overhead {case.shape.id} {what}: {us:.1f} us (median of {len(samples)})")
    if jsonl:
        record = {"shape": case.shape.id, "config": what, "launch_us": us}
        jsonl.write(json.dumps(record | {"samples_ms": list(samples)}) + "\n")
        jsonl.flush()


def run(args, console, meta: dict) -> tuple[list, bool]:
    """Measure the sweep; returns the finished rows and whether it was interrupted."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from harness.measure.cases import Case, CaseResult

    shapes, configs, skipped = plan(args)
    for line in skipped:
        console.print(f"[yellow]{line}[/]")
    timing = {"warmup": args.warmup, "repeat": args.repeat, "backend": args.backend}
    per_shape = len(configs) if args.run_tilelang else 1
    results: list[CaseResult] = []
    jsonl = args.jsonl.open("a") if args.jsonl else None
    if jsonl:
        jsonl.write(json.dumps({"meta": meta}) + "\n")
    progress = Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console,
        transient=True,
    )
    try:
        with progress:
            task = progress.add_task("sweep", total=len(shapes) * per_shape)
            for shape in shapes:
                progress.update(task, description=f"{shape.id}: torch.matmul")
                case = Case(shape, seed=args.seed)
                torch_timing = case.time_torch(**timing)
                if args.launch:
                    launch_row(case, None, console, jsonl)
                todo = configs if args.run_tilelang else [None]
                for cfg in todo:
                    if cfg is None:
                        row = CaseResult(shape, None, torch_timing)
                    else:
                        progress.update(task, description=f"{shape.id} {cfg.id}")
                        check = case.check(cfg, seed=args.seed + 1)
                        row = CaseResult(
                            shape, cfg, torch_timing, case.time_tilelang(cfg, **timing), check
                        )
                        if args.launch:
                            launch_row(case, cfg, console, jsonl)
                    results.append(row)
                    if jsonl:
                        jsonl.write(json.dumps(row.to_dict()) + "\n")
                        jsonl.flush()
                    progress.advance(task)
    except KeyboardInterrupt:
        console.print(f"[red]interrupted[/]: keeping the {len(results)} rows measured so far")
        return results, True
    finally:
        if jsonl:
            jsonl.close()
    return results, False


def main(argv: list[str] | None = None) -> int:
    from rich.console import Console

    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        check_counts(args.warmup, args.repeat)
        plan(args)
    except ValueError as err:
        parser.error(str(err))
    if args.tuned and not args.report:
        parser.error("--tuned: adds a section to the report, so it needs --report")
    if args.tune_log and not args.tuned:
        parser.error("--tune-log: feeds the Tuned Configs section, so it needs --tuned")
    for name, path in (("--tuned", args.tuned), ("--tune-log", args.tune_log)):
        if path is not None and not path.is_file():
            parser.error(f"{name}={path}: no such file")
    # Wide when piped or logged: rich would otherwise squeeze the table into 80 columns.
    console = Console(width=None if sys.stdout.isatty() else 200)
    argv = sys.argv[1:] if argv is None else argv
    interrupted = False
    if args.replay:
        try:
            meta, results = load_jsonl(args.replay)
        except (OSError, ValueError, KeyError) as err:
            parser.error(f"--replay: {err}")
    else:
        reason = device.no_gpu_reason()
        if reason:
            print(f"{PROG}: error: {reason}; this command times kernels on a GPU", file=sys.stderr)
            return EXIT_NO_GPU
        meta = run_meta(args, argv)
        results, interrupted = run(args, console, meta)
    if results:
        print_table(results, console)
    if args.report and results:
        from harness.report.stage04 import render_stage04

        args.report.parent.mkdir(parents=True, exist_ok=True)
        tuned = None
        if args.tuned:
            try:
                tuned = tuned_section(args.report, args.tuned, args.tune_log, str(meta.get("gpu")))
            except (OSError, ValueError, KeyError) as err:
                parser.error(f"--tuned: {err}")
        args.report.write_text(render_stage04(results, meta, title=args.title, tuned=tuned))
        console.print(f"report written to {args.report}")
    if interrupted:
        return EXIT_INTERRUPTED
    if any(r.check is not None and not r.check.ok for r in results):
        console.print("[red]at least one kernel gave a wrong result[/]")
        return EXIT_INCORRECT
    return 0


if __name__ == "__main__":
    sys.exit(main())
