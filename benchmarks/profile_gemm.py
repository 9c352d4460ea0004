"""Where a GEMM kernel's time goes, beside torch.matmul's on the same shape: Nsight Compute
(``ncu``) reads the hardware counters of one launch of each.

    python3 -m benchmarks.profile_gemm --shape 2096x2728x1304 --layout NT
    python3 -m benchmarks.profile_gemm --shape 2096x2728x1304 --layout NT \\
        --config b128x192x64_t256_s4_w8_pr_e_sk132_a_mb b128x192x64_t256_s4_p132_a_pp \\
        --csv reports/profile_mid_h200.csv --markdown reports/profile_mid_h200.md
    python3 -m benchmarks.profile_gemm --replay reports/profile_mid_h200.csv

The timings of this project come from CUPTI and asv (``benchmarks.bench_gemm``,
``benchmarks.offtable``); this command says why one kernel trails another. It starts
itself under ``ncu`` (``--clock-control none``: the GPU's clocks are left as they are;
ncu flushes the caches before each replay, as the timings flush the L2), and the child
builds each config (the heuristic's pick where ``--config`` names none), checks it once
against the float64 product on fresh random operands into a NaN-poisoned output, then
launches it once inside an NVTX range named after the shape and config, between
``cudaProfilerStart`` and ``Stop``, so that nothing else is profiled; torch.matmul's
kernels come last in a range of their own. Per launch the table shows:

- the GPU time of its kernels (a stream-K config's zeroing of C and cuBLAS's split-K
  reduction count in), and torch.matmul's over it;
- the tensor pipe's busy share of the elapsed cycles (the part of the peak the kernel
  reaches);
- the SMs' balance: the least active SM's active cycles over the most active's (a
  persistent grid whose tiles do not divide among its blocks leaves some SMs idle);
- L2 and DRAM throughput as shares of their peaks;
- the three largest causes of warp stalls (warps stalled per issued instruction).

``--csv`` keeps ncu's raw page (and a ``.meta.json`` beside it: GPU, date, command, the
checks), which ``--replay`` renders again without a GPU; ncu writes it as it goes, so an
interrupted run keeps what it profiled. Exit status: 0 done; 2 bad input, or ncu failed;
3 no GPU or no ncu; 4 a kernel's result was wrong (it is still profiled); 5 a config
failed to build or launch (the rest are profiled); 130 interrupted.
"""

from __future__ import annotations

import argparse
import csv
import datetime as dt
import io
import json
import shlex
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from benchmarks.bench_gemm import _shape
from harness.cli import (
    EXIT_FAILED,
    EXIT_FAILURE,
    EXIT_INCORRECT,
    EXIT_INTERRUPTED,
    EXIT_NO_GPU,
    config_id,
    output_file,
)
from kernels import DTYPES, LAYOUTS, GemmConfig, GemmShape

PROG = "python3 -m benchmarks.profile_gemm"
TORCH = "torch.matmul"  # the range name of the baseline's launch
RANGE_SEP = " | "  # between shape and config in a range's name (ncu's CSV splits on ':')
# ncu's sections behind the table (its raw page holds every metric they collect).
SECTIONS = (
    "SpeedOfLight",
    "ComputeWorkloadAnalysis",
    "MemoryWorkloadAnalysis",
    "WarpStateStats",
    "LaunchStats",
)
# Where ncu is looked for when it is not on PATH (the CUDA toolkit's default prefix).
NCU_FALLBACK = Path("/usr/local/cuda/bin/ncu")
STALL_PREFIX = "smsp__average_warps_issue_stalled_"
STALL_SUFFIX = "_per_issue_active.ratio"
# Raw-page metrics the table reads, by the name the record gives them.
METRICS = {
    "duration": "gpu__time_duration.sum",
    "tensor_pct": "sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_elapsed",
    "active_min": "sm__cycles_active.min",
    "active_max": "sm__cycles_active.max",
    "l2_pct": "lts__throughput.avg.pct_of_peak_sustained_elapsed",
    "dram_pct": "gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed",
    "grid": "launch__grid_size",
    "block": "launch__block_size",
    "cluster": "launch__cluster_size",
    "registers": "launch__registers_per_thread",
}
# A check's outcome, as the record keeps it.
OK, WRONG, FAILED = "ok", "wrong", "failed"
NS_PER = {"ns": 1.0, "nsecond": 1.0, "us": 1e3, "usecond": 1e3, "ms": 1e6, "msecond": 1e6}


