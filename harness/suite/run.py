"""Run the asv suite for one commit, durably: one ``asv run`` per batch of pieces (a
piece: a GPU family, a balanced group of its combinations on one GPU, or a module's CPU
families), each batch within ``shard.RUN_BUDGET_S`` predicted seconds, so an interruption
loses at most one batch per lane: each batch's results are on disk before the next one
starts.

    nox -s bench [-- --gpus all] [-- -b REGEX] [-- <asv run args>]
    python -m harness.suite.run [--gpus all] [--machine NAME] [-b REGEX] [-- <asv args>]

- A piece whose benchmarks fail is stored as failed (asv records it) and the rest go on;
  the exit status is then 2, after everything else ran and was saved.
- Run again after an interruption (or a failure), it measures only the selected
  benchmarks that hold no result for this commit and machine: asv keeps one results file
  per commit and machine and merges each run into it, combination by combination.
- ``-b REGEX`` selects benchmarks by asv's name
  (``gemm.Stage.track_latency('4096x4096x4096', 128, 3, 'f16')``) or by the gate's
  combination name (``gemm.Stage(4096x4096x4096, 128, 3, f16)``).
- ``--gpus`` spreads the GPU families' combinations over the host's GPUs
  (``harness.suite.shard``'s plan of the whole suite, then narrowed by ``-b``), one
  machine name per GPU; without it every GPU family runs whole on the visible device.
  Each ``asv run`` selects its pieces' names with ``-b`` (a family's prefix where the run
  holds all of it, else each name) and lists their combinations in
  ``discovery.COMBINATIONS_ENV`` (names carry their family), so each family's process
  measures its own piece only.
- The host-timing (``solo``) family runs first in its lane, in an ``asv run`` of its own
  (asv orders a run's families by name, so it could not be kept first inside a shared
  one), beside the other GPU lanes; the CPU lanes start when it ends, so no compile runs
  while it times the host.
- Every lane keeps its asv machine information in a file of its own
  (``Target.machine_file``), so the lanes start their runs at once.
- The CPU-only units (``static``: compile time, registers, shared memory) need nvcc, not a
  GPU: they run in a lane of their own beside the GPU lanes, with no GPU visible, under
  the asv machine ``<machine>-cpu`` (asv rewrites a commit's whole results file at the end
  of each run, so two lanes must never share a machine name). Under ``--gpus``, where
  they would end after the busiest GPU, the plan cuts them over several CPU lanes (one
  per ``shard.CORES_PER_CPU_LANE`` cores; ``<machine>-cpu1``, ...), whose compile workers
  together keep to half the cores (``discovery.CPU_WORKERS_ENV``).
- Every step prints a line ``timing <step> [<lane>]: <seconds> s`` (precompile, each
  batch by its pieces' keys joined with ``+``, publish, total): ``harness.suite.cost``
  fits its model to those lines. Each batch's is followed by the line of its ``asv
  run``'s phases, ``timing <step> <lane> phases: start-up 1.2 s, discovery ...``
  (``harness.suite.asv_phases``: where the seconds went, from when each of asv's lines
  began; ``read_timings`` passes over it).

The same runner measures an older commit in its own worktree (``harness.suite.history``):
``harness.suite.target.Target`` names the tree whose suite and kernels are measured and
the asv configuration that stores the results beside this checkout's. Which ``asv run``s
a run makes (the selection, the plan, what is stored already) is ``harness.suite.jobs``.
"""

from __future__ import annotations

import argparse
import codecs
import json
import os
import re
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace

from harness.cli import EXIT_FAILURE, EXIT_INTERRUPTED, EXIT_OK, gpu_list, regex
from harness.revisions.placement import parse_gpus
from harness.suite import asv_phases, discovery
from harness.suite.jobs import Job, plan_units
from harness.suite.target import ROOT, Lane, SuiteError, Target, environment

_PROGRESS = re.compile(r"^\[\s*([\d.]+)%\]")
_TIMING = re.compile(r"^timing (\S+)(?: (\S+))?: ([\d.]+) s$")


