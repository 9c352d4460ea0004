"""Run the asv suite for one commit, durably: one ``asv run`` per unit (a GPU family, or a
module's CPU families), so each unit's results are on disk before the next one starts.

    nox -s bench [-- --gpus all] [-- -b REGEX] [-- <asv run args>]
    python -m harness.suite.run [--gpus all] [--machine NAME] [-b REGEX] [-- <asv args>]

- A unit whose benchmarks fail is stored as failed (asv records it) and the rest go on;
  the exit status is then 2, after everything else ran and was saved.
- Run again after an interruption (or a failure), it skips every unit whose selected
  benchmarks are all stored with a result for this commit and machine, and measures the
  rest: asv keeps one results file per commit and merges each run into it.
- ``-b REGEX`` selects benchmarks by asv's name
  (``gemm.Stage.track_latency('4096x4096x4096', 128, 3, 'f16')``) or by the gate's
  combination name (``gemm.Stage(4096x4096x4096, 128, 3, f16)``).
- ``--gpus`` spreads the GPU units over the host's GPUs (``harness.suite.shard``'s plan),
  one machine name per GPU; without it every GPU unit runs on the visible device.
- The CPU-only units (``static``: compile time, registers, shared memory) need nvcc, not a
  GPU: they run in a lane of their own beside the GPU lanes, with no GPU visible, under
  the asv machine ``<machine>-cpu`` (asv rewrites a commit's whole results file at the end
  of each run, so two lanes must never share a machine name).
- Every step prints a line ``timing <step> [<lane>]: <seconds> s`` (precompile, each
  unit, publish, total): ``harness.suite.cost`` fits its model to those lines.

The same runner measures an older commit in its own worktree (``harness.suite.history``):
``Target`` names the tree whose suite and kernels are measured and the asv configuration
that stores the results beside this checkout's.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import re
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from harness.cli import EXIT_FAILURE, EXIT_INTERRUPTED, EXIT_OK, gpu_list, regex
from harness.measure.gpu_state import visible_entry
from harness.suite import discovery, result_files, shard

ROOT = Path(__file__).resolve().parent.parent.parent
_PROGRESS = re.compile(r"^\[\s*([\d.]+)%\]")
_TIMING = re.compile(r"^timing (\S+)(?: (\S+))?: ([\d.]+) s$")


def timing_line(step: str, seconds: float, lane: str = "") -> str:
    """The log line of one step's wall time: ``timing gemm.Stage gpu0: 23.4 s``."""
    return f"timing {step}{' ' + lane if lane else ''}: {seconds:.1f} s"


def read_timings(lines) -> list[tuple[str, str, float]]:
    """``(step, lane, seconds)`` of every ``timing_line`` in a log (other lines ignored;
    ``lane`` is "" for a step that has none)."""
    out = []
    for line in lines:
        found = _TIMING.match(line.strip())
        if found:
            out.append((found.group(1), found.group(2) or "", float(found.group(3))))
    return out


@dataclass(frozen=True)
class Target:
    """One commit to measure: the checkout holding its suite and code, and where asv
    stores the results."""

    tree: Path  # the checkout measured (this one, or a worktree of an older commit)
    sha: str
    machine: str  # asv machine name (a GPU index is appended under --gpus)
    python: str = sys.executable
    config: Path | None = None  # asv.conf.json to run with; default tree/asv.conf.json
    env: Mapping[str, str] = field(default_factory=dict)  # extra environment

    def asv(self, *args: str) -> list[str]:
        conf = ["--config", str(self.config)] if self.config else []
        return [self.python, "-m", "asv", args[0], *conf, *args[1:]]

    def results_dir(self) -> Path:
        path = discovery.conf_path(self.config or self.tree)
        conf = discovery.read_asv_conf(path)
        return (path.parent / conf.get("results_dir", "results")).resolve()