@dataclass(frozen=True, slots=True)
class KernelProfile:
    """One kernel of a profiled launch, as ncu's raw page gives it."""

    name: str
    duration_us: float
    tensor_pct: float | None
    active_min: float | None
    active_max: float | None
    l2_pct: float | None
    dram_pct: float | None
    grid: int | None
    block: int | None
    cluster: int | None
    registers: int | None
    stalls: tuple[tuple[str, float], ...]  # (reason, warps per issue), largest first

    @property
    def balance(self) -> float | None:
        """The least active SM's active cycles over the most active's (1: even)."""
        if self.active_min is None or not self.active_max:
            return None
        return self.active_min / self.active_max


@dataclass(frozen=True, slots=True)
class LaunchProfile:
    """A profiled launch: the shape, what ran it (a config id, or ``TORCH``) and its
    kernels, the longest first."""

    shape: str
    what: str
    kernels: tuple[KernelProfile, ...]

    @property
    def duration_us(self) -> float:
        return sum(k.duration_us for k in self.kernels)

    @property
    def main(self) -> KernelProfile:
        return self.kernels[0]


def _number(text: str) -> float | None:
    text = text.strip().replace(",", "")
    if not text or text.lower() in ("n/a", "nan"):
        return None
    try:
        return float(text)
    except ValueError:
        return None


def _range_of(cell: str) -> str | None:
    """The innermost push/pop range of ncu's NVTX cell (``1156  "<default
    domain>:NAME:none:..."``), or None outside every range."""
    start, end = cell.find('"'), cell.rfind('"')
    if start < 0 or end <= start:
        return None
    parts = cell[start + 1 : end].split(":")
    return parts[1] if len(parts) > 1 and parts[1] else None


def parse_raw(text: str) -> list[LaunchProfile]:
    """The launches of ncu's ``--csv --page raw`` output (``text``; lines before the
    header, ncu's notes and the child's output, are skipped), grouped by the NVTX range
    ``shape | what`` that each kernel ran in, in the order they ran. ValueError naming
    what is missing where the text holds no header, no range, or a metric the table
    needs."""
    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith('"ID"')), None)
    if start is None:
        raise ValueError('no ncu raw page in it (no header line starting with "ID")')
    rows = list(csv.reader(io.StringIO("\n".join(lines[start:]))))
    header, units, data = rows[0], rows[1], [r for r in rows[2:] if len(r) == len(rows[0])]
    column = {name: i for i, name in enumerate(header)}
    nvtx = next((i for i, name in enumerate(header) if "Push/Pop" in name), None)
    if nvtx is None:
        raise ValueError("no NVTX column: the profile was taken without --nvtx")
    if METRICS["duration"] not in column:
        raise ValueError(f"metric {METRICS['duration']} missing: it was collected without it")
    ns_per_unit = NS_PER.get(units[column[METRICS["duration"]]].strip(), 1.0)
    stalls = [
        name
        for name in header
        if name.startswith(STALL_PREFIX)
        and name.endswith(STALL_SUFFIX)
        and "selected" not in name  # issuing, not stalled
    ]

    def value(row: list[str], field: str) -> float | None:
        i = column.get(METRICS[field])
        return None if i is None else _number(row[i])

    def whole(row: list[str], field: str) -> int | None:
        v = value(row, field)
        return None if v is None else int(v)

    launches: dict[tuple[str, str], list[KernelProfile]] = {}
    for row in data:
        name = _range_of(row[nvtx])
        if name is None or RANGE_SEP.strip() not in name:
            continue
        shape, what = (part.strip() for part in name.split(RANGE_SEP.strip(), 1))
        ns = (value(row, "duration") or 0.0) * ns_per_unit
        reasons = sorted(
            (
                (s[len(STALL_PREFIX) : -len(STALL_SUFFIX)], v)
                for s in stalls
                if (v := _number(row[column[s]])) is not None
            ),
            key=lambda r: -r[1],
        )

        launches.setdefault((shape, what), []).append(
            KernelProfile(
                name=row[column["Kernel Name"]],
                duration_us=ns / 1e3,
                tensor_pct=value(row, "tensor_pct"),
                active_min=value(row, "active_min"),
                active_max=value(row, "active_max"),
                l2_pct=value(row, "l2_pct"),
                dram_pct=value(row, "dram_pct"),
                grid=whole(row, "grid"),
                block=whole(row, "block"),
                cluster=whole(row, "cluster"),
                registers=whole(row, "registers"),
                stalls=tuple(reasons[:3]),
            )
        )
    if not launches:
        raise ValueError(f"no kernel ran inside a range named 'shape{RANGE_SEP}config'")
    return [
        LaunchProfile(shape, what, tuple(sorted(ks, key=lambda k: -k.duration_us)))
        for (shape, what), ks in launches.items()
    ]


