"""Time torch.matmul and the TileLang GEMM over a sweep of shapes and configs.

    python3 -m benchmarks.bench_gemm --m 128 --n 128 --k 128 --warmup 10 --repeat 50 --run-tilelang
    python3 -m benchmarks.bench_gemm --m 4096 --n 4096 --k 4096 --threads 128 256 \\
        --num-stages 2 3 4 --run-tilelang --report reports/stage04_gemm.md

Every list option sweeps: the run covers the product of all values. Each finished row is
appended to ``--jsonl`` at once, tagged with the run's id (its meta line says GPU, start
time and command), so an interrupted sweep keeps what it measured; Ctrl-C prints and
reports the rows done so far, and so does SIGTERM (``timeout``, a CI job's time limit).
``--resume`` with ``--jsonl`` goes on where an interrupted run of the same command
stopped: a shape that one earlier run in the file timed whole (every config planned for
it, on the same GPU model, libraries and timing settings) is skipped; a shape cut short
is timed again, whole, in the new run, since configs are compared within one run
(``harness.report.resume``). ``--report`` and ``--jsonl`` are checked for being writable
before anything is measured.

A config that fails to compile or run becomes a failed row that carries its error (in the
table, the report and the JSON lines) and the sweep goes on. So does a combination of the
list options that the config validator rejects (block sizes that are not multiples of 16,
a tile over the shared-memory budget...): it is a failed row with the validator's message,
and no GPU time is spent on it. A config named with ``--config`` is checked as it is
parsed instead, and a sweep in which no combination is valid is refused (status 2).

``--tune-first-use`` runs each shape with one config instead of the swept ones: the
committed table's (``kernels/tuned_configs.json``), else the one this GPU tuned for the
shape earlier (the local first-use cache, ``harness.measure.first_use_cache``), else one
tuned now within ``--tune-budget`` seconds and recorded there; each shape's line says
which. The local cache never reaches asv or the gate: they run the table's configs.

``--around-pick CHANGE ...`` times, instead of a sweep, each shape's pick on this GPU
(``kernels.tuned.pick_config``) and the pick with each change (``kernels.changes``:
``num_stages=+1``, ``block_n=144,multicast=b``, or a whole config id beside every pick);
a change that gives no valid config, or one the shape cannot run, is a note rather than a
row, and each row's ``config_source`` names its change ("pick" for the pick).

``--replay FILE`` re-renders a recorded sweep without a GPU. A file that holds several
runs needs ``--run ID`` (the error lists them); rows from before run ids are one legacy
run per meta line. A torn line is skipped with a note; a row that does not match the
schema, or has a negative or NaN timing, is refused with its line number.

Exit status: 0 every row measured and correct; 2 bad input (nothing measured); 3 no GPU;
4 a kernel gave a wrong result; 5 a config failed to build or run, or was rejected
(the rest are measured and reported); 6 a kernel's launch never finished (the run stops
there; the rows before it are kept); 130 interrupted (what finished is kept).
"""

from __future__ import annotations

import argparse
import datetime as dt
import hashlib
import itertools
import json
import os
import shlex
import sys
from dataclasses import dataclass
from pathlib import Path

from harness.cli import (
    EXIT_FAILED,
    EXIT_INCORRECT,
    EXIT_NO_GPU,
    config_change,
    config_id,
    count,
    output_file,
    positive_int,
    progress_bar,
    sigterm_as_interrupt,
    sweep_status,
)
from harness.measure import device, metrics
from harness.measure.timing import BACKENDS, check_counts
from harness.report.stage04 import (
    TABLE_HEAD,
    config_cells,
    config_label,
    fmt_optional,
    requested_id,
    short_error,
)
from kernels import DTYPES, LAYOUTS, GemmConfig, GemmShape

PROG = "python3 -m benchmarks.bench_gemm"
# The GemmConfig fields the list options sweep, in the order of their product.
SWEPT = ("block_m", "block_n", "block_k", "threads", "num_stages", "swizzle")
DEFAULTS = {f: getattr(GemmConfig(), f) for f in SWEPT}


