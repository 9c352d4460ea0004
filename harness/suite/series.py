"""One machine's stored history, as series: every benchmark and parameter combination's
measured commits in branch order, read from asv's results files through
``harness.suite.result_files`` (each file checked; a commit stored as failed and a damaged
file left out and listed). What the history detector (``harness.suite.regressions``)
reads."""

from __future__ import annotations

import ast
import itertools
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from harness.suite import discovery
from harness.suite.result_files import Damaged, Failure, read_machine


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
        return discovery.combination_name(family, tuple(param_value(p) for p in self.params))


def param_value(text: str):
    """A parameter value as asv stores it (its repr: ``'square4096'``, ``128``), read
    back; text that is no literal as it is."""
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return text


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