def _pct(v: float | None) -> str:
    return "-" if v is None else f"{v:.1f}%"


def table_rows(launches: Sequence[LaunchProfile]) -> list[list[str]]:
    """One row per launch: shape, config (or torch.matmul with its main kernel's name),
    GPU time, torch.matmul's over it, tensor busy, SM balance, L2, DRAM, grid x block
    (cluster), registers, the top stalls."""
    torch_us = {p.shape: p.duration_us for p in launches if p.what == TORCH}
    out = []
    for p in launches:
        k = p.main
        base = torch_us.get(p.shape)
        what = f"{TORCH} ({k.name})" if p.what == TORCH else p.what
        extra = f" + {len(p.kernels) - 1} more" if len(p.kernels) > 1 else ""
        grid = "-" if k.grid is None else f"{k.grid}x{k.block}"
        if k.cluster and k.cluster > 1:
            grid += f" (cluster {k.cluster})"
        out.append(
            [
                p.shape,
                what + extra,
                f"{p.duration_us:.1f}",
                "-" if base is None else f"{base / p.duration_us:.3f}",
                _pct(k.tensor_pct),
                "-" if k.balance is None else f"{k.balance:.2f}",
                _pct(k.l2_pct),
                _pct(k.dram_pct),
                grid,
                "-" if k.registers is None else str(k.registers),
                ", ".join(f"{r} {v:.1f}" for r, v in k.stalls) or "-",
            ]
        )
    return out


HEADER = [
    "shape",
    "kernel",
    "GPU us",
    "vs torch",
    "tensor busy",
    "SM balance",
    "L2",
    "DRAM",
    "grid x block",
    "regs",
    "top stalls (warps per issue)",
]


def render_markdown(launches: Sequence[LaunchProfile], meta: dict) -> str:
    """The record as Markdown: what ran where, how, the table, the checks."""
    lines = [
        f"# GEMM kernels under Nsight Compute on the {meta.get('gpu', 'GPU')}",
        "",
        "One launch of each, its counters read by ncu (caches flushed before each replay, "
        "clocks as found); 'vs torch' is torch.matmul's GPU time over the kernel's; "
        "'tensor busy' the tensor pipe's share of the elapsed cycles; 'SM balance' the "
        "least active SM's active cycles over the most active's.",
        "",
    ]
    if meta.get("command"):
        lines += [f"Command: `{meta['command']}` ({meta.get('date', '')}).", ""]
    lines += ["| " + " | ".join(HEADER) + " |", "|" + "---|" * len(HEADER)]
    for row in table_rows(launches):
        lines.append("| " + " | ".join(c.replace("|", "/") for c in row) + " |")
    checks = meta.get("checks") or []
    if checks:
        lines += ["", "Checks against the float64 product (NaN-poisoned output):", ""]
        lines += [f"- `{c['shape']}` `{c['config']}`: {c['verdict']}" for c in checks]
    return "\n".join(lines) + "\n"


def print_table(launches: Sequence[LaunchProfile]) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(*HEADER, title="one launch each under ncu")
    for row in table_rows(launches):
        table.add_row(*row)
    # Piped into a file or a CI log, rich would fold the table into 80 columns.
    Console(width=None if sys.stdout.isatty() else 200).print(table)


def show(launches: Sequence[LaunchProfile], meta: dict, markdown: Path | None) -> None:
    """The table on the terminal, and as Markdown in ``markdown`` where one is given."""
    print_table(launches)
    if markdown:
        markdown.write_text(render_markdown(launches, meta))
        print(f"table written to {markdown}")


def find_ncu(given: str | None) -> str | None:
    """The ncu to run: ``given``, else the one on PATH, else the toolkit's default."""
    if given:
        return given if shutil.which(given) or Path(given).is_file() else None
    found = shutil.which("ncu")
    if found:
        return found
    return str(NCU_FALLBACK) if NCU_FALLBACK.is_file() else None


def ncu_command(ncu: str, child: Sequence[str]) -> list[str]:
    """ncu around ``child``: profile only between cudaProfilerStart and Stop, every
    process, clocks left alone, NVTX ranges kept, the raw page as CSV on stdout."""
    sections = [arg for s in SECTIONS for arg in ("--section", s)]
    return [
        ncu,
        "--profile-from-start",
        "off",
        "--target-processes",
        "all",
        "--clock-control",
        "none",
        "--nvtx",
        *sections,
        "--csv",
        "--page",
        "raw",
        *child,
    ]


