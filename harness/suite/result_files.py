"""asv's results files, read without trusting them, and the two records this project adds
to asv's own: a damaged file set aside, and a commit that could not be measured.

- ``read_machine`` loads every results file of one machine through asv's ``Results``
  and checks what the readers use (values, statistics, samples); a file that does not
  pass is returned as ``Damaged`` with the reason, never raised.
- ``stored`` lists what a commit's results hold on a machine (asv's names, with
  parameters): what the runner need not measure again.
- ``set_aside`` moves a damaged file to ``quarantine/<machine>/`` beside the results
  folder (``.asv/quarantine``), so that the commit's units are measured again: asv
  writes a results file in place, and a run cut off mid-write leaves JSON that stops
  every later ``asv run`` of that commit (asv loads the old file to merge into it).
- ``harness.suite.series`` turns one machine's usable runs (``read_machine``) into a
  ``Series`` of ``Point``s per benchmark and combination, in branch order: what the
  detector reads.
- ``record_failure`` stores a commit whose suite cannot be listed, imported or compiled
  as asv stores a commit whose environment fails to build: a results file in which every
  benchmark of the suite (``benchmarks.json``, asv's record of it) has no value. The
  first line of the error goes in the file under ``FAILURE``, a key asv ignores, and
  ``failures`` reads it back. asv's publish draws nothing at that commit; the detector
  skips it; history treats the commit as stored.
"""

from __future__ import annotations

import itertools
import json
import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

FAILURE = "failure"  # top-level key of a results file: why the commit was not measured
QUARANTINE = "quarantine"  # beside the results folder: damaged files set aside
SKIP = {"machine.json", "benchmarks.json"}


@dataclass(frozen=True, slots=True)
class Damaged:
    """A file that asv or the readers here cannot use, and why."""

    path: Path
    reason: str


@dataclass(frozen=True, slots=True)
class Failure:
    """A commit stored as failed: its results file and the first line of its error."""

    sha: str
    error: str
    path: Path


def first_line(text: str) -> str:
    """The first non-empty line of an error text, as the record keeps it."""
    return next((line.strip() for line in str(text).splitlines() if line.strip()), "")


def _error(err: BaseException) -> str:
    text = first_line(str(err))
    return f"{type(err).__name__}: {text}" if text else type(err).__name__


