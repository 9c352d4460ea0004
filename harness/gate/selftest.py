"""Measure the gate itself: N A/A comparisons of one commit against itself (every
regression is a false alarm) and N comparisons against an injected slowdown of a chosen
size (every regression on the slowed benchmarks is a detection).

    nox -s gate_selftest -- [--n 20] [--slowdown 0.02] [--method paired] [--bench REGEX]
                            [--gpus all] [--json selftest.json] [--resume FILE]
    nox -s gate_selftest -- --slowdown 0.02 0.01 --threshold 0.01 0.005 \
                            --json at2pct.json at1pct.json    # two records, one run

``--resume FILE`` keeps a checkpoint of the finished iterations; the same command again
runs only the missing ones (``selftest_state``), so n = 20 can span several sessions, and
``--stop-after SECONDS`` ends a run between iterations, before a time limit.

Several slowdowns share every worker: each gets its own injected side (``injected`` for
the first, ``injected@<fraction>`` for the others), and each its own comparisons, tally
and record, decided at its own threshold. The A/A comparisons of the records are then
the same base and head samples, decided at each record's threshold: the records are
each a valid self-test, not independent of each other. A fourth side adds a third to
each worker's time, where a second self-test would double it.

With ``--method paired`` (the gate's default), each iteration is one fresh worker process
holding three sides built from HEAD's tree, ``base``, ``head`` and ``injected``, whose
kernels are launched in turn as the gate launches base and head; base against head is
the A/A comparison, base against injected the detection. With ``--method process``,
each iteration runs the gate's worker once per side on HEAD, each in a fresh process;
the A/A and the injected comparison share the base run (three runs where two separate
comparisons take four), and the runs' order cycles through all permutations across
iterations (and rounds), so drift in clocks or temperature reaches every side alike.
With ``--rounds R`` each comparison pools R rounds, as the gate does. ``--gpus`` splits
the benchmarks over GPUs with the gate's plan; a benchmark's runs always share one GPU.

The injection is test-only: the injected side launches its kernel's delayed build
(``kernels.gemm.make_gemm(..., delay=True)``: every block spins on the SM clock before
its pipeline starts), one launch as before, whose cycles the worker calibrates on the
gate's own trials (every side in their rotation, read by the verdict's statistic) until
the slowdown they show is the request (``harness.gate.inject``).
The tracked kernels are untouched, and nothing on the normal gate path passes the flag.
The delay is calibrated once per GPU by the first injected worker; later workers set
those cycles (``--inject-cycles``, a file under the work folder; ``--inject-cycles FILE``
takes an earlier self-test's and skips calibrating). After ``inject.SETTLE_ITERATIONS``
iterations the cycles are settled once on what the gate saw in them, and where any
moved those iterations run again (``selftest_state.settle_cycles``). The slowdown the
gate saw, the median over the iterations of the injected ratio, is recorded per
benchmark; where it misses the request by more than ``inject.TOLERANCE`` the benchmark
gets no detection rate: it is listed as refused, with why.

The calibration file is in force (``--calibration``, default the machine's), as in the
gate: a benchmark it marks too noisy is counted as such, neither detected nor alarmed.
"""

from __future__ import annotations

import itertools
import json
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from harness.cli import EXIT_FAILURE, EXIT_INTERRUPTED
from harness.gate import decide as gd
from harness.gate import inject, selftest_args
from harness.gate import samples as gs
from harness.gate.selftest_args import Arm, arm_side, one_or_all
from harness.gate.selftest_state import (
    Checkpoint,
    gpu_key,
    join_shards,
    keep_cycles,
    settle_cycles,
    tag_of,
)
from harness.gate.selftest_tally import compare, iteration_line, render, tally, to_json
from harness.measure import device
from harness.revisions import fanout, git, launch, placement, records
from harness.revisions.calibration import calibration_path
from harness.suite import discovery

SIDES = ("base", "head", "injected")