def range_name(shape: GemmShape, what: str) -> str:
    return f"{shape.id}{RANGE_SEP}{what}"


def run_child(shapes: list[GemmShape], configs: list[GemmConfig] | None, meta_path: Path) -> int:
    """Under ncu: build, check and launch each (shape, config) once in its range, then
    torch.matmul. Each check goes to ``meta_path`` as it is made (a config that fails to
    build or run is one, and the rest go on). 4 where a result was wrong, else 5 where a
    config failed."""
    import torch

    from harness.measure import device
    from harness.measure.correctness import check_launch
    from harness.ops.gemm import GEMM, matmul_fn
    from harness.ops.registry import build_combination
    from kernels.tuned import pick_config

    spec = device.DeviceSpec.read()
    meta: dict = {"gpu": spec.name, "sm_count": spec.sm_count, "checks": []}
    for shape in shapes:
        chosen = configs or [pick_config(shape, spec.name, spec.sm_count)]
        inputs = GEMM.inputs(shape, seed=0)
        for config in chosen:
            try:
                bind = build_combination(GEMM, shape, config)  # for the visible GPU
                check = check_launch(GEMM, shape, bind, seed=1)
            except Exception as err:  # a config that cannot build or launch here
                verdict, status, bind = f"FAIL (build or launch: {err})", FAILED, None
            else:
                verdict, status = str(check), OK if check.ok else WRONG
            meta["checks"].append(
                {"shape": shape.id, "config": config.id, "verdict": verdict, "status": status}
            )
            meta_path.write_text(json.dumps(meta) + "\n")
            print(f"{shape.id} {config.id}: {verdict}", file=sys.stderr, flush=True)
            if bind is None:
                continue
            launch = bind(inputs)
            launch()  # warm: module load and first-launch work stay out of the profile
            torch.cuda.synchronize()
            _profiled(range_name(shape, config.id), launch)
        matmul = matmul_fn(shape, inputs.a, inputs.b)
        matmul()
        torch.cuda.synchronize()
        _profiled(range_name(shape, TORCH), matmul)
    return exit_status(meta["checks"])


def exit_status(checks: Sequence[dict]) -> int:
    """4 where a check found a wrong result, else 5 where a config failed, else 0."""
    statuses = {c.get("status") for c in checks}
    if WRONG in statuses:
        return EXIT_INCORRECT
    return EXIT_FAILED if FAILED in statuses else 0


def _profiled(name: str, launch) -> None:
    import torch

    torch.cuda.nvtx.range_push(name)
    torch.cuda.profiler.start()
    launch()
    torch.cuda.synchronize()
    torch.cuda.profiler.stop()
    torch.cuda.nvtx.range_pop()


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=PROG, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--shape", type=_shape, nargs="+", metavar="MxNxK", help="shapes to profile")
    p.add_argument(
        "--shapes",
        type=Path,
        metavar="FILE",
        help="or every shape of an off-table shapes file (benchmarks.offtable's format), each "
        "in its own dtype and layout",
    )
    p.add_argument("--dtype", choices=DTYPES, help="operands' dtype of --shape (default float16)")
    p.add_argument(
        "--layout", choices=LAYOUTS, help="NN, or NT: B given as [N, K], of --shape (default NN)"
    )
    p.add_argument(
        "--config",
        type=config_id,
        nargs="+",
        metavar="ID",
        help="configs to profile on every shape (default: the heuristic's pick per shape)",
    )
    p.add_argument("--ncu", help=f"the ncu to run (default: on PATH, else {NCU_FALLBACK})")
    p.add_argument("--csv", type=output_file, help="keep ncu's raw page here (and a .meta.json)")
    p.add_argument("--markdown", type=output_file, help="write the table as Markdown here")
    p.add_argument(
        "--replay", type=Path, metavar="CSV", help="render a kept --csv again (no GPU, no ncu)"
    )
    p.add_argument("--child", type=Path, help=argparse.SUPPRESS)  # the process ncu starts
    return p


def _meta_path(csv_path: Path) -> Path:
    return csv_path.with_suffix(".meta.json")


def _fail(message: str, status: int = EXIT_FAILURE) -> int:
    print(f"{PROG}: error: {message}", file=sys.stderr)
    return status