class SuiteError(RuntimeError):
    """The target's suite cannot be listed (it does not import: a syntax error in its
    kernels, say); the message is the error's one line."""


def suite_listing(target: Target) -> dict[str, dict]:
    """``discovery.listing`` of the target's suite: in this process for this checkout;
    for another revision's tree in a child process with that tree on the path, since its
    suite imports that revision's harness and kernels. SuiteError when it fails."""
    if target.tree.resolve() == ROOT:
        try:
            return discovery.listing(ROOT)
        except Exception as err:  # anything the suite's import raises
            raise SuiteError(f"{type(err).__name__}: {err}") from err
    script = Path(discovery.__file__).resolve()
    out = subprocess.run(
        [target.python, str(script), "--list", str(target.tree)],
        cwd=target.tree,
        env=_env(target, None),
        check=False,
        capture_output=True,
        text=True,
    )
    lines = [line.strip() for line in out.stderr.splitlines() if line.strip()]
    if out.returncode:
        raise SuiteError(lines[-1] if lines else f"listing exited {out.returncode}")
    try:
        listed = json.loads(out.stdout)
    except ValueError as err:
        raise SuiteError(f"the listing is not JSON ({err})") from None
    if not isinstance(listed, dict):
        raise SuiteError(f"the listing is a JSON {type(listed).__name__}, not an object")
    return listed


def select(listed: Mapping[str, dict], user: list[str]) -> dict[str, list[str]]:
    """``{unit: asv names selected}`` for every unit with at least one; all of a unit's
    names without ``user`` regexes. A regex may match asv's name or the gate's."""
    out = {}
    for unit, entry in listed.items():
        chosen = [
            name
            for name, aliases in entry["names"].items()
            if not user or any(re.search(r, a) for r in user for a in aliases)
        ]
        if chosen:
            out[unit] = chosen
    return out


def selectors(unit: str, chosen: list[str], every: int) -> list[str]:
    """asv ``-b`` arguments that run exactly ``chosen`` of a unit holding ``every`` names:
    the unit's prefix when all are chosen, else each name anchored."""
    if len(chosen) == every:
        return ["-b", shard.asv_regex(unit)]
    return [arg for name in chosen for arg in ("-b", f"^{re.escape(name)}$")]


def stored(results_dir: Path, machine: str, sha: str) -> set[str]:
    """asv names (with params) that hold a result for ``sha`` on ``machine``."""
    from asv.results import iter_results_for_machine_and_hash

    done: set[str] = set()
    try:
        for result in iter_results_for_machine_and_hash(str(results_dir), machine, sha):
            for key in result.get_all_result_keys():
                params = result.get_result_params(key)
                values = result.get_result_value(key, params)
                combos = list(itertools.product(*params)) if params else [()]
                if not isinstance(values, list):
                    values = [values]
                for combo, value in zip(combos, values, strict=False):
                    # asv writes NaN for a combination the run did not select.
                    if value is not None and value == value:
                        done.add(f"{key}({', '.join(combo)})" if combo else key)
    except OSError:
        pass
    return done


def machine_name(stem: str, gpu: int | None) -> str:
    """asv machine of one GPU of a host (``h200-gpu1``), or the host's with one device."""
    return stem if gpu is None else f"{stem}-gpu{gpu}"


@dataclass(frozen=True, slots=True)
class Lane:
    """Where units run one after another: one GPU of the host (``gpu``), the visible
    device (neither set), or the host's CPU with no GPU visible (``cpu``)."""

    gpu: int | None = None
    cpu: bool = False

    def __post_init__(self):
        if self.cpu and self.gpu is not None:
            raise ValueError(f"Lane(gpu={self.gpu}, cpu=True): a CPU lane has no GPU")

    def machine(self, stem: str) -> str:
        return f"{stem}-cpu" if self.cpu else machine_name(stem, self.gpu)

    @property
    def tag(self) -> str:
        """``gpu0``, ``cpu``, or ``gpu`` for the visible device."""
        return "cpu" if self.cpu else "gpu" if self.gpu is None else f"gpu{self.gpu}"