def _is_number(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def _check(result) -> None:
    """Raise where a loaded ``Results`` holds something of the wrong type (asv's loader
    takes any JSON; its getters then fail later, deep inside a reader)."""
    if not isinstance(result.commit_hash, str):
        raise TypeError("'commit_hash' is not a string")
    if not (result.date is None or _is_number(result.date)):
        raise TypeError("'date' is not a number")
    if not isinstance(result.started_at, dict) or not all(
        v is None or _is_number(v) for v in result.started_at.values()
    ):
        raise TypeError("'started_at' is not an object of numbers")
    for key in result.get_all_result_keys():
        params = result.get_result_params(key)
        if not isinstance(params, list) or not all(isinstance(p, list) for p in params):
            raise TypeError(f"{key}: 'params' must be a list of lists")
        size = len(list(itertools.product(*params)))
        for what, getter in (
            ("result", result.get_result_value),
            ("stats", result.get_result_stats),
            ("samples", result.get_result_samples),
        ):
            got = getter(key, params)
            if not isinstance(got, list) or len(got) != size:
                raise TypeError(f"{key}: {what!r} does not match its {size} combination(s)")
            for x in got:
                if x is None or (what == "result" and _is_number(x)):
                    continue
                if what == "stats" and isinstance(x, dict):
                    continue
                if what == "samples" and isinstance(x, list) and all(map(_is_number, x)):
                    continue
                raise TypeError(f"{key}: {what!r} holds {type(x).__name__} {str(x)[:40]!r}")


def load(path: Path, machine: str | None = None):
    """asv's ``Results`` of ``path``, checked; ValueError (the reason) when damaged."""
    return _load(path, machine)[0]


def _load(path: Path, machine: str | None) -> tuple:
    """``(Results, the file's JSON)``; ValueError (the reason) when damaged."""
    from asv.results import Results

    try:
        data = json.loads(Path(path).read_text())
        if not isinstance(data, dict):
            raise TypeError(f"holds a JSON {type(data).__name__}, not an object")
        if not isinstance(data.get("results"), dict):
            raise TypeError("'results' is not an object")
        result = Results.load(str(path), machine_name=machine)
        _check(result)
    except Exception as err:  # asv's loader raises anything on a malformed file
        raise ValueError(_error(err)) from None
    return result, data


def check_machine(results_dir: Path, machine: str) -> str | None:
    """Why ``<machine>/machine.json`` cannot be read as asv reads it, or None."""
    from asv import util
    from asv.machine import Machine

    path = Path(results_dir) / machine / "machine.json"
    try:
        data = util.load_json(str(path), api_version=Machine.api_version)
        if not isinstance(data.get("machine"), str):
            raise ValueError("no 'machine' name")
    except Exception as err:
        return _error(err)
    return None


def result_paths(results_dir: Path, machine: str, sha: str | None = None) -> list[Path]:
    """The results files of ``machine`` (of commit ``sha`` only, when given)."""
    prefix = f"{sha[:8]}-" if sha else ""
    folder = Path(results_dir) / machine
    return sorted(p for p in folder.glob(f"{prefix}*.json") if p.name not in SKIP and p.is_file())


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


@dataclass(frozen=True, slots=True)
class MachineFiles:
    """One machine's results files, read: the usable runs (asv ``Results``, failed
    commits' records left out), the commits stored as failed, the damaged files."""

    runs: tuple
    failed: tuple[Failure, ...]
    damaged: tuple[Damaged, ...]


def read_machine(results_dir: Path, machine: str) -> MachineFiles:
    """Every results file of ``machine``, loaded and checked."""
    runs, failed, damaged = [], [], []
    for path in result_paths(results_dir, machine):
        try:
            result, data = _load(path, machine)
        except ValueError as err:
            damaged.append(Damaged(path, str(err)))
            continue
        if isinstance(data.get(FAILURE), str):
            failed.append(Failure(result.commit_hash, data[FAILURE], path))
        else:
            runs.append(result)
    return MachineFiles(tuple(runs), tuple(failed), tuple(damaged))


def set_aside(path: Path, results_dir: Path) -> Path:
    """Move a damaged file to ``quarantine/<machine>/`` beside ``results_dir``; its new
    path (numbered when an earlier one of the same name is there)."""
    folder = Path(results_dir).resolve().parent / QUARANTINE / path.parent.name
    folder.mkdir(parents=True, exist_ok=True)
    dest = folder / path.name
    n = 1
    while dest.exists():
        dest = folder / f"{path.name}.{n}"
        n += 1
    shutil.move(str(path), dest)
    return dest


def sweep(results_dir: Path, machine: str, sha: str, log) -> list[Path]:
    """Set aside ``machine``'s damaged files that a run of ``sha`` would load (its own
    results files and machine.json), each with a warning naming it; their paths."""
    moved = []
    candidates = result_paths(results_dir, machine, sha)
    machine_json = Path(results_dir) / machine / "machine.json"
    if machine_json.exists() and check_machine(results_dir, machine):
        candidates.append(machine_json)
    for path in candidates:
        if path.name == "machine.json":
            reason = check_machine(results_dir, machine)
        else:
            try:
                load(path, machine)
                continue
            except ValueError as err:
                reason = str(err)
        dest = set_aside(path, results_dir)
        log(f"warning: {path} is damaged ({reason}); moved to {dest}, measured again")
        moved.append(dest)
    return moved


def failures(results_dir: Path, machine: str) -> dict[str, Failure]:
    """``{sha: Failure}`` of the commits stored as failed for ``machine``."""
    out = {}
    for path in result_paths(results_dir, machine):
        try:
            data = json.loads(path.read_text())
            failure, sha = data.get(FAILURE), data.get("commit_hash")
        except (OSError, ValueError, AttributeError):
            continue
        if isinstance(failure, str) and isinstance(sha, str):
            out[sha] = Failure(sha, failure, path)
    return out


def record_failure(target, error: str, log=print) -> Path:
    """Store ``target``'s commit (a ``harness.suite.target.Target``) as failed on its
    machine: every benchmark of ``benchmarks.json`` without a value, results already
    stored for it kept, and ``error``'s first line under ``FAILURE``. The file is the
    one ``asv run`` of the commit would write, so a later run merges into it."""
    from asv import util
    from asv.config import Config
    from asv.environment import ExistingEnvironment
    from asv.machine import Machine
    from asv.results import Results, get_filename
    from asv.runner import fail_benchmark

    results_dir = target.results_dir()
    config = Config.load(str(target.config or Path(target.tree) / "asv.conf.json"))
    env = ExistingEnvironment(config, target.python, {}, {})
    subprocess.run(
        target.asv("machine", "--yes", "--machine", target.machine),
        cwd=target.tree,
        env={**os.environ, **target.env},
        check=True,
        capture_output=True,
    )
    machine = Machine.load(machine_name=target.machine)
    machine.save(str(results_dir))
    params = {**machine.__dict__, "python": env.python}
    date = int(_git_time(target.tree, target.sha)) * 1000
    result = Results(params, {}, target.sha, date, env.python, env.name, env.env_vars)
    path = results_dir / get_filename(target.machine, target.sha, env.name)
    if path.exists():
        try:
            result.load_data(str(results_dir))
        except Exception as err:  # damaged: set it aside, as the runner would
            dest = set_aside(path, results_dir)
            log(f"warning: {path} is damaged ({_error(err)}); moved to {dest}")
    try:
        suite = util.load_json(str(results_dir / "benchmarks.json"), api_version=2)
    except Exception:  # none yet (nothing measured here before), or damaged
        suite = {}
    for name, bench in suite.items():
        if not isinstance(bench, dict) or name in result.get_all_result_keys():
            continue
        params_ = bench.get("params") if isinstance(bench.get("params"), list) else []
        entry = {"name": name, "version": bench.get("version"), "params": params_}
        result.add_result(entry, fail_benchmark(entry, stderr=error))
    result.save(str(results_dir))
    data = json.loads(path.read_text())
    data[FAILURE] = first_line(error) or "failed"
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data, separators=(",", ":")))
    os.replace(tmp, path)
    return path


def _git_time(tree: Path, sha: str) -> str:
    """The commit's author time, seconds (asv dates a commit by it, in milliseconds)."""
    return subprocess.run(
        ["git", "log", "-1", "--format=%at", sha],
        cwd=tree,
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()


def machines(results_dir: Path) -> list[str]:
    """The asv machines with a folder (and its machine.json) under ``results_dir``."""
    return sorted(p.parent.name for p in Path(results_dir).glob("*/machine.json"))