@dataclass(frozen=True, slots=True)
class Setup:
    """What every iteration shares: the worktree of HEAD, the benchmark regex, how many
    iterations and gate rounds, the injected slowdown, the gate's floor, the work folder
    and per-benchmark thresholds (calibration) when there are any; ``also``, further
    slowdowns measured by the same workers; ``deadline``, a ``time.monotonic()`` past
    which no iteration should end (``--stop-after``)."""

    tree: Path
    bench: str
    n: int
    rounds: int
    slowdown: float
    threshold: float
    work: Path
    thresholds: Mapping[str, float] | None = None
    method: str = "paired"
    # calibrated delay cycles to start from (``--inject-cycles``): a file for the first
    # slowdown, or {side: file}
    cycles: Path | Mapping[str, Path] | None = None
    also: tuple[Arm, ...] = ()
    deadline: float | None = None
    launch_scale: Path | None = None  # the calibration's (samples.write_launch_scales)

    @property
    def arms(self) -> tuple[Arm, ...]:
        first = Arm("injected", self.slowdown, self.threshold, self.thresholds)
        return (first, *self.also)

    @property
    def sides(self) -> tuple[str, ...]:
        return ("base", "head", *(arm.side for arm in self.arms))

    def given_cycles(self) -> dict[str, Path]:
        if self.cycles is None:
            return {}
        return {"injected": self.cycles} if isinstance(self.cycles, Path) else dict(self.cycles)


def order(i: int, sides: tuple[str, ...] = SIDES) -> tuple[str, ...]:
    """The order of the runs in block ``i``: all permutations of ``sides`` in turn, so
    each side takes each position, and each pair each relative order, equally often."""
    orders = list(itertools.permutations(sides))
    return orders[i % len(orders)]


def _runs(setup, i, tag, gpu, only, cycles, log, calibrated, timers) -> list[dict]:
    """The rounds of iteration ``i``: per round one paired worker holding every side, or
    (process) each side's own worker in the block's order. The first injected worker
    calibrates the delays; their files are added to ``cycles`` (side -> file)."""
    arms, runs = setup.arms, []
    injected = {arm.side: arm.slowdown for arm in arms}
    for r in range(setup.rounds):
        if setup.method == "paired":
            given = [cycles[arm.side] for arm in arms] if len(cycles) == len(arms) else None
            payload = launch.run_paired(
                dict.fromkeys(setup.sides, setup.tree),
                setup.bench,
                setup.work / f"paired{tag}-{i}-{r}.json",
                inject=injected,
                gpu=gpu,
                only=only,
                inject_cycles=given,
                launch_scale=setup.launch_scale,
            )
            if given is None:
                cycles.update(keep_cycles(setup.work, injected, payload, tag, log, calibrated))
            timer = fanout.timer_of([payload])
            if timer and timers is not None and timer not in timers:
                timers[timer] = None
                log(f"gate_selftest{tag}: timer: {timer}")
            runs.append(payload)
            continue
        got = {}
        for side in order(i * setup.rounds + r, setup.sides):
            out_file = setup.work / f"{side}{tag}-{i}-{r}.json"
            if side not in injected:
                got[side] = launch.run_worker(setup.tree, setup.bench, out_file, 0.0, gpu, only)
                continue
            got[side] = launch.run_worker(
                setup.tree,
                setup.bench,
                out_file,
                injected[side],
                gpu,
                only,
                inject_cycles=cycles.get(side),
            )
            if side not in cycles:
                one = {side: injected[side]}
                cycles.update(keep_cycles(setup.work, one, got[side], tag, log, calibrated))
        runs.append(got)
    return runs


