"""Tune the TileLang GEMM per case on this GPU and record the winners as data.

    python3 -m benchmarks.tune_gemm                      # every case in kernels.tuned.CASES
    python3 -m benchmarks.tune_gemm --case square4096 mlp_up --dtype float16
    python3 -m benchmarks.tune_gemm --list               # the cases and their search spaces
    python3 -m benchmarks.tune_gemm --list --sms 132     # ... for 132 SMs, without a GPU

For each case, in fp16 first:
1. every config of the documented search space (``kernels.tuned.candidates``) is compiled
   in parallel into TileLang's disk cache;
2. each is timed briefly (``--quick-repeat`` launches, L2 flushed) to rank them;
3. the ``--top`` fastest are checked against a float64 reference on fresh random inputs,
   then timed against torch.matmul on the same inputs, launched in turn, the way the
   suite's ``track_vs_torch`` measures (``harness.measure.versus``: 10 trials, CUPTI
   kernel times); the winner has the best median per-trial ratio.

``--remeasure`` skips steps 1 and 2: each case's recorded config (the table's row for this
GPU) is checked and measured again by step 3 alone, and its row's figures replaced
(``measured`` gives the date), the config kept. The rows go case by case in the suite's
order, both dtypes of each, as asv measures them. That is how the table's speedups are
brought to what asv measures today without re-tuning
(``python -m harness.suite.agreement`` compares them).
bf16 then ranks fp16's ``--bf16-from`` best configs (the dtype changes neither the tile
shapes nor the instruction mix, only the operand type of the same wgmma; 0 ranks the
whole space again), and goes through step 3 the same way.

Every candidate's brief timing goes to ``--jsonl`` as soon as it is measured, and each
case's winner is written to ``--out`` (keyed by GPU name, which records the GPU's SM
count, then shape id) as soon as the case is done, so an interrupted run keeps
everything it finished; both are checked for being writable before anything is measured.
``speedup`` (the log, the table, the output) is torch.matmul latency over TileLang
latency: above 1.00 beats cuBLAS. All timing is ``harness.measure.timing.measure``, the
project's one timing path.
"""

from __future__ import annotations

import argparse
import datetime as dt
import fcntl
import json
import os
import shlex
import sys
from pathlib import Path

from harness.cli import (
    EXIT_INCORRECT,
    EXIT_INTERRUPTED,
    EXIT_NO_GPU,
    config_id,
    count,
    output_file,
    positive_int,
    progress_bar,
)
from harness.measure import device, metrics
from harness.measure.versus import PLACEMENTS, TRIALS
from kernels import GemmConfig, GemmShape
from kernels.gemm import SHORT_DTYPES, check_combination
from kernels.tuned import (
    CASES,
    CONFIGS_KEY,
    SMS_KEY,
    TUNED_FILE,
    candidates,
    case_shape,
    gpu_entry,
)

PROG = "python3 -m benchmarks.tune_gemm"
QUICK = {"warmup": 3}


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=PROG,
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "--case",
        nargs="+",
        choices=sorted(CASES),
        default=list(CASES),
        metavar="NAME",
        help=f"cases to tune (default: all): {', '.join(CASES)}",
    )
    p.add_argument(
        "--dtype",
        nargs="+",
        choices=["float16", "bfloat16"],
        default=["float16", "bfloat16"],
        help="bf16 reuses fp16's ranking when both are tuned in one run",
    )
    p.add_argument("--top", type=positive_int, default=3, help="configs re-timed and checked")
    p.add_argument(
        "--bf16-from",
        type=count,
        default=12,
        help="rank fp16's best N configs for bf16 (0: the whole space)",
    )
    p.add_argument(
        "--quick-repeat", type=positive_int, default=10, help="launches per brief timing"
    )
    p.add_argument("--workers", type=positive_int, default=None, help="compile processes")
    p.add_argument("--out", type=output_file, default=TUNED_FILE, help="tuned-config table (JSON)")
    p.add_argument("--jsonl", type=output_file, default=None, help="append every timing here")
    p.add_argument(
        "--async-mma",
        action="store_true",
        help="also search the hand-written asynchronous pipeline (_a configs)",
    )
    p.add_argument(
        "--only",
        type=config_id,
        nargs="+",
        default=None,
        metavar="ID",
        help="rank these configs instead of the search space (each case keeps those its "
        "shape can build; the row's candidates count says how many): a focused re-tune, "
        "e.g. after a kernel form is added",
    )
    p.add_argument(
        "--remeasure",
        action="store_true",
        help="measure each case's recorded config again (no search) and update its figures",
    )
    p.add_argument("--list", action="store_true", help="print the cases and spaces, then exit")
    p.add_argument(
        "--sms",
        type=positive_int,
        default=None,
        help="with --list: the SM count to list the spaces for (default: the visible GPU's)",
    )
    return p