CPU_LANE = Lane(cpu=True)


@dataclass
class UnitRun:
    unit: str
    lane: Lane
    code: int = 0
    seconds: float = 0.0
    skipped: bool = False


def lane_steps(
    listed: Mapping[str, dict], gpus: list[int] | None, weights: Mapping[str, float]
) -> list[dict[Lane, list[str]]]:
    """The steps of a run over the ``listed`` units: each solo unit alone, one after
    another (it times the host, which any other process would slow); then the GPU units
    (over ``gpus`` by ``shard.plan`` on ``weights``, else on the visible device in suite
    order) and, in the CPU lane beside them, the CPU-only units. The CPU lane waits for
    the solo step for the same reason."""
    solo = [u for u, entry in listed.items() if entry["solo"]]
    cpu_units = [u for u, entry in listed.items() if not entry.get("gpu", True) and u not in solo]
    gpu_units = [u for u in listed if u not in solo and u not in cpu_units]
    if gpus:
        *solos, rest = shard.phases({u: weights[u] for u in gpu_units}, gpus, set(solo))
        steps = [{Lane(g): us for g, us in phase.items()} for phase in solos]
        last = {Lane(g): us for g, us in rest.items() if us}
    else:
        steps = [{Lane(): [u]} for u in solo]
        last = {Lane(): gpu_units} if gpu_units else {}
    if cpu_units:
        last[CPU_LANE] = cpu_units
    steps.append(last)
    return [step for step in steps if step]


def plan_units(
    target: Target, user: list[str], gpus: list[int] | None, log: Callable[[str], None] = print
) -> tuple[list[dict[Lane, list[str]]], dict[str, list[str]]]:
    """The steps of the run (``lane_steps``) and each selected unit's ``-b`` arguments,
    minus units already stored. A damaged results file of the commit is set aside first
    (``result_files.sweep``), so its units count as not stored."""
    listed = suite_listing(target)
    chosen = select(listed, user)
    every = {u: len(entry["names"]) for u, entry in listed.items()}
    # weights need the kernels' shapes: this checkout's suite only
    weights = shard.family_weights(target.tree) if gpus else {}
    steps = lane_steps(listed, gpus, weights)
    results_dir = target.results_dir()
    done_by_machine: dict[str, set[str]] = {}
    out_steps = []
    for step in steps:
        kept = {}
        for lane, us in step.items():
            machine = lane.machine(target.machine)
            if machine not in done_by_machine:
                result_files.sweep(results_dir, machine, target.sha, lambda s: log(f"run: {s}"))
                done_by_machine[machine] = stored(results_dir, machine, target.sha)
            done = done_by_machine[machine]
            todo = [u for u in us if u in chosen and not set(chosen[u]) <= done]
            if todo:
                kept[lane] = todo
        if kept:
            out_steps.append(kept)
    args = {u: selectors(u, chosen[u], every[u]) for u in chosen}
    return out_steps, args