def iterate(
    setup: Setup,
    gpu: int | None = None,
    only: Path | None = None,
    log: Callable[[str], None] = print,
    out: list | None = None,
    timers: dict[str, None] | None = None,
    calibrated: dict[str, dict[str, records.Injection]] | None = None,
    cycles: Mapping[str, Path] | None = None,
    save: Callable[[], None] | None = None,
    settled: dict[str, bool] | None = None,
) -> list[tuple[list[gd.Verdict], ...]]:
    """``setup.n`` iterations on one GPU (all visible when None): per iteration and round,
    the worker runs (``_runs``); returns each iteration's verdicts, (A/A, injected) per
    arm, appended to ``out`` as each finishes (so an interrupted run keeps the finished
    ones); the paired workers' timers are added to ``timers``. The first injected worker
    calibrates the delays (unless ``cycles``, side -> file, or ``setup.cycles`` give them;
    its records go to ``calibrated[side]``), every later one sets the same cycles.
    With ``settled`` (GPU key -> settled), cycles calibrated here are settled once after
    ``inject.SETTLE_ITERATIONS`` iterations (``settle_cycles``); where any moved, those
    iterations are dropped and run again. Iterations already in ``out`` (a resumed
    run's) count; ``save`` is called after each new one. Past ``setup.deadline`` it stops
    early, judged by the last iteration that did not calibrate (H200: 365 s, then 52)."""
    tag = tag_of(gpu)
    out = [] if out is None else out
    cycles = {**setup.given_cycles(), **(cycles or {})}
    settling = settled is not None and not settled.get(gpu_key(gpu)) and not setup.cycles
    last = None
    while len(out) < setup.n:
        i = len(out)
        if setup.deadline is not None and last is not None:
            if time.monotonic() + last > setup.deadline:
                log(f"gate_selftest{tag}: --stop-after reached; {i} of {setup.n} iterations done")
                break
        start = time.monotonic()
        calibrating = len(cycles) < len(setup.arms)
        runs = _runs(setup, i, tag, gpu, only, cycles, log, calibrated, timers)
        verdicts = []
        for arm in setup.arms:
            verdicts += compare(runs, arm.threshold, arm.thresholds, setup.method, arm.side)
        out.append(tuple(verdicts))
        took = time.monotonic() - start
        # An iteration that calibrated the delays took minutes more than the next will.
        last = last if calibrating else took
        slowdowns = [arm.slowdown for arm in setup.arms]
        line = iteration_line(slowdowns, verdicts, took)
        log(f"gate_selftest{tag}: iteration {i + 1}/{setup.n}: {line}")
        if settling and len(out) >= inject.SETTLE_ITERATIONS:
            settling, settled[gpu_key(gpu)] = False, True
            if settle_cycles(setup.arms, out, cycles, calibrated, tag, log):
                log(f"gate_selftest{tag}: cycles settled; these {len(out)} iterations run again")
                del out[:]
        if save is not None:
            save()
    return out


def split_iterate(
    setup: Setup,
    gpus: list[int],
    log: Callable[[str], None] = print,
    out: dict | None = None,
    timers: dict[str, None] | None = None,
    calibrated: dict[str, dict[str, records.Injection]] | None = None,
    resumed: Callable[[int | None], Mapping[str, Path]] = lambda gpu: {},
    save: Callable[[], None] | None = None,
    settled: dict[str, bool] | None = None,
) -> list[tuple[list[gd.Verdict], ...]]:
    """``iterate`` on every GPU at once, each over its share of the benchmarks
    (``fanout.fan_out``, the gate's plan), then each iteration's verdicts joined across
    GPUs. ``out`` collects each GPU's finished iterations as they come (and may hold a
    resumed run's); ``calibrated`` each GPU's injection calibrations; ``resumed(gpu)``
    gives a GPU's cycles files from a checkpoint."""
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
            settled=settled,
        )

    fanout.fan_out(list(names.names), gpus, setup.work, "selftest", one)
    return join_shards(out)