def timing_line(step: str, seconds: float, lane: str = "") -> str:
    """The log line of one step's wall time: ``timing gemm.Stage gpu0: 23.4 s``."""
    return f"timing {step}{' ' + lane if lane else ''}: {seconds:.1f} s"


_FAMILY = re.compile(r"^timing (\S+) (\S+) family: (\{.*\})$")


def families_line(unit: str, spent: dict, lane: str) -> str:
    """The log line of one GPU family process's seconds in an ``asv run``, whole and per
    combination in the order measured: ``timing gemm.Tuned gpu0 family: {"seconds": 23.7,
    "combinations": {...}}`` (``read_timings`` passes over it; ``read_families`` reads it)."""
    rounded = {
        "seconds": round(spent["seconds"], 2),
        "combinations": {n: round(s, 3) for n, s in spent["combinations"].items()},
    }
    return f"timing {unit} {lane} family: {json.dumps(rounded)}"  # in measuring order


def read_families(lines) -> list[tuple[str, str, dict]]:
    """``(unit, lane, {"seconds": s, "combinations": {name: s}})`` of every
    ``families_line`` in a log (a damaged one is left out)."""
    out = []
    for line in lines:
        found = _FAMILY.match(line.strip())
        if not found:
            continue
        try:
            record = discovery.spent(json.loads(found.group(3)))
        except (ValueError, KeyError, TypeError, AttributeError):
            continue
        out.append((found.group(1), found.group(2), record))
    return out


def read_timings(lines) -> list[tuple[str, str, float]]:
    """``(step, lane, seconds)`` of every ``timing_line`` in a log (other lines ignored;
    ``lane`` is "" for a step that has none)."""
    out = []
    for line in lines:
        found = _TIMING.match(line.strip())
        if found:
            out.append((found.group(1), found.group(2) or "", float(found.group(3))))
    return out


@dataclass
class UnitRun:
    unit: str  # the batch's key: its pieces' (gemm.Stage+gemm.Tuned[1/2])
    lane: Lane
    code: int = 0
    seconds: float = 0.0
    skipped: bool = False
    phases: dict[str, float] = field(default_factory=dict)  # asv_phases.phases of the run
    # Each GPU family process's seconds, whole and per combination (discovery.read_seconds).
    families: dict[str, dict] = field(default_factory=dict)