def _combinations(args) -> tuple[list[GemmShape], str | None]:
    """The shapes, and the first config that cannot run on one of them (its rule)."""
    from harness.ops.gemm import GEMM

    if args.shapes:
        from benchmarks.offtable import load_shapes

        shapes = [entry.shape for entry in load_shapes(args.shapes)]
    else:
        dtype, layout = args.dtype or "float16", args.layout or "NN"
        shapes = [GemmShape(m, n, k, dtype, layout) for m, n, k in args.shape]
    for shape in shapes:
        for config in args.config or []:
            try:
                GEMM.validate(shape, config)
            except ValueError as err:
                return shapes, f"--config {config.id} on {shape.id}: {err}"
    return shapes, None


def replay(args) -> int:
    try:
        launches = parse_raw(args.replay.read_text())
    except OSError as err:
        return _fail(f"--replay {args.replay}: cannot read it ({err.strerror})")
    except ValueError as err:
        return _fail(f"--replay {args.replay}: {err}")
    meta_file, meta = _meta_path(args.replay), {}
    if meta_file.is_file():
        try:
            meta = json.loads(meta_file.read_text())
        except json.JSONDecodeError as err:  # the table stands without it
            print(
                f"{PROG}: warning: {meta_file}: not valid JSON ({err}); rendering without "
                "the GPU, command and checks",
                file=sys.stderr,
            )
    show(launches, meta, args.markdown)
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.replay:
        if args.shape or args.shapes or args.config or args.csv or args.child:
            parser.error(
                "--replay: renders a kept record; give no --shape, --shapes, --config or --csv"
            )
        return replay(args)
    if bool(args.shape) == bool(args.shapes):
        parser.error("--shape/--shapes: give one or more MxNxK, or a shapes file (not both)")
    if args.shapes and (args.dtype or args.layout):
        parser.error("--dtype/--layout: only with --shape; a shapes file gives each its own")
    try:
        shapes, bad = _combinations(args)
    except ValueError as err:  # a shape's own rule (dims, dtype), or a bad shapes file
        return _fail(f"{'--shapes' if args.shapes else '--shape'}: {err}")
    if bad:
        return _fail(bad)
    if args.child:
        return run_child(shapes, args.config, args.child)

    import torch

    if not torch.cuda.is_available():
        return _fail("no CUDA device: ncu profiles kernels on a GPU", EXIT_NO_GPU)
    ncu = find_ncu(args.ncu)
    if ncu is None:
        where = args.ncu or f"PATH or {NCU_FALLBACK}"
        return _fail(f"--ncu: no Nsight Compute at {where}; install it or pass --ncu", EXIT_NO_GPU)
    interrupted = False
    with tempfile.TemporaryDirectory() as tmp:
        meta_path = Path(tmp) / "meta.json"
        # ncu writes the raw page straight into the kept file: an interrupted run keeps
        # what it profiled.
        page_path = args.csv or Path(tmp) / "page.csv"
        child = [sys.executable, "-m", "benchmarks.profile_gemm", *_without_outputs(argv)]
        child += ["--child", str(meta_path)]
        print(f"profiling under {ncu} (each kernel is replayed once per counter pass)")
        with open(page_path, "w") as page:
            try:
                code = subprocess.run(ncu_command(ncu, child), stdout=page, text=True).returncode
            except KeyboardInterrupt:
                interrupted, code = True, EXIT_INTERRUPTED
        text = page_path.read_text()
        child_meta = json.loads(meta_path.read_text()) if meta_path.is_file() else {}
    meta = {
        **child_meta,
        "date": dt.date.today().isoformat(),
        "command": shlex.join([*PROG.split(), *argv]),
    }
    if args.csv:
        _meta_path(args.csv).write_text(json.dumps(meta, indent=1) + "\n")
    try:
        launches = parse_raw(text)
    except ValueError as err:
        if interrupted:
            return EXIT_INTERRUPTED
        return _fail(f"ncu exited with {code} and its output has {err}")
    show(launches, meta, args.markdown)
    if interrupted:
        print("interrupted: the table holds the launches profiled before", file=sys.stderr)
        return EXIT_INTERRUPTED
    status = exit_status(meta.get("checks", []))
    if code not in (0, status):
        return _fail(f"ncu exited with {code} (the table holds what it profiled)")
    return status


def _without_outputs(argv: Sequence[str]) -> list[str]:
    """``argv`` less the options that name files the parent writes (the child writes
    none) and ``--ncu``, with their values."""
    out, skip = [], False
    for arg in argv:
        if skip:
            skip = False
            continue
        name = arg.split("=", 1)[0]
        if name in ("--csv", "--markdown", "--ncu"):
            skip = "=" not in arg
            continue
        out.append(arg)
    return out


if __name__ == "__main__":
    sys.exit(main())
