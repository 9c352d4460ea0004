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
- ``--gpus`` spreads the units over the host's GPUs (``harness.suite.shard``'s plan),
  one machine name per GPU; without it every unit runs on the visible device.

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
from harness.suite import discovery, shard

ROOT = Path(__file__).resolve().parent.parent.parent
_PROGRESS = re.compile(r"^\[\s*([\d.]+)%\]")


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


def suite_listing(target: Target) -> dict[str, dict]:
    """``discovery.listing`` of the target's suite: in this process for this checkout;
    for another revision's tree in a child process with that tree on the path, since its
    suite imports that revision's harness and kernels."""
    if target.tree.resolve() == ROOT:
        return discovery.listing(ROOT)
    script = Path(discovery.__file__).resolve()
    out = subprocess.run(
        [target.python, str(script), "--list", str(target.tree)],
        cwd=target.tree,
        env=_env(target, None),
        check=True,
        capture_output=True,
        text=True,
    )
    return json.loads(out.stdout)


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


@dataclass
class UnitRun:
    unit: str
    gpu: int | None
    code: int = 0
    seconds: float = 0.0
    skipped: bool = False


def plan_units(
    target: Target, user: list[str], gpus: list[int] | None
) -> tuple[list[dict], dict[str, list[str]]]:
    """The steps of the run (``[{gpu: [unit, ...]}]``, solo units first, one after
    another) and each selected unit's ``-b`` arguments, minus units already stored."""
    listed = suite_listing(target)
    chosen = select(listed, user)
    every = {u: len(entry["names"]) for u, entry in listed.items()}
    solo = {u for u, entry in listed.items() if entry["solo"]}
    if gpus:  # weights need the kernels' shapes: this checkout's suite only
        steps = shard.phases(shard.family_weights(target.tree), gpus, solo)
    else:  # one device: the solo units first as well, then the rest in suite order
        steps = [{None: sorted(listed, key=lambda u: u not in solo)}]
    results_dir = target.results_dir()
    done_by_machine: dict[str, set[str]] = {}
    out_steps = []
    for step in steps:
        kept = {}
        for gpu, us in step.items():
            machine = machine_name(target.machine, gpu)
            done = done_by_machine.setdefault(machine, stored(results_dir, machine, target.sha))
            todo = [u for u in us if u in chosen and not set(chosen[u]) <= done]
            if todo:
                kept[gpu] = todo
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
    steps, args = plan_units(target, user, gpus)
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
    machines = {g: machine_name(target.machine, g) for g in (gpus or [None])}
    logs = target.tree / ".asv"
    logs.mkdir(parents=True, exist_ok=True)
    for gpu in {g for s in steps for g in s}:
        subprocess.run(
            target.asv("machine", "--yes", "--machine", machines[gpu]),
            cwd=target.tree,
            env=_env(target, gpu),
            check=True,
            capture_output=True,
        )
    runs: list[UnitRun] = []
    count = 0
    try:
        for step in steps:
            threads = []
            for gpu, units in step.items():

                def lane(gpu=gpu, units=units):
                    nonlocal count
                    for unit in units:
                        count += 1
                        tag = "" if gpu is None else f" gpu{gpu}"
                        log(f"run {target.sha[:10]}{tag}: [{count}/{pending}] {unit}")
                        runs.append(
                            _run_unit(target, unit, gpu, machines[gpu], args[unit], asv_args, log)
                        )

                t = threading.Thread(target=lane, daemon=True)
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


def _env(target: Target, gpu: int | None) -> dict[str, str]:
    env = {**os.environ, **target.env}
    if gpu is not None:
        env["CUDA_VISIBLE_DEVICES"] = visible_entry(gpu)
    return env


def _run_unit(target, unit, gpu, machine, bench, asv_args, log) -> UnitRun:
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
        proc = subprocess.Popen(
            cmd,
            cwd=target.tree,
            env=_env(target, gpu),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for line in proc.stdout:
            fh.write(line)
            if _PROGRESS.match(line):  # asv's line per benchmark: its progress and result
                log(f"    {line.rstrip()}")
        proc.wait()
    if proc.returncode:
        log(f"    asv exited {proc.returncode}; its whole output is in {logfile}")
    return UnitRun(unit, gpu, proc.returncode, time.perf_counter() - start)


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
        precompile.main([])
    sha = subprocess.check_output(["git", "rev-parse", "HEAD"], cwd=ROOT, text=True).strip()
    target = Target(ROOT, sha, args.machine or device.machine_name())
    code = run_target(target, user, args.asv_args, gpus)
    if not args.no_publish and code != EXIT_INTERRUPTED:
        subprocess.run(target.asv("publish"), cwd=ROOT, check=False)
        print(f"published {ROOT / '.asv' / 'html' / 'index.html'}; view: python -m asv preview")
    return code


if __name__ == "__main__":
    sys.exit(main())