def run_target(
    target: Target,
    user: list[str] | None = None,
    asv_args: list[str] | None = None,
    gpus: list[int] | None = None,
    log: Callable[[str], None] = print,
    none_ok: bool = False,
) -> int:
    """Measure every selected unit of ``target`` not stored yet, one ``asv run`` each
    (per GPU in parallel under ``gpus``); the worst exit status, EXIT_INTERRUPTED on
    Ctrl-C (finished units stay stored). A selection that matches nothing is bad input,
    unless ``none_ok`` (an older commit that predates the selected benchmarks)."""
    user, asv_args = list(user or []), list(asv_args or [])
    steps, args = plan_units(target, user, gpus, log)
    selected = len(args)
    pending = sum(len(us) for s in steps for us in s.values())
    if not args:
        log(f"run: no benchmark matches -b {' -b '.join(user)}" if user else "run: empty suite")
        return EXIT_OK if none_ok else EXIT_FAILURE
    if not pending:
        log(f"run {target.sha[:10]}: all {selected} units already stored; nothing to run")
        return EXIT_OK
    if pending < selected:
        log(f"run {target.sha[:10]}: {selected - pending} of {selected} units already stored")
    lanes = {lane for s in steps for lane in s}
    logs = target.tree / ".asv"
    logs.mkdir(parents=True, exist_ok=True)
    for lane in lanes:
        subprocess.run(
            target.asv("machine", "--yes", "--machine", lane.machine(target.machine)),
            cwd=target.tree,
            env=_env(target, lane),
            check=True,
            capture_output=True,
        )
    runs: list[UnitRun] = []
    count = 0
    try:
        for step in steps:
            threads = []
            for lane, units in step.items():

                def work(lane=lane, units=units):
                    nonlocal count
                    for unit in units:
                        count += 1
                        log(f"run {target.sha[:10]} {lane.tag}: [{count}/{pending}] {unit}")
                        done = _run_unit(target, unit, lane, args[unit], asv_args, log)
                        log(timing_line(unit, done.seconds, lane.tag))
                        runs.append(done)

                t = threading.Thread(target=work, daemon=True)
                threads.append(t)
                t.start()
            for t in threads:
                while t.is_alive():
                    t.join(timeout=0.5)
    except KeyboardInterrupt:
        log(f"run {target.sha[:10]}: interrupted; {len(runs)} finished unit(s) are stored")
        return EXIT_INTERRUPTED
    failed = [r for r in runs if r.code]
    for r in runs:
        status = "ok" if not r.code else f"FAILED (asv exit {r.code})"
        log(f"  {r.unit}: {status}, {r.seconds:.0f} s")
    return EXIT_FAILURE if failed else EXIT_OK


def _env(target: Target, lane: Lane | None) -> dict[str, str]:
    env = {**os.environ, **target.env}
    if lane is not None and lane.cpu:
        # Nothing in the CPU lane may open a CUDA context on a GPU another lane times.
        env["CUDA_VISIBLE_DEVICES"] = ""
    elif lane is not None and lane.gpu is not None:
        env["CUDA_VISIBLE_DEVICES"] = visible_entry(lane.gpu)
    return env


# Every `asv run` rewrites ~/.asv-machine.json in place as it starts (Machine.load), and
# another one reading it half-written fails. Lanes start their runs one at a time: the
# next waits until this one logs its discovery, which asv does after that write.
_ASV_START = threading.Lock()
_DISCOVERING = "Discovering benchmarks"


def _run_unit(target, unit, lane, bench, asv_args, log) -> UnitRun:
    machine = lane.machine(target.machine)
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
    )
    start = time.perf_counter()
    logfile = target.tree / ".asv" / f"run-{machine}.log"
    with logfile.open("a") as fh:
        _ASV_START.acquire()
        starting = True
        try:
            proc = subprocess.Popen(
                cmd,
                cwd=target.tree,
                env=_env(target, lane),
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
            )
            for line in proc.stdout:
                fh.write(line)
                if starting and _DISCOVERING in line:
                    _ASV_START.release()
                    starting = False
                if _PROGRESS.match(line):  # asv's line per benchmark: its progress and result
                    log(f"    {line.rstrip()}")
            proc.wait()
        finally:
            if starting:
                _ASV_START.release()
    if proc.returncode:
        log(f"    asv exited {proc.returncode}; its whole output is in {logfile}")
    return UnitRun(unit, lane, proc.returncode, time.perf_counter() - start)


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
                gpus = shard.parse_gpus(args.gpus, torch.cuda.device_count())
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


def _log(line: str) -> None:
    # Lanes log from threads, and the log is read while the run goes on.
    print(line, flush=True)


if __name__ == "__main__":
    sys.exit(main())