def _shape(text: str) -> tuple[int, int, int]:
    parts = text.lower().split("x")
    if len(parts) != 3:
        raise argparse.ArgumentTypeError(f"{text!r} must be MxNxK, e.g. 4096x4096x4096")
    return tuple(positive_int(x) for x in parts)


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
        epilog="Needs a CUDA GPU; without one it says so and exits with status 3. Exit status: "
        "0 all rows measured and correct, 2 bad input, 4 a wrong result, 5 a config failed "
        "to build or run or was rejected (the other rows are kept), 6 a kernel's launch never "
        "finished (the run stops there, the rows before it kept), 130 interrupted.",
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
    g.add_argument(
        "--shapes",
        type=Path,
        metavar="FILE",
        help="a shapes file in python3 -m benchmarks.offtable's --shapes format (e.g. "
        "reports/offtable_random5_shapes.json): each entry in its own dtype and layout, "
        "instead of --shape, --m, --n, --k, --dtype and --layout",
    )
    g.add_argument("--dtype", nargs="+", choices=sorted(DTYPES), default=["float16"])
    g.add_argument(
        "--layout",
        nargs="+",
        choices=LAYOUTS,
        default=["NN"],
        help="NN: B is [K, N]; NT: B is [N, K] and C = A @ B.T (attention's QK^T)",
    )
    c = p.add_argument_group(
        "kernel config (each takes one or more values)",
        "The sweep is the product of the six knobs, each defaulting to the training-stage "
        "baseline's value, plus every --config. With --config and no knob, only the "
        "configs named are timed.",
    )
    for field, help_text in (
        ("block_m", "rows of C a block computes"),
        ("block_n", "columns of C a block computes"),
        ("block_k", "K a pipeline stage holds"),
        ("threads", "threads of a block"),
        ("num_stages", "pipeline stages"),
    ):
        c.add_argument(
            f"--{field.replace('_', '-')}",
            type=positive_int,
            nargs="+",
            default=argparse.SUPPRESS,  # absent unless given: --config alone sweeps no product
            help=f"{help_text} (default: {DEFAULTS[field]})",
        )
    c.add_argument(
        "--swizzle",
        type=count,
        nargs="+",
        default=argparse.SUPPRESS,
        help=f"block rasterisation panel (T.use_swizzle); 0 is off (default: {d.swizzle})",
    )
    c.add_argument(
        "--config",
        type=config_id,
        nargs="+",
        default=[],
        metavar="ID",
        help="configs by id, e.g. b128x256x64_t256_s3: alone, the sweep is these; with "
        "knobs, these join the knobs' product",
    )
    c.add_argument(
        "--around-pick",
        type=config_change,
        nargs="*",
        metavar="CHANGE",
        help="instead of the knobs and --config: time each shape's pick on this GPU "
        "(kernels.tuned.pick_config: the tuned table's row, else the heuristic) and the pick "
        "with each CHANGE, FIELD=VALUE[,FIELD=VALUE...] over GemmConfig's fields, +N/-N "
        "moving a number: num_stages=+1, block_n=144,multicast=b, async_mma=false; or a "
        "whole config id (b128x208x64_t256_s4_w8_pr_e), the same config beside every pick. "
        "A change that gives no valid config, or one the shape cannot run, is noted and not "
        "timed. Each row's config_source says which change made it",
    )
    add_timing_options(p)
    add_first_use_options(p, "--tune-first-use")
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
    o.add_argument(
        "--workers",
        type=positive_int,
        default=None,
        help="processes that compile the sweep's kernels in parallel before it is timed "
        "(default: one per core but one)",
    )
    o.add_argument(
        "--report", type=output_file, help="write the stage-04 markdown report (and its plots) here"
    )
    o.add_argument(
        "--jsonl",
        type=output_file,
        help="append one JSON line per finished row here, tagged with the run's id",
    )
    o.add_argument(
        "--resume",
        action="store_true",
        help="with --jsonl: skip the shapes an earlier run of the same command in that file "
        "timed whole (same GPU model, libraries and timing settings); time the rest in a new "
        "run. Where the file does not exist yet, everything is timed",
    )
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
        help="with --tuned: the tuner's log, for the knob comparisons and the TFLOP/s-per-config "
        "plot of square4096",
    )
    o.add_argument(
        "--retune-log",
        type=Path,
        nargs="+",
        metavar="JSONL",
        help="with --tuned: logs of focused re-tunes (tune_gemm --only), each named in the "
        "Tuned Configs section with the rows its winners set; their timings join no knob "
        "comparison",
    )
    o.add_argument(
        "--offtable",
        type=Path,
        nargs="+",
        metavar="JSON",
        help="with --tuned: off-table records (python3 -m benchmarks.offtable --json), each "
        "a table of shapes nobody tuned; the first one's shapes join the roofline",
    )
    o.add_argument(
        "--replay",
        type=Path,
        metavar="JSONL",
        help="no measuring: print the table (and --report) from a recorded --jsonl file",
    )
    o.add_argument(
        "--run",
        metavar="ID",
        help="with --replay: the run to render (an id or a unique prefix), for a file that "
        "holds several",
    )
    o.add_argument("--title", default="Stage 04: TileLang GEMM", help="report title")
    return p


