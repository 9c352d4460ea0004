"""Measure the gate itself: N A/A comparisons of one commit against itself (every
regression is a false alarm) and N comparisons against an injected slowdown of a chosen
size (every regression on the slowed benchmarks is a detection).

    nox -s gate_selftest -- [--n 20] [--slowdown 0.02] [--method paired] [--bench REGEX]
                            [--gpus all] [--json selftest.json] [--resume FILE]

``--resume FILE`` keeps a checkpoint of the finished iterations; the same command again
runs only the missing ones (``selftest_state``), so n = 20 can span several sessions.

With ``--method paired`` (the gate's default), each iteration is one fresh worker process
holding three sides built from HEAD's tree, ``base``, ``head`` and ``injected``, whose
kernels are launched in turn as the gate launches base and head; base against head is
the A/A comparison, base against injected the detection. With ``--method process``,
each iteration runs the gate's worker three times on HEAD, each in a fresh process:
``base``, ``head`` and ``injected``. It compares base against head (A/A) and base against
injected (detection), so the base run is shared by the two comparisons of one iteration,
while comparisons of one kind are independent across iterations: three runs per
iteration where two separate comparisons would take four. The order of the three runs
cycles through all six permutations across iterations (and rounds), so drift in clocks
or temperature reaches every side alike. With ``--rounds R`` each comparison pools R
rounds, as the gate does. ``--gpus`` splits the benchmarks over GPUs with the plan the
gate uses; a benchmark's three runs always share one GPU.

The injection is test-only: the injected side launches its kernel's delayed build
(``kernels.gemm.make_gemm(..., delay=True)``: every block spins on the SM clock before
its pipeline starts), one launch as before, whose cycles the worker calibrates on the
gate's own trials (every side in their rotation, read by the verdict's statistic) until
the slowdown they show is the request (``harness.gate.inject``).
The tracked kernels are untouched, and nothing on the normal gate path passes the flag.
The delay is calibrated once per self-test (per GPU, by the first injected worker), and
every later worker sets those cycles (``--inject-cycles``, a file under the work folder)
instead of measuring them again; ``--inject-cycles FILE`` gives a self-test a file of an
earlier one and skips calibrating. The slowdown the gate then saw, the median over the
iterations of the injected comparison's ratio, is recorded per benchmark, and where it
misses the request by more than ``inject.TOLERANCE`` the benchmark gets no detection
rate: it is listed as refused, with why.

The calibration file is in force (``--calibration``, default the machine's), as in the
gate: a benchmark it marks too noisy is counted as such, neither detected nor alarmed.
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from harness.cli import EXIT_FAILURE, EXIT_INTERRUPTED, fraction, gpu_list, positive_int, regex
from harness.gate import decide as gd
from harness.gate import inject
from harness.gate import run as gate
from harness.gate import samples as gs
from harness.gate.selftest_state import Checkpoint, join_shards, keep_cycles, tag_of
from harness.gate.selftest_tally import compare, describe, render, tally, to_json
from harness.revisions import fanout, git, launch, placement, records
from harness.revisions.calibration import calibration_path
from harness.suite import discovery

SIDES = ("base", "head", "injected")
_ORDERS = list(itertools.permutations(SIDES))


@dataclass(frozen=True, slots=True)
class Setup:
    """What every iteration shares: the worktree of HEAD, the benchmark regex, how many
    iterations and gate rounds, the injected slowdown, the gate's floor, the work folder
    and per-benchmark thresholds (calibration) when there are any."""

    tree: Path
    bench: str
    n: int
    rounds: int
    slowdown: float
    threshold: float
    work: Path
    thresholds: Mapping[str, float] | None = None
    method: str = "paired"
    cycles: Path | None = None  # calibrated delay cycles to start from (``--inject-cycles``)


def order(i: int) -> tuple[str, ...]:
    """The order of the three runs in block ``i``: all six permutations in turn, so each
    side takes each position, and each pair each relative order, equally often."""
    return _ORDERS[i % len(_ORDERS)]


def iterate(
    setup: Setup,
    gpu: int | None = None,
    only: Path | None = None,
    log: Callable[[str], None] = print,
    out: list | None = None,
    timers: dict[str, None] | None = None,
    calibrated: dict[str, records.Injection] | None = None,
    cycles: Path | None = None,
    save: Callable[[], None] | None = None,
) -> list[tuple[list[gd.Verdict], list[gd.Verdict]]]:
    """``setup.n`` iterations on one GPU (all visible when None): per iteration and round,
    the three worker runs in that block's order; returns each iteration's verdicts,
    appended to ``out`` as each finishes (so an interrupted run keeps the finished ones);
    the paired workers' timers are added to ``timers``. The first injected worker
    calibrates the delay (unless ``cycles`` or ``setup.cycles`` gives it; its records go to
    ``calibrated``), every later one sets the same cycles. Iterations already in ``out``
    (a resumed run's) count; ``save`` is called after each new one."""
    tag = tag_of(gpu)
    out = [] if out is None else out
    n, rounds = setup.n, setup.rounds
    cycles = cycles or setup.cycles
    for i in range(len(out), n):
        start = time.perf_counter()
        runs = []
        for r in range(rounds):
            if setup.method == "paired":
                runs.append(
                    payload := launch.run_paired(
                        dict.fromkeys(SIDES, setup.tree),
                        setup.bench,
                        setup.work / f"paired{tag}-{i}-{r}.json",
                        inject={"injected": setup.slowdown},
                        gpu=gpu,
                        only=only,
                        inject_cycles=cycles,
                    )
                )
                cycles = cycles or keep_cycles(
                    setup.work, setup.slowdown, payload, tag, log, calibrated
                )
                timer = fanout.timer_of([payload])
                if timer and timers is not None and timer not in timers:
                    timers[timer] = None
                    log(f"gate_selftest{tag}: timer: {timer}")
                continue
            block = i * rounds + r
            got = {}
            for side in order(block):
                out_file = setup.work / f"{side}{tag}-{i}-{r}.json"
                if side != "injected":
                    got[side] = launch.run_worker(setup.tree, setup.bench, out_file, 0.0, gpu, only)
                    continue
                got[side] = launch.run_worker(
                    setup.tree,
                    setup.bench,
                    out_file,
                    setup.slowdown,
                    gpu,
                    only,
                    inject_cycles=cycles,
                )
                cycles = cycles or keep_cycles(
                    setup.work, setup.slowdown, got[side], tag, log, calibrated
                )
            runs.append(got)
        aa, injected = compare(runs, setup.threshold, setup.thresholds, setup.method)
        out.append((aa, injected))
        if save is not None:
            save()
        alarms = sum(v.status == gd.REGRESSION for v in aa)
        detected = sum(v.status == gd.REGRESSION for v in injected)
        failed = sum(v.status == gd.FAILED for v in [*aa, *injected])
        log(
            f"gate_selftest{tag}: iteration {i + 1}/{n}: A/A {alarms} false alarm(s), "
            f"detected {detected}/{len(injected)}"
            + (f", {failed} failed" if failed else "")
            + f" ({time.perf_counter() - start:.0f} s)"
            + describe(aa, injected)
        )
    return out


def split_iterate(
    setup: Setup,
    gpus: list[int],
    log: Callable[[str], None] = print,
    out: dict | None = None,
    timers: dict[str, None] | None = None,
    calibrated: dict[str, records.Injection] | None = None,
    resumed: Callable[[int | None], Path | None] = lambda gpu: None,
    save: Callable[[], None] | None = None,
) -> list[tuple[list[gd.Verdict], list[gd.Verdict]]]:
    """``iterate`` on every GPU at once, each over its share of the benchmarks
    (``fanout.fan_out``, the gate's plan), then each iteration's verdicts joined across
    GPUs. ``out`` collects each GPU's finished iterations as they come (and may hold a
    resumed run's); ``calibrated`` each GPU's injection calibrations; ``resumed(gpu)``
    gives a GPU's cycles from a checkpoint."""
    names = launch.listing(setup.tree, setup.bench, setup.work / "names.json")
    if isinstance(names, records.Fatal):
        raise RuntimeError(f"listing the benchmarks failed: {names.fatal}")
    out = {} if out is None else out

    def one(gpu: int, only: Path) -> None:
        iterate(
            setup,
            gpu=gpu,
            only=only,
            log=log,
            out=out.setdefault(gpu, []),
            timers=timers,
            calibrated=calibrated,
            cycles=resumed(gpu),
            save=save,
        )

    fanout.fan_out(list(names.names), gpus, setup.work, "selftest", one)
    return join_shards(out)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="nox -s gate_selftest --",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--n", type=positive_int, default=20, help="comparisons of each kind")
    p.add_argument(
        "--slowdown", type=fraction, default=0.02, help="injected, in (0, 1): 0.02 = 2%%"
    )
    p.add_argument(
        "--method",
        choices=("paired", "process"),
        default="paired",
        help="how the gate measures (its default for a kernel change: paired)",
    )
    p.add_argument(
        "--rounds",
        type=positive_int,
        default=1,
        help="worker processes (paired) or rounds (process) per comparison",
    )
    p.add_argument(
        "--threshold",
        type=fraction,
        default=None,
        help="the gate's floor for this test (default: the gate's own for --method); it "
        "must sit below --slowdown to detect it",
    )
    p.add_argument(
        "--bench",
        type=regex,
        default=None,
        help="regex on benchmark names (default: the suite's GATE_SUBSET)",
    )
    p.add_argument(
        "--gpus",
        type=gpu_list,
        default=None,
        help="'all' or indices like 0,1: split the benchmarks over these GPUs",
    )
    p.add_argument("--json", type=Path, default=None, help="also write the tally here")
    p.add_argument(
        "--calibration",
        type=Path,
        default=None,
        help="per-benchmark thresholds, as the gate applies them "
        "(default: calibration/<machine>.json when present; --threshold stays the floor)",
    )
    p.add_argument(
        "--inject-cycles",
        type=Path,
        default=None,
        metavar="FILE",
        help="the injected delay's cycles per benchmark from an earlier self-test at the "
        "same --slowdown (its .gate/selftest/inject-cycles*.json): set them instead of "
        "calibrating",
    )
    p.add_argument(
        "--resume",
        type=Path,
        default=None,
        metavar="FILE",
        help="checkpoint: written after every iteration; run again with the same FILE and "
        "settings to add only the missing iterations (an n = 20 run over several sessions)",
    )
    args = p.parse_args(argv)
    threshold = gate.THRESHOLDS[args.method] if args.threshold is None else args.threshold
    if threshold >= args.slowdown:
        p.error(
            f"--slowdown={args.slowdown}: must exceed the threshold ({threshold}) to be "
            "detectable; lower --threshold or raise --slowdown"
        )
    args.bench = args.bench or discovery.gate_subset(git.ROOT)
    if args.calibration is not None and not args.calibration.is_file():
        p.error(f"--calibration={args.calibration}: no such file")
    if args.inject_cycles is not None:
        inject.cycles_option(p, args.inject_cycles, [args.slowdown])
        args.inject_cycles = args.inject_cycles.resolve()
    try:
        gpus = placement.gpus_for(args.gpus)
    except ValueError as err:
        print(f"gate_selftest: error: {err}", file=sys.stderr)
        return EXIT_FAILURE
    work = git.ROOT / ".gate" / "selftest"
    work.mkdir(parents=True, exist_ok=True)
    sha = git.resolve("HEAD")
    tree = git.worktree(work, "tree", sha)
    log = lambda line: print(line, file=sys.stderr, flush=True)  # noqa: E731
    calibration = args.calibration or calibration_path()
    thresholds = gs.thresholds(calibration, args.method, floor=args.threshold)
    setup = Setup(
        tree,
        args.bench,
        args.n,
        args.rounds,
        args.slowdown,
        threshold,
        work,
        thresholds,
        args.method,
        args.inject_cycles,
    )
    log(
        f"gate_selftest: {args.method}; thresholds per benchmark from {calibration.name}, "
        f"floor {threshold:.0%}, cap {gd.MAX_THRESHOLD:.0%}"
        if thresholds
        else f"gate_selftest: {args.method}; threshold {threshold:.0%} for all "
        "(no calibration file)"
    )
    start = time.perf_counter()
    finished: dict = {}
    calibrated: dict[str, records.Injection] = {}
    save, resumed = None, lambda gpu: None
    if args.resume is not None:
        settings = {"commit": sha, "bench": args.bench, "slowdown": args.slowdown}
        settings |= {"threshold": threshold, "method": args.method, "rounds": args.rounds}
        settings |= {"gpus": gpus, "calibration": calibration.name if thresholds else None}
        checkpoint = Checkpoint(args.resume, settings, work)
        try:
            finished, calibrated = checkpoint.load()
        except ValueError as err:
            print(f"gate_selftest: error: {err}", file=sys.stderr)
            return EXIT_FAILURE
        save, resumed = (lambda: checkpoint.save(finished, calibrated)), checkpoint.resumed_cycles
    loaded = len(join_shards(finished))
    if args.resume is not None:
        log(f"gate_selftest: resuming {args.resume}: {loaded} of {args.n} iterations finished")
    launch.precompile({"tree": tree}, args.bench, log=log)
    timers: dict[str, None] = {}
    interrupted = False
    try:
        if gpus is None:
            iterate(
                setup,
                log=log,
                out=finished.setdefault(None, []),
                timers=timers,
                calibrated=calibrated,
                cycles=resumed(None),
                save=save,
            )
        else:
            shared = {"timers": timers, "calibrated": calibrated, "save": save}
            split_iterate(setup, gpus, log=log, out=finished, resumed=resumed, **shared)
    except KeyboardInterrupt:
        interrupted = True
    results = join_shards(finished)
    if interrupted:
        log(f"gate_selftest: interrupted; tallying the {len(results)} finished iterations")
    if not results:
        return EXIT_INTERRUPTED if interrupted else EXIT_FAILURE
    t = tally([aa for aa, _ in results], [inj for _, inj in results])
    print(render(t, args.slowdown))
    if args.json is not None:
        record = to_json(t, args.slowdown, threshold, args.rounds, args.bench, gpus, calibrated)
        record["inject_cycles"] = None if args.inject_cycles is None else args.inject_cycles.name
        record["method"] = args.method
        record["timer"] = "; ".join(timers) or None
        record["interrupted"] = interrupted
        record["resumed_iterations"] = loaded
        record["calibration"] = calibration.name if thresholds else None
        record["wall_s"] = round(time.perf_counter() - start, 1)
        args.json.write_text(json.dumps(record, indent=2) + "\n")
    return EXIT_INTERRUPTED if interrupted else 0


if __name__ == "__main__":
    sys.exit(main())
