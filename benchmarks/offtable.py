"""Measure the GEMM on shapes nobody tuned, with the config the project would pick.

    python3 -m benchmarks.offtable                                  # the committed list
    python3 -m benchmarks.offtable --rounds 8 --json reports/offtable_h200.json \\
        --markdown reports/offtable_h200.md
    python3 -m benchmarks.offtable --list --sms 132                 # the picks, no GPU
    python3 -m benchmarks.offtable --first-use --tune-budget 30     # tune what the table lacks

For each shape of ``--shapes`` (default: ``benchmarks/offtable_shapes.json``, shapes
outside ``kernels.tuned.CASES`` in the categories below, both dtypes, NN and NT):

1. the config is ``kernels.tuned.pick_config(shape, gpu, sms)``, with the GPU's name and
   SM count read from the device (``DeviceSpec.read``): the table's row where the GPU has
   one for the shape, otherwise the heuristic; the configs are compiled in parallel first;
   with ``--first-use``, a shape the table lacks takes this GPU's first-use tuning instead
   (``harness.measure.first_use``: the local cache's winner, else tuned now within
   ``--tune-budget`` seconds, the candidates compiled in parallel first, and recorded);
   each row names its config's source (table, first-use cache, tuned now, heuristic)
   and, after a first-use tuning, every candidate it timed (``tried``);
2. the kernel is checked once against a float64 reference on fresh inputs, into a
   NaN-poisoned output (``harness.measure.correctness``); a wrong result is not timed;
3. the kernel and torch.matmul are launched in turn, launch by launch, the L2 flushed
   before each (``harness.measure.versus``, the tuner's and the suite's way too: each
   launch's kernel time from CUPTI, or CUDA events where CUPTI records nothing),
   ``--rounds`` trials shared out over three input sets at addresses of their own
   (``versus.placed``: cuBLAS's time moves with where its operands lie); a trial's speedup is
   torch's mean latency over the kernel's (strays left out), and the shape's speedup is
   the median over trials, with their range.

A line per shape as it finishes, then the summary: the median speedup, the worst, and
the shapes below 0.90 (the goal: median >= 0.95, none below 0.90). ``--json`` and
``--markdown`` are rewritten after every shape, so a run that is killed keeps what it
finished; Ctrl-C and SIGTERM (``timeout``, a job's time limit) stop it after writing them.
``--resume`` goes on with the record in ``--json``: its shapes are kept and the others
measured into it, where it was measured the same way (the shapes file, rounds, timer,
warm-up, seed, first-use settings, GPU model and libraries; ``harness.report.resume``),
so one command, run again until it ends by itself (exit status not 130, nor 124 from
``timeout``), measures a list across interruptions; on a whole record it measures and
rewrites nothing (but a ``--markdown`` table that is missing, written again from it).

Categories (an entry names its own, and a shape that breaks its category's rule is refused;
an entry that leaves them out gets those whose rules it meets, none perhaps):
mid (M, N, K in 1000..4096), non_multiple (M or N not a multiple of 128), skinny_m
(M <= 128), thin_n (N <= 128), long_k (M <= 512, N <= 1024, K >= 16 max(M, N)), large
(M N >= 6144^2), short_k (K <= 256, M and N >= 1024: attention's scores).

Exit status: 0 every shape measured and correct (whether or not the goal is met); 2 bad
input; 3 no GPU; 4 a kernel gave a wrong result; 5 a config failed to build or run (the
other shapes are measured); 6 a kernel's launch never finished (the run stops there);
130 interrupted (what finished is written).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import shlex
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from benchmarks.bench_gemm import (
    add_first_use_options,
    first_use_budget,
    first_use_meta,
)
from harness.cli import (
    EXIT_NO_GPU,
    count,
    output_file,
    positive_int,
    progress_bar,
    sigterm_as_interrupt,
    sweep_status,
)
from harness.measure import device, first_use
from harness.report import resume
from harness.report.offtable import Record, ShapeResult, progress_line, render_markdown, summarise
from kernels import DTYPES, GemmConfig, GemmShape
from kernels.schedules import grid_blocks
from kernels.tuned import CASES, case_shape, lookup, pick_config

PROG = "python3 -m benchmarks.offtable"
SHAPES_FILE = Path(__file__).with_name("offtable_shapes.json")
TIMERS = ("cupti", "event")

# Each category's rule: a test of the shape, and the rule in words for the error.
CATEGORIES: dict[str, tuple[Callable[[GemmShape], bool], str]] = {
    "mid": (lambda s: all(1000 <= x <= 4096 for x in (s.m, s.n, s.k)), "M, N, K in 1000..4096"),
    "non_multiple": (lambda s: bool(s.m % 128 or s.n % 128), "M or N not a multiple of 128"),
    "skinny_m": (lambda s: s.m <= 128, "M <= 128"),
    "thin_n": (lambda s: s.n <= 128, "N <= 128"),
    "long_k": (
        lambda s: s.m <= 512 and s.n <= 1024 and s.k >= 16 * max(s.m, s.n),
        "M <= 512, N <= 1024, K >= 16 max(M, N)",
    ),
    "large": (lambda s: s.m * s.n >= 6144 * 6144, "M N >= 6144^2"),
    "short_k": (lambda s: s.k <= 256 and min(s.m, s.n) >= 1024, "K <= 256, M and N >= 1024"),
}
ENTRY_KEYS = ("m", "n", "k", "dtype", "layout", "categories")
OPTIONAL_KEYS = ("categories",)  # left out: the categories whose rules the shape meets


@dataclass(frozen=True, slots=True)
class OffTableShape:
    shape: GemmShape
    categories: tuple[str, ...]


def tuned_shapes() -> set[GemmShape]:
    """Every shape the tuner covers (``kernels.tuned.CASES`` in each dtype)."""
    return {case_shape(name, dtype) for name in CASES for dtype in DTYPES}


def parse_shapes(data: object, where: str) -> list[OffTableShape]:
    """The entries of a shapes file, each checked: its fields, its shape (``GemmShape``),
    its categories' rules, not a tuned case, no repeats. ValueError naming the entry and
    the field."""
    if not isinstance(data, dict) or not isinstance(data.get("shapes"), list):
        raise ValueError(f"{where}: must be an object with a list 'shapes'")
    if not data["shapes"]:
        raise ValueError(f"{where}: shapes: must not be empty")
    tuned, out = tuned_shapes(), []
    for i, entry in enumerate(data["shapes"]):
        at = f"{where}: shapes[{i}]"
        if not isinstance(entry, dict):
            raise ValueError(f"{at}: must be an object with keys {list(ENTRY_KEYS)}")
        missing = [k for k in ENTRY_KEYS if k not in entry and k not in OPTIONAL_KEYS]
        unknown = sorted(k for k in entry if k not in ENTRY_KEYS)
        if missing or unknown:
            raise ValueError(
                f"{at}: must be an object with keys {list(ENTRY_KEYS)} ('categories' may be "
                f"left out); missing {missing}, unknown {unknown}"
            )
        try:
            shape = GemmShape(entry["m"], entry["n"], entry["k"], entry["dtype"], entry["layout"])
        except ValueError as err:
            raise ValueError(f"{at}: {err}") from None
        if "categories" not in entry:
            derived = tuple(c for c, (test, _) in CATEGORIES.items() if test(shape))
            out.append(_checked(at, shape, derived, tuned, out))
            continue
        cats = entry["categories"]
        if not isinstance(cats, list) or not cats:
            raise ValueError(f"{at}: categories: must be a non-empty list of {list(CATEGORIES)}")
        for cat in cats:
            if cat not in CATEGORIES:
                raise ValueError(f"{at}: categories: {cat!r} must be one of {list(CATEGORIES)}")
            test, rule = CATEGORIES[cat]
            if not test(shape):
                raise ValueError(f"{at}: categories: {shape.id} is not {cat} ({rule})")
        out.append(_checked(at, shape, tuple(cats), tuned, out))
    return out


def _checked(
    at: str, shape: GemmShape, cats: tuple[str, ...], tuned: set, before: list[OffTableShape]
) -> OffTableShape:
    """The entry at ``at``, once it is known to be no tuned case and no repeat."""
    if shape in tuned:
        raise ValueError(f"{at}: {shape.id} is a tuned case (kernels.tuned.CASES), not off-table")
    if any(s.shape == shape for s in before):
        raise ValueError(f"{at}: {shape.id} is listed twice")
    return OffTableShape(shape, cats)


def load_shapes(path: Path) -> list[OffTableShape]:
    try:
        text = path.read_text()
    except OSError as err:
        raise ValueError(f"{path}: cannot read ({err.strerror})") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as err:
        raise ValueError(f"{path}: not valid JSON: {err}") from None
    return parse_shapes(data, str(path))


def _shapes_file(text: str) -> Path:
    return SHAPES_FILE if text == "default" else Path(text)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=PROG, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument(
        "--shapes",
        type=_shapes_file,
        default=SHAPES_FILE,
        metavar="FILE",
        help="shapes file (JSON, as benchmarks/offtable_shapes.json), or 'default' for that one",
    )
    p.add_argument(
        "--rounds", type=positive_int, default=8, help="trials of alternated launches per shape"
    )
    p.add_argument(
        "--timer",
        choices=TIMERS,
        default="cupti",
        help="cupti: each launch's kernel time (CUDA events where CUPTI records none); event: "
        "CUDA events around each launch",
    )
    p.add_argument("--warmup", type=count, default=3, help="untimed launches of each per shape")
    p.add_argument("--seed", type=count, default=0, help="seed of the random inputs")
    p.add_argument("--json", type=output_file, help="write the record (JSON) here")
    p.add_argument(
        "--resume",
        action="store_true",
        help="with --json: keep the shapes that record holds and measure the rest into it, "
        "where it was measured the same way; where the file does not exist yet, measure all; "
        "where it holds every shape, leave it as it is (a --markdown table that is missing is "
        "written again from it)",
    )
    p.add_argument("--markdown", type=output_file, help="write the table and summary here")
    p.add_argument("--workers", type=positive_int, default=None, help="compile processes")
    p.add_argument(
        "--list",
        action="store_true",
        help="print each shape and the config pick_config chooses, then exit (no GPU needed "
        "with --sms)",
    )
    p.add_argument(
        "--sms",
        type=positive_int,
        help="with --list: the SM count to pick for (default: the visible GPU's)",
    )
    p.add_argument(
        "--gpu",
        metavar="NAME",
        help="with --list: the GPU name whose tuned rows to look up (default: the visible "
        "GPU's; none without one, so the heuristic)",
    )
    add_first_use_options(p, "--first-use")
    return p


def list_lines(
    shapes: list[OffTableShape], gpu: str | None, sms: int, first: bool = False
) -> list[str]:
    """A line per shape: its id, categories, the picked config, where it came from and
    how many blocks it launches (waves of ``sms``). With ``first`` (``--first-use``), a
    shape this GPU tuned on first use shows the cached config (nothing is tuned here)."""
    lines = [f"{len(shapes)} shapes, configs picked for {sms} SMs on {gpu or 'no GPU'}"]
    for s in shapes:
        if first and gpu is not None:
            pick = first_use.peek(s.shape, gpu, sms)
            config, source = pick.config, pick.source
        else:
            config, source = pick_config(s.shape, gpu, sms), source_of(s.shape, gpu)
        blocks = grid_blocks(s.shape, config)
        lines.append(
            f"{s.shape.id:<26} {','.join(s.categories) or '-':<22} {config.id:<30} {source:<15} "
            f"{blocks} blocks ({blocks / sms:.2f} waves)"
        )
    return lines


def source_of(shape: GemmShape, gpu: str | None) -> str:
    found = gpu is not None and lookup(shape, gpu) is not None
    return first_use.TABLE if found else first_use.HEURISTIC


def measure_shape(
    entry: OffTableShape, config: GemmConfig, source: str, args, tried: tuple = ()
) -> ShapeResult:
    """Check, then time the kernel alternated with torch.matmul; a build or launch error
    or a wrong result is a row with the error. ``tried``: a first-use tuning's candidates
    (``first_use.Tried``), kept in the row."""
    from harness.measure.cases import Case
    from harness.measure.versus import PLACEMENTS, placed

    shape = entry.shape
    base = dict(
        categories=entry.categories,
        config=config.id,
        source=source,
        tried=tuple(t.to_dict() for t in tried),
    )
    try:
        case = Case(shape, seed=args.seed)
        check = case.check(config, seed=args.seed + 1)
        base.update(rel_error=check.rel_error, correct=check.ok)
        if not check.ok:
            return ShapeResult.of(shape, **base, error=f"wrong result: {check}")

        got = placed(
            case.placed(config),
            args.rounds,
            min(PLACEMENTS, args.rounds),
            warmup=args.warmup,
            timer=args.timer,
        )
    except Exception as err:  # a config that fails to build or launch is a row, not the end
        return ShapeResult.of(shape, **base, error=f"{type(err).__name__}: {err}".splitlines()[0])
    return ShapeResult.of(
        shape,
        **base,
        kernel_ms=got.kernel_ms,
        torch_ms=got.baseline_ms,
        launches=got.launches,
        timer=got.timer,
    )


def run_meta(args, spec, argv: list[str]) -> dict:
    return {
        "gpu": spec.name,
        "date": dt.date.today().isoformat(),
        "command": shlex.join([*PROG.split(), *argv]),
        "shapes_file": args.shapes.name,
        "rounds": args.rounds,
        "timer": args.timer,
        "warmup": args.warmup,
        "seed": args.seed,
        **first_use_meta(args.budget),
        **spec.record(),
        **device.versions(),
    }


# What an off-table record's figures depend on besides the GPU and the libraries: a
# record is resumed only by a run that matches it here.
SETTING_KEYS = ("shapes_file", "rounds", "timer", "warmup", "seed", "first_use")


def resumed_record(path: Path, meta: dict, shapes: list[OffTableShape]) -> Record | None:
    """The record at ``path`` to go on with (``--resume``), None where there is none yet.
    ValueError where it is not an off-table record, was measured another way, or holds a
    shape the list does not."""
    if not path.exists():
        return None
    try:
        data = json.loads(path.read_text())
        if not isinstance(data, dict):
            raise TypeError(f"a JSON {type(data).__name__}, not an object")
        record = Record.from_dict(data)
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise ValueError(f"{path}: not an off-table record ({err})") from None
    keys = (*resume.DEVICE_KEYS, *SETTING_KEYS)
    resume.refuse(path, resume.differences(record.meta, meta, keys))
    listed = {s.shape.id for s in shapes}
    extra = [r.shape for r in record.rows if r.shape not in listed]
    if extra:
        raise ValueError(f"{path} holds {', '.join(extra)}, which the shapes file does not list")
    return record


def in_list_order(shapes: list[OffTableShape], rows) -> list[ShapeResult]:
    """``rows`` in the order the shapes file lists their shapes."""
    place = {s.shape.id: i for i, s in enumerate(shapes)}
    return sorted(rows, key=lambda r: place[r.shape])


def run(
    shapes: list[OffTableShape], args, spec, console, keep: Callable | None = None
) -> tuple[list[ShapeResult], bool]:
    """Measure ``shapes``: the rows and whether Ctrl-C or SIGTERM stopped the run.
    ``keep(rows)`` writes the rows so far after every shape, and where a kernel's launch
    hangs, before the process exits."""
    from harness.measure.correctness import on_hang
    from harness.suite.precompile import compile_gemms

    picks, to_tune = [], {}
    for s in shapes:
        if args.budget is None:
            picks.append((s, pick_config(s.shape, spec.name, spec.sm_count)))
            continue
        pick = first_use.peek(s.shape, spec.name, spec.sm_count)
        picks.append((s, pick.config))
        if pick.source == first_use.HEURISTIC:  # to tune: compile its candidates up front
            to_tune[s.shape] = first_use.plan(s.shape, spec.sm_count, args.budget.candidates)
    pairs = [(s.shape, c) for s, c in picks]
    pairs += [(shape, c) for shape, plan in to_tune.items() for c in plan]
    rows: list[ShapeResult] = []
    progress = progress_bar(console, transient=True)
    try:
        with sigterm_as_interrupt(), progress, on_hang(lambda what: keep and keep(rows)):
            compile_gemms(pairs, progress, args.workers)
            task = progress.add_task("shapes", total=len(picks))
            say = _printer(progress.console)
            for entry, config in picks:
                source, tried = source_of(entry.shape, spec.name), ()
                if args.budget is not None:
                    progress.update(task, description=f"{entry.shape.id}: first-use config")
                    pick = first_use.tuned_config(entry.shape, spec, budget=args.budget, say=say)
                    config, source, tried = pick.config, pick.source, pick.tried
                    say(f"config {pick.line(entry.shape)}")
                progress.update(task, description=f"{entry.shape.id} {config.id}")
                row = measure_shape(entry, config, source, args, tried)
                rows.append(row)
                if keep:
                    keep(rows)
                progress.console.print(progress_line(len(rows), len(picks), row), highlight=False)
                progress.advance(task)
    except KeyboardInterrupt:
        console.print(f"[red]interrupted[/]: keeping the {len(rows)} shapes measured so far")
        return rows, True
    return rows, False


def _printer(console) -> Callable[[str], None]:
    return lambda line: console.print(line, markup=False, highlight=False)


def exit_status(rows: list[ShapeResult], interrupted: bool) -> int:
    return sweep_status(
        interrupted, any(r.correct is False for r in rows), any(r.error for r in rows)
    )


def main(argv: list[str] | None = None) -> int:
    from rich.console import Console

    parser = build_parser()
    args = parser.parse_args(argv)
    argv = sys.argv[1:] if argv is None else argv
    try:
        shapes = load_shapes(args.shapes)
    except ValueError as err:
        parser.error(f"--shapes: {err}")
    if not args.list and (args.sms is not None or args.gpu is not None):
        parser.error("--sms/--gpu: only with --list; a measurement reads the GPU it runs on")
    if args.resume and (args.list or not args.json):
        parser.error("--resume: goes on with the record in --json, so it needs --json, not --list")
    try:
        args.budget = first_use_budget(args, "--first-use")
    except ValueError as err:
        parser.error(str(err))
    console = Console(width=None if sys.stdout.isatty() else 200)
    reason = device.no_gpu_reason()
    if args.list:
        gpu, sms = args.gpu, args.sms
        if sms is None or gpu is None:
            if reason and sms is None:
                parser.error(f"--list: no GPU to read the SM count from ({reason}); give --sms N")
            if not reason:
                spec = device.DeviceSpec.read()
                sms = spec.sm_count if sms is None else sms
                gpu = spec.name if gpu is None else gpu
        print("\n".join(list_lines(shapes, gpu, sms, args.first_use)))
        return 0
    if reason:
        print(f"{PROG}: error: {reason}; this command times kernels on a GPU", file=sys.stderr)
        return EXIT_NO_GPU
    spec = device.DeviceSpec.read()
    meta = {**run_meta(args, spec, argv), "planned": len(shapes)}
    kept: list[ShapeResult] = []
    if args.resume:
        try:
            earlier = resumed_record(args.json, meta, shapes)
        except ValueError as err:
            parser.error(f"--resume: {err}")
        if earlier is not None:
            kept = list(earlier.rows)
            # The record's own meta (its date and command), and when it was resumed.
            resumed = [*earlier.meta.get("resumed", ()), meta["date"]]
            meta = {**earlier.meta, "planned": len(shapes), "resumed": resumed}
        console.print(
            f"resume: {len(kept)} of {len(shapes)} shapes measured in {args.json}; "
            f"measuring the other {len(shapes) - len(kept)}",
            highlight=False,
        )
    done = {r.shape for r in kept}
    todo = [s for s in shapes if s.shape.id not in done]
    console.print(f"{len(todo)} off-table shapes on {spec.name} ({spec.sm_count} SMs)")

    if args.resume and kept and not todo and (args.markdown is None or args.markdown.exists()):
        # A whole record: nothing measured, so nothing rewritten (no date added to it);
        # a table that has gone missing is written again from it.
        console.print(summarise(kept).line(), highlight=False)
        console.print(f"{args.json} left as it was: every shape is measured")
        return exit_status(kept, False)

    def keep(rows: list[ShapeResult], loud: bool = False) -> None:
        write_record(args, meta, in_list_order(shapes, kept + rows), console, loud)

    rows, interrupted = run(todo, args, spec, console, keep=keep) if todo else ([], False)
    keep(rows, loud=True)
    return exit_status(kept + rows, interrupted)


def write_record(args, meta: dict, rows: list[ShapeResult], console, loud: bool = True) -> None:
    """``--json`` and ``--markdown`` of ``rows``, each replaced whole (written beside it,
    then renamed over it, so a kill mid-write leaves the last whole one); ``loud``: the
    summary line and where they went first. Pure Python: it also runs when a hung launch
    ends the process."""
    record = Record(meta, tuple(rows))
    if loud:
        console.print(summarise(rows).line(), highlight=False)
    if args.json:
        _replace(args.json, json.dumps(record.to_dict(), indent=1) + "\n")
        if loud:
            console.print(f"record written to {args.json}")
    if args.markdown:
        _replace(args.markdown, render_markdown(record))
        if loud:
            console.print(f"table written to {args.markdown}")


def _replace(path: Path, text: str) -> None:
    # A partial file of this process's own: two runs writing one record (the last whole
    # write wins) never rename each other's half-written text over it.
    partial = path.with_name(f".{path.name}.{os.getpid()}.partial")
    partial.write_text(text)
    os.replace(partial, path)


if __name__ == "__main__":
    sys.exit(main())