def add_timing_options(p: argparse.ArgumentParser, description: str | None = None) -> None:
    """The timing options every benchmark command takes: launch counts, timer, seed."""
    t = p.add_argument_group("timing", description)
    t.add_argument("--warmup", type=count, default=10, help="warm-up launches (not timed)")
    t.add_argument("--repeat", type=positive_int, default=50, help="timed launches")
    t.add_argument(
        "--backend",
        choices=BACKENDS,
        default="event",
        help="event: CUDA events per launch; cupti: each launch's kernel time from CUPTI",
    )
    t.add_argument("--seed", type=count, default=0, help="seed of the random inputs")


def add_first_use_options(p: argparse.ArgumentParser, flag: str) -> None:
    """``flag`` (opt in to tuning on first use) and the budget of one shape's tuning."""
    from harness.measure.first_use import Budget

    f = p.add_argument_group(
        "first-use tuning",
        "a shape the committed table lacks is tuned on this GPU once, within a budget, and "
        "its winner kept in the local first-use cache ($TILELANG_GEMM_PERF_CACHE, default "
        "~/.cache/tilelang-gemm-perf); asv and the gate never read it",
    )
    f.add_argument(
        flag,
        action="store_true",
        help="one config per shape: the table's, else the first-use cache's, else tuned now",
    )
    f.add_argument(
        "--tune-budget",
        type=float,
        default=Budget().seconds,
        metavar="SECONDS",
        help="wall-clock seconds one shape's tuning may take (compiling included); it ends "
        "at most one candidate past them",
    )
    f.add_argument(
        "--tune-candidates",
        type=positive_int,
        default=Budget().candidates,
        metavar="N",
        help="configs one shape's tuning tries at most (the heuristic's pick first)",
    )


def first_use_budget(args, flag: str):
    """The ``Budget`` of ``args``; ValueError naming the option where it is invalid or
    given without ``flag``."""
    from harness.measure.first_use import Budget

    if not getattr(args, flag.lstrip("-").replace("-", "_")):
        default = Budget()
        given = (args.tune_budget, args.tune_candidates) != (default.seconds, default.candidates)
        if given:
            raise ValueError(f"--tune-budget/--tune-candidates: only with {flag}")
        return None
    try:
        return Budget(args.tune_budget, args.tune_candidates)
    except ValueError as err:
        raise ValueError(f"--tune-budget: {err}") from None


@dataclass(frozen=True, slots=True)
class Rejected:
    """A combination of the list options that the config validator refused: a failed
    row, with no GPU time spent on it."""

    requested: dict[str, int]
    error: str

    @property
    def label(self) -> str:
        return requested_id(self.requested)


def plan(args) -> tuple[list[GemmShape], list[GemmConfig | Rejected]]:
    """Shapes of the sweep, and its configs in the order of the product: each a valid
    GemmConfig, or Rejected with the validator's message. Raises ValueError when no
    valid config remains."""
    if args.shapes is not None:
        from benchmarks.offtable import load_shapes  # it builds on this module

        try:
            shapes = [entry.shape for entry in load_shapes(args.shapes)]
        except ValueError as err:
            raise ValueError(f"--shapes: {err}") from None
    else:
        sizes = args.shape or list(itertools.product(args.m, args.n, args.k))
        shapes = [
            GemmShape(m, n, k, dtype, layout)
            for (m, n, k), dtype, layout in itertools.product(sizes, args.dtype, args.layout)
        ]
    entries: list[GemmConfig | Rejected] = []
    if getattr(args, "around_pick", None) is not None:
        return shapes, entries  # each shape's own configs: around_pick()
    knobs = [getattr(args, f, None) for f in SWEPT]
    product = (
        itertools.product(*(v or [DEFAULTS[f]] for f, v in zip(SWEPT, knobs, strict=True)))
        if any(knobs) or not args.config
        else ()
    )
    for values in product:
        fields = dict(zip(SWEPT, values, strict=True))
        try:
            config = GemmConfig(**fields)
        except ValueError as err:
            entries.append(Rejected(fields, str(err)))
        else:
            if config not in entries:
                entries.append(config)
    entries += [c for c in args.config if c not in entries]
    if not any(isinstance(e, GemmConfig) for e in entries):
        lines = [f"{e.label}: {e.error}" for e in entries]
        raise ValueError("no valid kernel config in the sweep:\n  " + "\n  ".join(lines))
    return shapes, entries


