"""asv's results files, read without trusting them, and the two records this project adds
to asv's own: a damaged file set aside, and a commit that could not be measured.

- ``read_machine`` loads every results file of one machine through asv's ``Results``
  and checks what the readers use (values, statistics, samples); a file that does not
  pass is returned as ``Damaged`` with the reason, never raised.
- ``set_aside`` moves a damaged file to ``quarantine/<machine>/`` beside the results
  folder (``.asv/quarantine``), so that the commit's units are measured again: asv
  writes a results file in place, and a run cut off mid-write leaves JSON that stops
  every later ``asv run`` of that commit (asv loads the old file to merge into it).
- ``read_history`` turns one machine's usable runs into a ``Series`` of ``Point``s per
  benchmark and combination, in branch order: what the detector (``regressions``) reads.
- ``record_failure`` stores a commit whose suite cannot be listed, imported or compiled
  as asv stores a commit whose environment fails to build: a results file in which every
  benchmark of the suite (``benchmarks.json``, asv's record of it) has no value. The
  first line of the error goes in the file under ``FAILURE``, a key asv ignores, and
  ``failures`` reads it back. asv's publish draws nothing at that commit; the detector
  skips it; history treats the commit as stored.
"""

from __future__ import annotations

import ast
import itertools
import json
import math
import os
import shutil
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from harness.suite import discovery

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
    """Store ``target``'s commit (a ``harness.suite.run.Target``) as failed on its
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


# --- one machine's history, as series ----------------------------------------------


@dataclass(frozen=True, slots=True)
class Point:
    """One commit's stored result of one benchmark."""

    commit: str
    value: float  # asv's value: the median of the samples for this suite's tracks
    weight: float | None  # asv's data-point weight (2 / width of the 99% CI)
    samples: tuple[float, ...] = ()


@dataclass(frozen=True, slots=True)
class Series:
    """One benchmark's history on one machine, measured commits in branch order."""

    key: str  # asv's benchmark: gemm.Stage.track_latency
    params: tuple[str, ...]  # asv's stored parameter values (reprs): ("'4096x4096x4096'", ...)
    unit: str
    points: tuple[Point, ...]

    @property
    def name(self) -> str:
        """asv's name, as ``-b`` and ``asv publish`` give it."""
        return f"{self.key}({', '.join(self.params)})" if self.params else self.key

    @property
    def combination(self) -> str:
        """The gate's (and the calibration file's) name of this parameter combination."""
        family = self.key.rsplit(".", 1)[0]
        return discovery.combination_name(family, tuple(_literal(p) for p in self.params))


def _literal(text: str):
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return text


def machines(results_dir: Path) -> list[str]:
    """The asv machines with a folder (and its machine.json) under ``results_dir``."""
    return sorted(p.parent.name for p in Path(results_dir).glob("*/machine.json"))


def _units(results_dir: Path) -> dict[str, str]:
    """``{benchmark: unit}`` from the benchmarks.json asv keeps beside the machines."""
    try:
        data = json.loads((Path(results_dir) / "benchmarks.json").read_text())
    except (OSError, ValueError):
        return {}
    if not isinstance(data, dict):
        return {}
    return {k: str(v.get("unit", "")) for k, v in data.items() if isinstance(v, dict)}


def _weight(stats) -> float | None:
    from asv import _stats

    return _stats.get_weight(stats)


@dataclass(frozen=True, slots=True)
class History:
    """One machine's stored history as read: its series, how many stored commits the
    branch does not hold, and what was left out unread."""

    series: list[Series]
    ignored: int
    failed: tuple[Failure, ...]
    damaged: tuple[Damaged, ...]


def load_history(
    results_dir: Path, machine: str, commits: Sequence[str] | None = None
) -> tuple[list[Series], int]:
    """Every benchmark's series on ``machine``, and how many stored commits were left out
    because ``commits`` (the branch, oldest first) does not hold them (``read_history``)."""
    read = read_history(results_dir, machine, commits)
    return read.series, read.ignored


def read_history(results_dir: Path, machine: str, commits: Sequence[str] | None = None) -> History:
    """Every benchmark's series on ``machine``, in the order of ``commits`` (the branch,
    oldest first; without it the results' own dates). A failed or skipped combination is
    a gap; a commit stored as failed and a damaged file are left out, and listed."""
    files = read_machine(results_dir, machine)
    runs = list(files.runs)
    if commits is None:
        runs.sort(key=lambda r: (r.date or 0, r.commit_hash))
        order = {}
        for r in runs:
            order.setdefault(r.commit_hash, len(order))
    else:
        order = {sha: i for i, sha in enumerate(commits)}
    ignored = {r.commit_hash for r in runs if r.commit_hash not in order}
    # (key, params) -> {position: (started_at, Point)}; of two environments' results for
    # one commit, the newer run wins.
    table: dict[tuple[str, tuple[str, ...]], dict[int, tuple[float, Point]]] = {}
    for run in runs:
        pos = order.get(run.commit_hash)
        if pos is None:
            continue
        for key in run.get_all_result_keys():
            params = run.get_result_params(key)
            combos = list(itertools.product(*params)) if params else [()]
            values = run.get_result_value(key, params)
            stats = run.get_result_stats(key, params)
            samples = run.get_result_samples(key, params)
            started = run.started_at.get(key) or 0
            for j, combo in enumerate(combos):
                value = values[j]
                if not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
                    continue  # failed (None), skipped (NaN): no measurement
                got = [float(x) for x in (samples[j] or []) if math.isfinite(x)]
                point = Point(run.commit_hash, float(value), _weight(stats[j]), tuple(got))
                slot = table.setdefault((key, tuple(combo)), {})
                if pos not in slot or slot[pos][0] <= started:
                    slot[pos] = (started, point)
    units = _units(results_dir)
    series = [
        Series(key, params, units.get(key, ""), tuple(slot[p][1] for p in sorted(slot)))
        for (key, params), slot in table.items()
    ]
    series.sort(key=lambda s: s.name)
    failed = sorted(files.failed, key=lambda f: (order.get(f.sha, len(order)), f.sha))
    return History(series, len(ignored), tuple(failed), files.damaged)