def run_target(
    target: Target,
    user: list[str] | None = None,
    asv_args: list[str] | None = None,
    gpus: list[int] | None = None,
    log: Callable[[str], None] = print,
    none_ok: bool = False,
) -> int:
    """Measure every selected combination of ``target`` not stored yet, one ``asv run``
    per batch, the lanes in parallel; the worst exit status, EXIT_INTERRUPTED on Ctrl-C
    (finished pieces stay stored). A solo piece (it times the host) runs first in its
    lane while the other GPU lanes start; the CPU lanes, whose compiles load the cores,
    wait until it ends (no compile runs while it times the host). A selection that
    matches nothing is bad input, unless ``none_ok`` (an older commit that predates the
    selected benchmarks)."""
    user, asv_args = list(user or []), list(asv_args or [])
    lanes, selected = plan_units(target, user, gpus, log)
    cpu_lanes = sum(lane.cpu for lane in lanes)
    if cpu_lanes > 1:
        # The CPU lanes' compile workers together stay within half the cores, as one's did.
        workers = max(1, (os.cpu_count() or 2) // 2 // cpu_lanes)
        target = replace(target, env={**target.env, discovery.CPU_WORKERS_ENV: str(workers)})
    pending = sum(len(jobs) for jobs in lanes.values())
    if not selected:
        log(f"run: no benchmark matches -b {' -b '.join(user)}" if user else "run: empty suite")
        return EXIT_OK if none_ok else EXIT_FAILURE
    if not pending:
        log(f"run {target.sha[:10]}: all {selected} asv runs already stored; nothing to run")
        return EXIT_OK
    if pending < selected:
        log(f"run {target.sha[:10]}: {selected - pending} of {selected} asv runs already stored")
    logs = target.tree / ".asv"
    logs.mkdir(parents=True, exist_ok=True)
    # The lanes' machine files share a folder, which asv would create in each lane at once.
    target.machine_file(target.machine).parent.mkdir(parents=True, exist_ok=True)
    runs: list[UnitRun] = []
    count = 0
    solo_left = [sum(job.solo for jobs in lanes.values() for job in jobs)]
    host_quiet = threading.Event()
    if not solo_left[0]:
        host_quiet.set()
    guard = threading.Lock()

    def released(job: Job) -> None:
        if job.solo:
            with guard:
                solo_left[0] -= 1
                if not solo_left[0]:
                    host_quiet.set()

    def work(lane: Lane, jobs: list[Job]) -> None:
        nonlocal count
        # Each lane writes its own machine file (``Target.machine_file``) in its own
        # thread: the lanes start at once, and a host of many lanes pays one
        # ``asv machine`` in wall time, not one per lane. A CPU lane writes it before it
        # waits for the host to go quiet.
        try:
            _machine(target, lane)
        except (OSError, subprocess.CalledProcessError) as err:
            why = getattr(err, "stderr", None) or b""
            why = why.decode(errors="replace").strip().splitlines()[-1:] or [str(err)]
            log(
                f"run {target.sha[:10]} {lane.tag}: asv machine failed ({why[0]}); "
                f"this lane's {len(jobs)} asv run(s) did not run"
            )
            for job in jobs:
                runs.append(UnitRun(job.key, lane, EXIT_FAILURE))
                released(job)
            return
        if lane.cpu:
            host_quiet.wait()
        for job in jobs:
            with guard:
                count += 1
                log(f"run {target.sha[:10]} {lane.tag}: [{count}/{pending}] {job.key}")
            try:
                done = _run_unit(target, job.key, lane, list(job.bench), asv_args, log, job.combos)
            except OSError as err:  # asv could not start: this run fails, the lane goes on
                log(f"    asv did not start: {err}")
                done = UnitRun(job.key, lane, EXIT_FAILURE)
            finally:
                released(job)
            log(timing_line(job.key, done.seconds, lane.tag))
            if done.phases:
                log(asv_phases.phases_line(job.key, done.phases, lane.tag))
            for unit, spent in done.families.items():
                log(families_line(unit, spent, lane.tag))
            runs.append(done)

    try:
        threads = [
            threading.Thread(target=work, args=(lane, jobs), daemon=True)
            for lane, jobs in lanes.items()
        ]
        for t in threads:
            t.start()
        for t in threads:
            while t.is_alive():
                t.join(timeout=0.5)
    except KeyboardInterrupt:
        log(f"run {target.sha[:10]}: interrupted; {len(runs)} finished asv run(s) are stored")
        return EXIT_INTERRUPTED
    failed = [r for r in runs if r.code]
    for r in runs:
        status = "ok" if not r.code else f"FAILED (asv exit {r.code})"
        log(f"  {r.unit}: {status}, {r.seconds:.0f} s")
    return EXIT_FAILURE if failed else EXIT_OK


def _machine(target: Target, lane: Lane) -> None:
    """``asv machine`` for ``lane``'s machine name, into the lane's own machine file."""
    machine = lane.machine(target.machine)
    subprocess.run(
        target.asv(
            "machine", "--yes", "--machine", machine, machine_file=target.machine_file(machine)
        ),
        cwd=target.tree,
        env=environment(target, lane),
        check=True,
        capture_output=True,
    )


def _run_unit(target, unit, lane, bench, asv_args, log, combos=()) -> UnitRun:
    machine = lane.machine(target.machine)
    env = environment(target, lane)
    if combos:
        env[discovery.COMBINATIONS_ENV] = json.dumps(list(combos))
    seconds_file = target.tree / ".asv" / f"seconds-{machine}.jsonl"
    seconds_file.unlink(missing_ok=True)
    env[discovery.SECONDS_ENV] = str(seconds_file)
    cmd = target.asv(
        "run",
        "-E",
        f"existing:{target.python}",
        "--set-commit-hash",
        target.sha,
        "--machine",
        machine,
        "--record-samples",
        *bench,
        *asv_args,
        machine_file=target.machine_file(machine),
    )
    start = time.perf_counter()
    logfile = target.tree / ".asv" / f"run-{machine}.log"
    stamped = []
    with logfile.open("a") as fh:
        proc = subprocess.Popen(
            cmd, cwd=target.tree, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
        )
        for seconds, line in asv_phases.stamp_lines(_chunks(proc.stdout, start)):
            fh.write(line + "\n")
            stamped.append((seconds, line))
            if _PROGRESS.match(line):  # asv's line per benchmark: its progress and result
                log(f"    {line.rstrip()}")
        proc.wait()
    seconds = time.perf_counter() - start
    if proc.returncode:
        log(f"    asv exited {proc.returncode}; its whole output is in {logfile}")
    return UnitRun(
        unit,
        lane,
        proc.returncode,
        seconds,
        phases=asv_phases.phases(stamped, seconds),
        families=discovery.read_seconds(seconds_file),
    )


def _chunks(stream, start: float) -> Iterator[tuple[float, str]]:
    """``(seconds since start, text)`` of a binary stream, piece by piece as it arrives:
    asv flushes a message before its line ends (``harness.suite.asv_phases``)."""
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    while chunk := stream.read1(65536):
        yield time.perf_counter() - start, decoder.decode(chunk)
    yield time.perf_counter() - start, decoder.decode(b"", final=True)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m harness.suite.run",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--gpus", type=gpu_list, default=None, help="'all' or indices like 0,1")
    p.add_argument("--machine", default=None, help="asv machine name (default: the GPU's)")
    p.add_argument(
        "-b", "--bench", action="append", type=regex, default=[], help="select benchmarks"
    )
    p.add_argument("--no-publish", action="store_true", help="skip asv publish at the end")
    p.add_argument("asv_args", nargs="*", help="passed to every asv run (after --)")
    # Options this command does not know (--quick, -e, ...) go to every asv run as well.
    args, extra = p.parse_known_args(argv)
    args.asv_args = [*extra, *args.asv_args]
    started = time.perf_counter()
    from harness.measure import device
    from harness.suite import precompile

    reason = device.no_gpu_reason()
    gpus = None
    user = list(args.bench)
    if reason:
        if args.gpus is not None:
            p.error(f"--gpus={args.gpus} needs a CUDA GPU and found none: {reason}")
        print(f"GPU tracks skipped: {reason}. Running the compile and resource tracks.")
        user = user or [r"^static\."]
    else:
        if args.gpus is not None:
            import torch

            try:
                gpus = parse_gpus(args.gpus, torch.cuda.device_count())
            except ValueError as err:
                p.error(str(err))
        # Fill TileLang's disk cache over all cores first; each family's setup_cache then
        # loads its kernels instead of compiling them one by one.
        start = time.perf_counter()
        precompile.main([])
        print(timing_line("precompile", time.perf_counter() - start), flush=True)
    sha = subprocess.check_output(["git", "rev-parse", "HEAD"], cwd=ROOT, text=True).strip()
    target = Target(ROOT, sha, args.machine or device.machine_name())
    start = time.perf_counter()
    try:
        code = run_target(target, user, args.asv_args, gpus, log=_log)
    except SuiteError as err:
        print(f"run: error: the suite of {sha[:10]} cannot be listed: {err}", file=sys.stderr)
        return EXIT_FAILURE
    print(timing_line("measure", time.perf_counter() - start), flush=True)
    if not args.no_publish and code != EXIT_INTERRUPTED:
        start = time.perf_counter()
        subprocess.run(target.asv("publish"), cwd=ROOT, check=False)
        print(timing_line("publish", time.perf_counter() - start), flush=True)
        print(f"published {ROOT / '.asv' / 'html' / 'index.html'}; view: python -m asv preview")
    print(timing_line("total", time.perf_counter() - started), flush=True)
    return code


_LOG_LOCK = threading.Lock()


def _log(line: str) -> None:
    """One whole line to stdout, flushed. Lanes log from threads: ``print`` writes the
    text and its newline in two calls, between which another lane's line could land
    (``timing ... save 0.1 srun ...``), and the cost model would lose a glued timing line."""
    with _LOG_LOCK:
        sys.stdout.write(line + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    sys.exit(main())