@dataclass(frozen=True, slots=True)
class Around:
    """Under ``--around-pick``: each shape's configs (by shape id), each with the change
    that made it ("pick" for the pick), and a note per change left out."""

    configs: dict[str, list[tuple[GemmConfig, str]]]
    notes: list[str]

    def planned(self) -> dict[str, set]:
        return {shape: {c.id for c, _ in pairs} for shape, pairs in self.configs.items()}


def around_pick(changes: list, shapes: list[GemmShape], gpu: str, sms: int) -> Around:
    """Each shape's pick for ``gpu`` of ``sms`` SMs and the pick with each of ``changes``
    (``kernels.changes.ConfigChange``), less those that give no valid config, one the
    shape cannot run (``check_combination``) or the same config twice."""
    from kernels.gemm import check_combination
    from kernels.tuned import pick_config

    configs: dict[str, list[tuple[GemmConfig, str]]] = {}
    notes: list[str] = []
    for shape in shapes:
        pick = pick_config(shape, gpu, sms)
        mine = [(pick, "pick")]
        for change in changes:
            try:
                config = change.apply(pick)
                check_combination(shape, config)
            except ValueError as err:
                notes.append(f"{shape.id}: {pick.id} with {change.text}: not timed ({err})")
                continue
            same = next((why for c, why in mine if c == config), None)
            if same is not None:
                notes.append(f"{shape.id}: {pick.id} with {change.text}: {config.id}, as {same}")
            else:
                mine.append((config, change.text))
        configs[shape.id] = mine
    return Around(configs, notes)


TABLE_COLUMNS = TABLE_HEAD  # the report's table, one list


def table_row(r) -> list[str]:
    if r.failed:
        correct = "FAILED"
    elif r.check is None:
        correct = "-"
    else:
        correct = f"{'ok' if r.check.ok else 'FAIL'} {r.check.rel_error:.1e}"
    return [
        str(r.shape.m),
        str(r.shape.n),
        str(r.shape.k),
        r.shape.dtype,
        r.shape.layout,
        *config_cells(r),
        f"{r.torch_ms:.4f}",
        fmt_optional(r.tilelang_ms, ".4f"),
        fmt_optional(r.tflops, ".1f"),
        fmt_optional(r.speedup, ".2f"),
        correct,
    ]


def print_table(results, console) -> None:
    from rich.markup import escape
    from rich.table import Table

    table = Table(title="GEMM latency (median); speedup = torch ms / tilelang ms", show_lines=False)
    for col in TABLE_COLUMNS:
        table.add_column(col, justify="left" if col in ("dtype", "layout", "correct") else "right")
    for r in results:
        table.add_row(*table_row(r))
    console.print(table)
    for r in results:
        if r.failed:
            what = f"{config_label(r)} at {r.shape.id}: {short_error(r.error)}"
            console.print(f"[red]FAILED[/] {escape(what)}", highlight=False)


def run_meta(args, argv: list[str]) -> dict:
    """What the numbers depend on: GPU, versions, start time, command and timing settings,
    and the run's id, which every row of the run carries."""
    now = dt.datetime.now(dt.timezone.utc)
    spec = device.DeviceSpec.read()
    gpu = spec.name
    command = shlex.join([*PROG.split(), *argv])
    # Two runs that append to one file from one host differ in pid or start time.
    digest = hashlib.sha1(f"{gpu}|{command}|{os.getpid()}|{now.isoformat()}".encode())
    return {
        "run": f"{now:%Y%m%d-%H%M%S}-{digest.hexdigest()[:6]}",
        "gpu": gpu,
        "date": now.date().isoformat(),
        "started": now.isoformat(timespec="seconds"),
        "command": command,
        "warmup": args.warmup,
        "repeat": args.repeat,
        "backend": args.backend,
        "seed": args.seed,
        **first_use_meta(getattr(args, "budget", None)),
        **around_meta(getattr(args, "around_pick", None)),
        **spec.record(),
        **device.versions(),
    }