def record_winner(path: Path, gpu: str, sms: int, shape: GemmShape, row: dict) -> None:
    """Read-modify-write the table under a lock: tuners on several GPUs share the file.
    The GPU's entry records its SM count; one that differs from the entry's is an error
    (the rows were tuned for another part under the same name)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.with_suffix(".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        table = json.loads(path.read_text()) if path.exists() else {}
        entry = table.setdefault(gpu, {SMS_KEY: sms, CONFIGS_KEY: {}})
        recorded, _ = gpu_entry(path, gpu, entry)
        if recorded != sms:
            raise ValueError(
                f"{path}: {gpu!r} was tuned with {SMS_KEY}={recorded}; this GPU has {sms} SMs "
                "(tune into another --out)"
            )
        entry[CONFIGS_KEY][shape.id] = row
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(table, indent=1, sort_keys=True) + "\n")
        os.replace(tmp, path)


class Tuner:
    def __init__(self, args, console, spec: device.DeviceSpec) -> None:
        self.args, self.console, self.spec = args, console, spec
        gpu = self.gpu = spec.name
        self.jsonl = args.jsonl.open("a") if args.jsonl else None
        self.log(
            {
                "meta": {
                    "gpu": gpu,
                    "date": dt.date.today().isoformat(),
                    "command": shlex.join([*PROG.split(), *sys.argv[1:]]),
                    # How the winners were picked, for the report's account of it.
                    "top": args.top,
                    "quick_repeat": args.quick_repeat,
                    "trials": TRIALS,
                    "remeasure": args.remeasure,
                    **spec.record(),
                    **device.versions(),
                }
            }
        )
        from harness.measure.gpu_state import open_nvml

        self.nvml = open_nvml()  # throttled batches are re-taken; clocks are recorded

    def log(self, record: dict) -> None:
        if self.jsonl:
            self.jsonl.write(json.dumps(record) + "\n")
            self.jsonl.flush()

    def rank(
        self, case, configs: list[GemmConfig], progress, task
    ) -> list[tuple[float, GemmConfig]]:
        """Brief timing of every config; failures are logged and dropped."""
        ranked = []
        for config in configs:
            progress.update(task, description=f"{case.shape.id} {config.id}")
            try:
                ms = case.time_tilelang(config, repeat=self.args.quick_repeat, **QUICK).median_ms
            except Exception as err:  # a config that fails to build or launch is no winner
                self.console.print(f"[yellow]{case.shape.id} {config.id}: {err}[/]")
                self.log({"shape": case.shape.id, "config": config.id, "error": str(err)})
            else:
                ranked.append((ms, config))
                self.log(
                    {
                        "shape": case.shape.id,
                        "config": config.id,
                        "quick_ms": ms,
                        "tflops": metrics.tflops(case.shape.flops, ms * 1e-3),
                    }
                )
            progress.advance(task)
        return sorted(ranked, key=lambda r: r[0])

    def measured(self, case, config: GemmConfig) -> dict:
        """One checked config against torch.matmul, as the suite's ``track_vs_torch``
        measures it (``harness.measure.versus``: launched in turn, ``versus.TRIALS``
        trials shared out over ``versus.PLACEMENTS`` input sets), with the GPU's clocks and
        throttling while it ran."""
        from harness.measure.versus import placed

        bind = case.placed(config)
        if self.nvml is None:
            got, state = placed(bind), None
        else:
            got, state = self.nvml.during(lambda: placed(bind))
        speedups = got.speedups
        return {
            "config": config.id,
            "tilelang_ms": metrics.median(list(got.kernel_ms)),
            "torch_ms": metrics.median(list(got.baseline_ms)),
            "speedup": got.speedup,
            "ratio_spread": [min(speedups), max(speedups)],
            "median_rsd": metrics.median_rsd(list(got.kernel_ms)),
            "timer": got.timer,
            "placements": PLACEMENTS,
            "sm_clock_mhz": None
            if state is None
            else [state.min_sm_clock_mhz or state.sm_clock_mhz, state.sm_clock_mhz],
            "throttled": None if state is None else state.throttled() is not None,
        }

    def confirm(self, case, ranked) -> dict | None:
        """Check the top configs, then time each against torch.matmul launched in turn
        (``measured``): clocks and temperature drift over a run, and alternation lets both
        see the same drift. The speedup is the median of the per-trial ratios."""
        finals = []
        for _, config in ranked[: self.args.top]:
            check = case.check(config, seed=1)
            if not check.ok:
                self.console.print(f"[red]{case.shape.id} {config.id}: wrong result {check}[/]")
                self.log({"shape": case.shape.id, "config": config.id, "wrong": str(check)})
                continue
            finals.append({**self.measured(case, config), "rel_error": check.rel_error})
        if not finals:
            return None
        best = max(finals, key=lambda f: f["speedup"])
        row = {
            **best,
            "tflops": metrics.tflops(case.shape.flops, best["tilelang_ms"] * 1e-3),
            "candidates": len(ranked),
            "runner_up": [
                {k: f[k] for k in ("config", "tilelang_ms", "speedup")}
                for f in finals
                if f is not best
            ],
            "date": dt.date.today().isoformat(),
        }
        self.log({"shape": case.shape.id, "winner": row})
        return row

    def guarded(self, body) -> tuple[list[tuple[GemmShape, dict]], bool]:
        """``body(done)``, which appends each recorded case to ``done``: the cases and
        whether Ctrl-C stopped it (what was recorded stays), the log closed either way."""
        done: list[tuple[GemmShape, dict]] = []
        try:
            body(done)
        except KeyboardInterrupt:
            self.console.print(
                f"[red]interrupted[/]: {len(done)} cases recorded in {self.args.out}"
            )
            return done, True
        finally:
            if self.jsonl:
                self.jsonl.close()
        return done, False

    def remeasure(self) -> tuple[list[tuple[GemmShape, dict]], bool]:
        """Each selected case's recorded config on this GPU checked and measured again
        (``measured``), its row's figures replaced and the config kept; a case without a
        row is reported and left out."""
        return self.guarded(self._remeasure)

    def _remeasure(self, done: list) -> None:
        from harness.measure.cases import Case
        from harness.suite.discovery import Combination
        from harness.suite.precompile import precompile

        args = self.args
        table = json.loads(args.out.read_text()) if args.out.exists() else {}
        rows = table.get(self.gpu, {}).get(CONFIGS_KEY, {})
        todo = []
        # In the suite's order (``asv_bench.gemm.Tuned``: case by case, both dtypes of
        # each), so that a row is measured after the same work as asv measures it:
        # cuBLAS's time on a shape moves with what the process ran before and with where
        # its operands lie (``versus.placed``), the kernel's much less.
        for name in sorted(args.case, key=list(CASES).index):
            for dtype in sorted(args.dtype, key=list(SHORT_DTYPES.values()).index):
                shape = case_shape(name, dtype)
                if shape.id in rows:
                    todo.append((shape, rows[shape.id]))
                else:
                    self.console.print(
                        f"[yellow]{shape.id}: no row for {self.gpu} in {args.out}[/]"
                    )
        progress = progress_bar(self.console)
        with progress:
            combos = [
                Combination(sh.id, "gemm", sh, GemmConfig.from_id(r["config"])) for sh, r in todo
            ]
            task = progress.add_task(f"compiling {len(combos)} kernels", total=len(combos))
            precompile(combos, workers=args.workers, log=lambda _l: progress.advance(task))
            progress.remove_task(task)
            task = progress.add_task("remeasuring", total=len(todo))
            for shape, old in todo:
                config = GemmConfig.from_id(old["config"])
                progress.update(task, description=f"{shape.id} {config.id}")
                try:
                    case = Case(shape)
                    check = case.check(config, seed=1)
                    figures = self.measured(case, config) if check.ok else None
                    del case
                except Exception as err:  # a row that fails to build or run stays as it is
                    self.console.print(f"[red]{shape.id} {config.id}: {err}[/]")
                    self.log({"shape": shape.id, "config": config.id, "error": str(err)})
                    continue
                finally:
                    progress.advance(task)
                if figures is None:
                    self.console.print(f"[red]{shape.id} {config.id}: wrong result {check}[/]")
                    self.log({"shape": shape.id, "config": config.id, "wrong": str(check)})
                    continue
                row = {
                    **old,
                    **figures,
                    "rel_error": check.rel_error,
                    "tflops": metrics.tflops(shape.flops, figures["tilelang_ms"] * 1e-3),
                    "measured": dt.date.today().isoformat(),
                }
                self.log({"shape": shape.id, "remeasured": row})
                record_winner(args.out, self.gpu, self.spec.sm_count, shape, row)
                done.append((shape, row))
                self.console.print(
                    f"{shape.id}: {config.id} speedup {old.get('speedup', float('nan')):.3f}"
                    f" -> {row['speedup']:.3f} ({row['timer']})"
                )

    def run(self) -> tuple[list[tuple[GemmShape, dict]], bool]:
        """Tune every selected case (the steps in this module's docstring)."""
        return self.guarded(self._tune)

    def _tune(self, done: list) -> None:
        from harness.measure.cases import Case
        from harness.suite.discovery import Combination
        from harness.suite.precompile import precompile

        args = self.args
        fp16_ranked: dict[str, list] = {}
        progress = progress_bar(self.console)
        with progress:
            # fp16 of every case, then bf16: one compile pool per phase.
            for dtype in sorted(args.dtype, key=lambda d: d != "float16"):
                spaces = {}
                for name in args.case:
                    shape = case_shape(name, dtype)
                    if dtype == "bfloat16" and args.bf16_from and name in fp16_ranked:
                        spaces[shape] = [c for _, c in fp16_ranked[name][: args.bf16_from]]
                    elif args.only:
                        spaces[shape] = buildable(shape, args.only)
                    else:
                        spaces[shape] = candidates(
                            shape, self.spec.sm_count, async_mma=args.async_mma
                        )
                combos = [
                    Combination(shape.id, "gemm", shape, c)
                    for shape, space in spaces.items()
                    for c in space
                ]
                task = progress.add_task(
                    f"compiling {len(combos)} {dtype} kernels", total=len(combos)
                )
                failed = precompile(
                    combos, workers=args.workers, log=lambda line, t=task: progress.advance(t)
                )
                progress.remove_task(task)
                for name, (shape, space) in zip(args.case, spaces.items(), strict=True):
                    space = [c for c in space if ("gemm", shape, c) not in failed]
                    task = progress.add_task(f"{shape.id}: ranking", total=len(space))
                    case = Case(shape)
                    ranked = self.rank(case, space, progress, task)
                    if dtype == "float16":
                        fp16_ranked[name] = ranked
                    progress.update(task, description=f"{shape.id}: confirming top {args.top}")
                    row = self.confirm(case, ranked)
                    progress.remove_task(task)
                    del case
                    if row is None:
                        self.console.print(f"[red]{shape.id}: no correct config[/]")
                        continue
                    record_winner(args.out, self.gpu, self.spec.sm_count, shape, row)
                    done.append((shape, row))
                    self.console.print(
                        f"{shape.id}: {row['config']} {row['tilelang_ms']:.4f} ms, "
                        f"torch {row['torch_ms']:.4f} ms, speedup {row['speedup']:.3f} "
                        f"({len(ranked)} configs ranked)"
                    )


def buildable(shape: GemmShape, configs: list[GemmConfig]) -> list[GemmConfig]:
    """Those of ``configs`` that ``shape`` can be built with (``check_combination``), in
    order, each once."""
    out = []
    for config in dict.fromkeys(configs):
        try:
            check_combination(shape, config)
        except ValueError:
            continue
        out.append(config)
    return out


def summary(done: list[tuple[GemmShape, dict]]) -> list[str]:
    """The run's winners as a table; speedup = torch ms / TileLang ms."""
    lines = [f"{'shape':<28} {'config':<26} {'TileLang ms':>11} {'torch ms':>11} {'speedup':>8}"]
    for shape, row in done:
        lines.append(
            f"{shape.id:<28} {row['config']:<26} {row['tilelang_ms']:11.4f} "
            f"{row['torch_ms']:11.4f} {row['speedup']:8.3f}"
        )
    return lines


def main(argv: list[str] | None = None) -> int:
    from rich.console import Console

    parser = build_parser()
    args = parser.parse_args(argv)
    console = Console(width=None if sys.stdout.isatty() else 160)
    if args.only and (args.remeasure or args.list or args.async_mma):
        parser.error(
            "--only: ranks the configs given; --remeasure, --list and --async-mma use the "
            "table's or the search space's"
        )
    if args.only:
        for name in args.case:
            if not buildable(case_shape(name, "float16"), args.only):
                parser.error(f"--only: none of the configs given builds for case {name!r}")
    if args.remeasure and args.list:
        parser.error("--remeasure: measures on a GPU; --list only prints the spaces")
    if args.remeasure:
        # The rows to measure again come from the table: a damaged one is bad input, named
        # before any GPU work (the row and the rule it breaks).
        from kernels.tuned import TunedTableError, load

        try:
            load(args.out)
        except TunedTableError as err:
            parser.error(f"--remeasure: {err}")
    if args.sms is not None and not args.list:
        parser.error("--sms: only lists spaces (--list); tuning reads the GPU's SM count")
    if args.list:
        sms = args.sms
        if sms is None:
            reason = device.no_gpu_reason()
            if reason:
                parser.error(f"--list: no GPU to read the SM count from ({reason}); give --sms N")
            sms = device.DeviceSpec.read().sm_count
        console.print(f"search spaces for {sms} SMs")
        for name in args.case:
            shape = case_shape(name, "float16")
            space = candidates(shape, sms, async_mma=args.async_mma)
            console.print(
                f"{name}: {shape.m}x{shape.n}x{shape.k} {shape.layout}, {len(space)} configs"
            )
        return 0
    if args.out == TUNED_FILE:  # the default is not parsed, so not checked by output_file
        try:
            output_file(str(args.out))
        except argparse.ArgumentTypeError as err:
            parser.error(f"argument --out: {err}")
    reason = device.no_gpu_reason()
    if reason:
        print(f"{PROG}: error: {reason}; tuning times kernels on a GPU", file=sys.stderr)
        return EXIT_NO_GPU
    spec = device.DeviceSpec.read()
    console.print(
        f"tuning on {spec.name}, {spec.sm_count} SMs ({device.versions()}); table: {args.out}"
    )
    tuner = Tuner(args, console, spec)
    done, interrupted = tuner.remeasure() if args.remeasure else tuner.run()
    if done:
        console.print("\n".join(summary(done)), highlight=False)
    if interrupted:
        return EXIT_INTERRUPTED
    return 0 if len(done) == len(args.case) * len(args.dtype) else EXIT_INCORRECT


if __name__ == "__main__":
    sys.exit(main())