def main(argv: list[str] | None = None) -> int:
    args = selftest_args.parse(argv, __doc__)
    args.bench = args.bench or discovery.gate_subset(git.ROOT)
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
    arms = tuple(
        Arm(
            arm_side(k, slowdown),
            slowdown,
            threshold,
            gs.thresholds(calibration, args.method, floor),
        )
        for k, (slowdown, threshold, floor) in enumerate(
            zip(args.slowdown, args.thresholds, args.floors, strict=True)
        )
    )
    calibrated_by = bool(arms[0].thresholds)
    finished: dict = {}
    calibrated: dict[str, dict[str, records.Injection]] = {}
    settled: dict[str, bool] = {}
    scales = gs.launch_scales(calibration, args.method)
    save, resumed = None, lambda gpu: {}
    if args.resume is not None:
        settings = {"commit": sha, "bench": args.bench, "slowdown": one_or_all(args.slowdown)}
        settings |= {"threshold": one_or_all(args.thresholds), "method": args.method}
        settings |= {"rounds": args.rounds, "gpus": gpus}
        settings |= {"calibration": calibration.name if calibrated_by else None}
        sides = [arm.side for arm in arms]
        checkpoint = Checkpoint(args.resume, settings, work, sides, device.gpu_name())
        checkpoint.launch_scales = scales  # a resumed run keeps the ones it began with
        try:
            finished, calibrated = checkpoint.load()
        except ValueError as err:
            print(f"gate_selftest: error: {err}", file=sys.stderr)
            return EXIT_FAILURE
        save, resumed = (lambda: checkpoint.save(finished, calibrated)), checkpoint.resumed_cycles
        settled, scales = checkpoint.settled, checkpoint.launch_scales
    start = time.perf_counter()
    deadline = None if args.stop_after is None else time.monotonic() + args.stop_after
    setup = Setup(
        tree,
        args.bench,
        args.n,
        args.rounds,
        arms[0].slowdown,
        arms[0].threshold,
        work,
        arms[0].thresholds,
        args.method,
        {arm.side: args.cycles_files[arm.slowdown] for arm in arms} if args.cycles_files else None,
        arms[1:],
        deadline,
        gs.write_launch_scales(scales, work),
    )
    floors = ", ".join(f"{arm.threshold:.1%}" for arm in arms)
    log(
        f"gate_selftest: {args.method}; thresholds per benchmark from {calibration.name}, "
        f"floor {floors}, cap {gd.MAX_THRESHOLD:.0%}"
        if calibrated_by
        else f"gate_selftest: {args.method}; threshold {floors} for all (no calibration file)"
    )
    loaded = len(join_shards(finished))
    if args.resume is not None:
        log(f"gate_selftest: resuming {args.resume}: {loaded} of {args.n} iterations finished")
    if loaded < args.n:
        launch.precompile({"tree": tree}, args.bench, log=log)
    timers: dict[str, None] = {}
    interrupted = False
    try:
        if gpus is None:
            out = finished.setdefault(None, [])
            iterate(
                setup,
                log=log,
                out=out,
                timers=timers,
                calibrated=calibrated,
                cycles=resumed(None),
                save=save,
                settled=settled,
            )
        else:
            shared = {"timers": timers, "calibrated": calibrated, "save": save, "settled": settled}
            split_iterate(setup, gpus, log=log, out=finished, resumed=resumed, **shared)
    except KeyboardInterrupt:
        interrupted = True
    results = join_shards(finished)
    stopped = interrupted or len(results) < args.n
    if stopped:
        why = "interrupted" if interrupted else "stopped early (--stop-after)"
        log(f"gate_selftest: {why}; tallying the {len(results)} finished iterations")
    if not results:
        return EXIT_INTERRUPTED if stopped else EXIT_FAILURE
    for k, arm in enumerate(arms):
        t = tally([it[2 * k] for it in results], [it[2 * k + 1] for it in results])
        print(render(t, arm.slowdown))
        if args.json is None:
            continue
        found = calibrated.get(arm.side)
        record = to_json(t, arm.slowdown, arm.threshold, args.rounds, args.bench, gpus, found)
        record["inject_cycles"] = (
            None if not args.cycles_files else args.cycles_files[arm.slowdown].name
        )
        record["method"] = args.method
        record["timer"] = "; ".join(timers) or None
        record["interrupted"] = stopped
        record["resumed_iterations"] = loaded
        record["calibration"] = calibration.name if calibrated_by else None
        # The other records whose workers (and A/A samples) this one shared.
        record["measured_with"] = [a.slowdown for a in arms if a is not arm]
        record["commit"], record["gpu"] = sha, device.gpu_name()
        record["wall_s"] = round(time.perf_counter() - start, 1)
        args.json[k].write_text(json.dumps(record, indent=2) + "\n")
    return EXIT_INTERRUPTED if stopped else 0


if __name__ == "__main__":
    sys.exit(main())