def first_use_meta(budget) -> dict:
    """The run's first-use tuning settings for its meta record; nothing without it."""
    if budget is None:
        return {}
    from harness.measure.first_use_cache import cache_dir

    settings = {"budget_s": budget.seconds, "candidates": budget.candidates}
    return {"first_use": {**settings, "cache": str(cache_dir())}}


def around_meta(changes) -> dict:
    """The run's ``--around-pick`` changes for its meta record; nothing without it."""
    return {} if changes is None else {"around_pick": [c.text for c in changes]}


def load_run(path: Path, run: str | None = None):
    """The recorded run to replay (``harness.report.records.Run``) and notes on what was
    skipped. Raises RecordError (a ValueError) naming the line or listing the runs."""
    from harness.report.records import pick_run, read_runs

    runs, notes = read_runs(path)
    return pick_run(path, runs, run), notes


def tuned_data(
    report: Path,
    table_path: Path,
    log_path: Path | None,
    gpu: str,
    warn,
    offtable_paths=(),
    retune_paths=(),
):
    """What the report's Tuned Configs section is drawn from (``stage04.Tuned``); its
    plots are written next to ``report``."""
    from harness.report import plots
    from harness.report.offtable import Record
    from harness.report.records import read_jsonl
    from harness.report.stage04 import (
        KNOB_CASE,
        Retune,
        Tuned,
        roofline_points,
        sweep_bars,
        tuned_rows,
    )
    from kernels.tuned import case_shape, gpu_entry

    table = json.loads(table_path.read_text())
    if gpu not in table:
        raise ValueError(f"{table_path} has no tuned configs for {gpu!r}")
    sms, raw = gpu_entry(table_path, gpu, table[gpu])
    rows = tuned_rows(raw)
    if not rows:
        raise ValueError(f"{table_path} has no tuned configs for {gpu!r}")
    drawn, meta, log = {}, {}, []
    offtable = []
    for path in offtable_paths:
        try:
            offtable.append(Record.from_dict(json.loads(path.read_text())))
        except (OSError, ValueError, KeyError, TypeError) as err:
            raise ValueError(f"--offtable {path}: not an off-table record ({err})") from None
    stem = report.with_suffix("")
    peaks = device.peaks_for(gpu)
    if peaks is None:
        warn(f"--tuned: no roofline plot: {device.no_peaks(gpu)} in {device.PEAKS_FILE.name}")
    else:
        path = plots.roofline(
            roofline_points(rows, offtable[:1]),
            Path(f"{stem}_roofline.png"),
            f"Tuned GEMMs on the {gpu}",
            peaks.float16_tflops,
            peaks.hbm_tbps,
        )
        drawn["roofline"] = path.name
    if log_path is not None:
        records, notes = read_jsonl(log_path)
        for note in notes:
            warn(f"--tune-log: {note}")
        for _, record in records:
            if "meta" in record:
                meta = record["meta"]
            else:
                log.append(record)
        panels = []
        for dtype in ("float16", "bfloat16"):
            shape = case_shape(KNOB_CASE, dtype)
            bars = sweep_bars(log, shape)
            torch = next((r.torch_tflops for r in rows if r.shape == shape), None)
            if bars:
                panels.append((f"{shape.id}: {len(bars)} configs", bars, torch))
        if panels:
            path = plots.config_sweep(
                panels, Path(f"{stem}_tflops_4096.png"), f"TFLOP/s per config, {gpu}"
            )
            drawn["sweep"] = path.name
    retunes = []
    for path in retune_paths:
        records, notes = read_jsonl(path)
        for note in notes:
            warn(f"--retune-log: {note}")
        retunes.append(Retune.from_log(path, [r for _, r in records], rows))
    return Tuned(rows, gpu, sms, meta, log, drawn, offtable, retunes)


def launch_row(case, config, console, write) -> None:
    """Host launch overhead of torch.matmul (``config`` None) or one TileLang kernel."""
    from harness.measure.timing import measure_launch

    fn = case.torch_fn if config is None else case.tilelang_fn(config)
    samples = measure_launch(fn).samples_ms
    us = metrics.median(samples) * 1e3
    what = "torch.matmul" if config is None else config.id
    console.print(f"launch overhead {case.shape.id} {what}: {us:.1f} us (median of {len(samples)})")
    write({"shape": case.shape.id, "config": what, "launch_us": us, "samples_ms": list(samples)})


def _open_jsonl(path: Path):
    """Append to ``path``; a line torn by an interrupted run before gets its line end, so
    this run's meta line stays a line of its own."""
    torn = False
    if path.exists() and path.stat().st_size:
        with path.open("rb") as f:
            f.seek(-1, os.SEEK_END)
            torn = f.read(1) != b"\n"
    out = path.open("a")
    if torn:
        out.write("\n")
    return out


def _error_text(err: BaseException) -> str:
    return f"{type(err).__name__}: {err}"


# What a run's figures depend on besides the GPU and the libraries: a run resumes only
# from runs that match it here (harness.report.resume).
TIMING_KEYS = ("warmup", "repeat", "backend", "seed", "first_use")


def resumed(args, meta: dict, shapes: list[GemmShape], entries: list):
    """With ``--resume``: the shapes of the sweep (``plan``) that earlier runs in
    ``--jsonl`` timed whole (``resume.Done``); none where the file does not exist yet.
    Raises ValueError (a file that is not a sweep record)."""
    from harness.report import resume
    from harness.report.records import read_runs

    if not args.jsonl.exists():
        return resume.Done({})
    runs, _ = read_runs(args.jsonl)
    if args.budget is not None:
        configs = None  # a first-use pick: any config the earlier run picked
    elif args.run_tilelang:
        configs = {e.id for e in entries if isinstance(e, GemmConfig)}
    else:
        configs = {None}  # torch.matmul's row alone
    planned = {s.id: configs for s in shapes}
    if getattr(args, "around", None) is not None:
        planned = args.around.planned()
    return resume.sweep_done(runs, meta, (*resume.DEVICE_KEYS, *TIMING_KEYS), planned)


def run(args, console, meta: dict, planned: tuple, skip=frozenset()) -> tuple[list, bool]:
    """Measure the sweep (``planned``: ``plan``'s shapes and configs), less the shapes whose
    ids are in ``skip`` (timed whole before: ``--resume``); returns the finished rows and
    whether it was interrupted (Ctrl-C or SIGTERM). A config that fails to build or run is
    a failed row, and the sweep goes on."""
    from rich.markup import escape

    from harness.measure.cases import Case, CaseResult
    from harness.measure.correctness import on_hang

    shapes, entries = planned
    shapes = [s for s in shapes if s.id not in skip]
    if args.run_tilelang:
        for e in entries:
            if isinstance(e, Rejected):
                console.print(f"[yellow]{escape(e.label)}: {escape(e.error)} (a failed row)[/]")
    timing = {"warmup": args.warmup, "repeat": args.repeat, "backend": args.backend}
    todo = entries if args.run_tilelang else [None]
    around: Around | None = getattr(args, "around", None)
    results: list[CaseResult] = []
    jsonl = _open_jsonl(args.jsonl) if args.jsonl else None

    def write(record: dict) -> None:
        if jsonl:
            jsonl.write(json.dumps({"run": meta["run"], **record}) + "\n")
            jsonl.flush()

    if jsonl:
        jsonl.write(json.dumps({"meta": meta}) + "\n")

    def keep(what: str) -> None:
        """Before a hung launch ends the process: the rows so far, and where they are."""
        if results:
            print_table(results, console)
        where = f"kept in {args.jsonl} (run {meta['run']})" if jsonl else "not saved (no --jsonl)"
        console.print(f"{len(results)} rows before {what}: {where}", highlight=False)

    progress = progress_bar(console, transient=True)
    try:
        with sigterm_as_interrupt(), progress, on_hang(keep):
            if around is not None:
                pairs = [(s, c) for s in shapes for c, _ in around.configs[s.id]]
            else:
                pairs = [(s, c) for s in shapes for c in todo if isinstance(c, GemmConfig)]
            if args.run_tilelang and args.budget is None:
                precompile_sweep(pairs, progress, args.workers)
            total = len(pairs) if around is not None else len(shapes) * len(todo)
            task = progress.add_task("sweep", total=total)
            for shape in shapes:
                sources: dict = {}
                if args.budget is not None:
                    progress.update(task, description=f"{shape.id}: config")
                    pick = first_use_pick(shape, args, progress.console)
                    todo, sources = [pick.config], {pick.config: pick.source}
                elif around is not None:
                    todo, sources = (
                        [c for c, _ in around.configs[shape.id]],
                        dict(around.configs[shape.id]),
                    )
                progress.update(task, description=f"{shape.id}: torch.matmul")
                case = Case(shape, seed=args.seed)
                torch_timing = case.time_torch(**timing)
                if args.launch:
                    launch_row(case, None, console, write)
                for cfg in todo:
                    if cfg is None:
                        row = CaseResult(shape, None, torch_timing)
                    elif isinstance(cfg, Rejected):
                        row = CaseResult(
                            shape, None, torch_timing, error=cfg.error, requested=cfg.requested
                        )
                    else:
                        progress.update(task, description=f"{shape.id} {cfg.id}")
                        row = _measure(case, cfg, torch_timing, timing, args, console, write)
                    results.append(row)
                    source = sources.get(cfg) if isinstance(cfg, GemmConfig) else None
                    write({**row.to_dict(), **({"config_source": source} if source else {})})
                    progress.advance(task)
    except KeyboardInterrupt:
        console.print(f"[red]interrupted[/]: keeping the {len(results)} rows measured so far")
        return results, True
    finally:
        if jsonl:
            jsonl.close()
    return results, False


def precompile_sweep(pairs: list[tuple[GemmShape, GemmConfig]], progress, workers) -> None:
    """Compile the sweep's (shape, config) pairs in parallel into TileLang's disk cache
    before the first timing (one compile is 3-5 s on one core); a kernel that fails here
    fails again in its own row, with its error."""
    from harness.suite.precompile import compile_gemms

    if len(pairs) > 1:  # one kernel: its row compiles it
        compile_gemms(pairs, progress, workers)


def first_use_pick(shape: GemmShape, args, console):
    """``shape``'s config under ``--tune-first-use`` (``first_use.tuned_config`` on the
    visible GPU), its tuning's progress and its source printed."""
    from harness.measure.first_use import tuned_config

    def say(line: str) -> None:
        console.print(line, markup=False, highlight=False)

    pick = tuned_config(shape, device.DeviceSpec.read(), budget=args.budget, say=say)
    say(f"config {pick.line(shape)}")
    return pick


def _measure(case, cfg: GemmConfig, torch_timing, timing: dict, args, console, write):
    """One config's row: checked, timed and (with --launch) its launch overhead; or, when
    it fails to build or run, a row with the error."""
    from rich.markup import escape

    from harness.measure.cases import CaseResult

    try:
        check = case.check(cfg, seed=args.seed + 1)
        row = CaseResult(case.shape, cfg, torch_timing, case.time_tilelang(cfg, **timing), check)
        if args.launch:
            launch_row(case, cfg, console, write)
    except Exception as err:  # a config that fails to build or launch is a row, not the end
        error = _error_text(err)
        console.print(f"[red]{case.shape.id} {cfg.id} failed:[/] {escape(short_error(error))}")
        return CaseResult(case.shape, cfg, torch_timing, error=error)
    return row


def exit_status(results, interrupted: bool) -> int:
    incorrect = any(r.check is not None and not r.check.ok for r in results)
    return sweep_status(interrupted, incorrect, any(r.failed for r in results))


def picks_configs(parser, args, flag: str, what: str, also: tuple[str, ...] = ()) -> None:
    """Where ``flag`` chooses each shape's configs itself: refuse the options that would
    choose them too (the knobs, ``--config``, ``also``) and ``--replay``, naming them, and
    run the kernels."""
    swept = [f"--{f.replace('_', '-')}" for f in SWEPT if hasattr(args, f)]
    swept += ["--config"] if args.config else []
    swept += list(also)
    if swept:
        parser.error(f"{flag}: {what}, so it takes no {'/'.join(swept)}")
    if args.replay:
        parser.error(f"{flag}: measures; --replay renders a recorded run")
    args.run_tilelang = True


def main(argv: list[str] | None = None) -> int:
    from rich.console import Console

    parser = build_parser()
    args = parser.parse_args(argv)
    if args.shapes is not None:
        given = ["--shape"] if args.shape else []
        given += [
            f"--{f}"
            for f in ("m", "n", "k", "dtype", "layout")
            if getattr(args, f) != parser.get_default(f)
        ]
        if given:
            parser.error(
                f"--shapes: each entry names its own size, dtype and layout, so it takes no "
                f"{'/'.join(given)}"
            )
    try:
        check_counts(args.warmup, args.repeat)
        if not args.replay:
            plan(args)
    except ValueError as err:
        parser.error(str(err))
    if args.tuned and not args.report:
        parser.error("--tuned: adds a section to the report, so it needs --report")
    if args.tune_log and not args.tuned:
        parser.error("--tune-log: feeds the Tuned Configs section, so it needs --tuned")
    if args.retune_log and not args.tuned:
        parser.error("--retune-log: feeds the Tuned Configs section, so it needs --tuned")
    if args.offtable and not args.tuned:
        parser.error("--offtable: feeds the Tuned Configs section, so it needs --tuned")
    if args.run and not args.replay:
        parser.error("--run: picks a recorded run, so it needs --replay")
    if args.resume and (not args.jsonl or args.replay or args.report):
        parser.error(
            "--resume: goes on with the runs recorded in --jsonl, so it needs --jsonl, and "
            "measures, so it takes no --replay; nor --report, which would render the new "
            "run's rows alone (render a run of the file with --replay --run ID)"
        )
    try:
        args.budget = first_use_budget(args, "--tune-first-use")
    except ValueError as err:
        parser.error(str(err))
    if args.tune_first_use:
        picks_configs(parser, args, "--tune-first-use", "picks each shape's config")
    args.around = None
    if args.around_pick is not None:
        picks_configs(
            parser,
            args,
            "--around-pick",
            "times each shape's pick and the pick changed",
            ("--tune-first-use",) if args.tune_first_use else (),
        )
    given = [("--tuned", args.tuned), ("--tune-log", args.tune_log)]
    given += [("--offtable", p) for p in args.offtable or ()]
    for name, path in given + [("--retune-log", p) for p in args.retune_log or ()]:
        if path is not None and not path.is_file():
            parser.error(f"{name}={path}: no such file")
    # Wide when piped or logged: rich would otherwise squeeze the table into 80 columns.
    console = Console(width=None if sys.stdout.isatty() else 200)

    def warn(line: str) -> None:
        print(f"{PROG}: warning: {line}", file=sys.stderr)

    argv = sys.argv[1:] if argv is None else argv
    interrupted = False
    if args.replay:
        try:
            recorded, notes = load_run(args.replay, args.run)
        except (OSError, ValueError) as err:
            parser.error(f"--replay: {err}")
        for note in notes:
            warn(f"--replay: {note}")
        meta, results = dict(recorded.meta), list(recorded.rows)
        meta.setdefault("run", None if recorded.id.startswith("legacy") else recorded.id)
    else:
        reason = device.no_gpu_reason()
        if reason:
            print(f"{PROG}: error: {reason}; this command times kernels on a GPU", file=sys.stderr)
            return EXIT_NO_GPU
        meta = run_meta(args, argv)
        shapes, entries = plan(args)  # checked above: it raises nothing here
        if args.around_pick is not None:
            args.around = around_pick(args.around_pick, shapes, meta["gpu"], meta["sm_count"])
            for note in args.around.notes:
                console.print(note, markup=False, highlight=False)
        skip: frozenset = frozenset()
        if args.resume:
            try:
                done = resumed(args, meta, shapes, entries)
            except (OSError, ValueError) as err:
                parser.error(f"--resume: {err}")
            total = len(shapes)
            console.print(done.line(total), highlight=False)
            if len(done.runs) == total:
                console.print("nothing left to time")
                return 0
            skip = frozenset(done.runs)
            meta["resumes"] = sorted(set(done.runs.values()))
        console.print(f"run {meta['run']} on {meta['gpu']}")
        results, interrupted = run(args, console, meta, (shapes, entries), skip)
    if results:
        print_table(results, console)
    if args.report and results:
        from harness.report.stage04 import render_stage04

        args.report.parent.mkdir(parents=True, exist_ok=True)
        tuned = None
        if args.tuned:
            try:
                gpu = str(meta.get("gpu"))
                tuned = tuned_data(
                    args.report,
                    args.tuned,
                    args.tune_log,
                    gpu,
                    warn,
                    args.offtable or (),
                    args.retune_log or (),
                )
            except (OSError, ValueError, KeyError) as err:
                parser.error(f"--tuned: {err}")
        args.report.write_text(render_stage04(results, meta, title=args.title, tuned=tuned))
        console.print(f"report written to {args.report}")
    status = exit_status(results, interrupted)
    if status == EXIT_INCORRECT:
        console.print("[red]at least one kernel gave a wrong result[/]")
    elif status == EXIT_FAILED:
        failed = sum(r.failed for r in results)
        console.print(f"[red]{failed} config(s) failed to build or run (rows marked FAILED)[/]")
    return status


if __name__ == "__main__":
    sys.exit(main())
