"""``regressions.json``: the history detector's findings as the publish workflow hands
them to the announcer, written and read here.

The detector (``python -m harness.suite.regressions --json FILE``) writes an object,
``"version": 2`` (version 1 was the bare list of regressions), with one entry per
regression (``Regression.as_json``) and the newest stored value of every benchmark
checked (``latest_values``). The announcer (``harness.suite.announce``) reads either
version back, every field checked (``load``): what it takes from the artifact goes into
issues, so a field that is missing, of the wrong type or not what its name says is an
error naming the file, the entry and the field.

Stdlib only at import: the announcer runs where nothing is installed.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from harness.report.values import human
from harness.suite.issue_state import MACHINE, Span

if TYPE_CHECKING:
    from harness.suite.detector.records import Regression
    from harness.suite.series import Series

FILE_NAME = "regressions.json"
_SHA = re.compile(r"^[0-9a-f]{40}$")


# --- writing -----------------------------------------------------------------------------


JSON_VERSION = 2


def render_json(regressions: Sequence[Regression], latest: Sequence[dict] = ()) -> str:
    """The document ``--json`` writes: ``regressions`` and ``latest`` (``latest_values``)."""
    doc = {
        "version": JSON_VERSION,
        "regressions": [r.as_json() for r in regressions],
        "latest": list(latest),
    }
    return json.dumps(doc, indent=1) + "\n"


def latest_values(series: Iterable[Series], machine: str) -> list[dict]:
    """The newest stored value of each of ``series`` (one machine's), as ``--json`` writes
    it under ``latest``."""
    out = []
    for s in series:
        if s.points:
            p = s.points[-1]
            out.append(
                {
                    "benchmark": s.name,
                    "machine": machine,
                    "commit": p.commit,
                    "value": p.value,
                    "text": human(p.value, s.unit),
                }
            )
    return out


# --- reading -----------------------------------------------------------------------------


class FileError(RuntimeError):
    """A regressions file (or a path to one) that cannot be read; the message names it
    and what is wrong."""


@dataclass(frozen=True, slots=True)
class Entry:
    """One regression of a regressions.json: one benchmark's step on one machine."""

    benchmark: str
    machine: str
    span: Span
    row: Mapping[str, object]


@dataclass(frozen=True, slots=True)
class Latest:
    """The newest stored value of one benchmark on one machine."""

    benchmark: str
    machine: str
    commit: str
    value: float
    text: str


def _field(obj: dict, where: str, name: str, kind: type | tuple[type, ...]):
    value = obj.get(name)
    if not isinstance(value, kind) or isinstance(value, bool):
        raise FileError(f"{where}: {name!r} is missing or not {kind}")
    return value


def _benchmark(obj: dict, where: str) -> str:
    benchmark = _field(obj, where, "benchmark", str)
    # The name goes into an HTML comment: one line, no comment end.
    if not 0 < len(benchmark) <= 300 or "--" in benchmark or not benchmark.isprintable():
        raise FileError(f"{where}: 'benchmark' {benchmark!r} is not a benchmark name")
    return benchmark


def _machine(obj: dict, where: str) -> str:
    machine = _field(obj, where, "machine", str)
    if not MACHINE.match(machine):
        raise FileError(f"{where}: 'machine' {machine!r} is not a machine name")
    return machine


def _sha(obj: dict, where: str, name: str) -> str:
    sha = _field(obj, where, name, str)
    if not _SHA.match(sha):
        raise FileError(f"{where}: {name!r} {sha!r} is not a full commit hash")
    return sha


def _entry(obj: object, where: str) -> Entry:
    if not isinstance(obj, dict):
        raise FileError(f"{where}: not an object")
    benchmark, machine = _benchmark(obj, where), _machine(obj, where)
    good, bad = _sha(obj, where, "good"), _sha(obj, where, "bad")
    commits = obj.get("commits")  # absent in files written before it was recorded
    if commits is not None:
        if not (
            isinstance(commits, list)
            and commits
            and all(isinstance(c, str) and _SHA.match(c) for c in commits)
            and commits[-1] == bad
        ):
            raise FileError(f"{where}: 'commits' must list full hashes ending with 'bad'")
        commits = tuple(commits)
    span = Span(
        good,
        bad,
        commits,
        str(obj.get("bad_subject") or "")[:200],
        str(obj.get("bad_author") or "")[:100],
    )
    before = obj.get("before")
    row = {
        "before_text": _field(obj, where, "before_text", str)[:40],
        "after_text": _field(obj, where, "after_text", str)[:40],
        "ratio": float(_field(obj, where, "ratio", (int, float))),
        "threshold": float(_field(obj, where, "threshold", (int, float))),
        "source": _field(obj, where, "threshold_source", str)[:40],
        "range": f"{good[:8]}..{bad[:8]}",
    }
    if isinstance(before, (int, float)) and not isinstance(before, bool) and before > 0:
        row["before_value"] = float(before)
    return Entry(benchmark, machine, span, row)


def _latest(obj: object, where: str) -> Latest:
    if not isinstance(obj, dict):
        raise FileError(f"{where}: not an object")
    return Latest(
        _benchmark(obj, where),
        _machine(obj, where),
        _sha(obj, where, "commit"),
        float(_field(obj, where, "value", (int, float))),
        _field(obj, where, "text", str)[:40],
    )


def load_rows(rows: Sequence[object], where: str = "regressions") -> list[Entry]:
    """The entries of a ``regressions`` list."""
    return [_entry(obj, f"{where}[{i}]") for i, obj in enumerate(rows)]


def files(paths: Iterable[Path]) -> list[Path]:
    """The regressions.json files ``paths`` name: files as given, folders searched."""
    out = []
    for path in paths:
        if path.is_dir():
            out += sorted(path.rglob(FILE_NAME))
        elif path.is_file():
            out.append(path)
        else:
            raise FileError(f"{path}: no such file or folder")
    return out


def load(paths: Iterable[Path]) -> tuple[list[Entry], list[Latest]]:
    """The regressions and newest values of every file: version 2 (an object with
    ``regressions`` and ``latest``) or version 1 (the bare list of regressions)."""
    entries, latest = [], []
    for path in paths:
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError) as err:
            raise FileError(f"{path}: not a regressions file ({err})") from None
        if isinstance(data, list):
            data = {"regressions": data, "latest": []}
        if not (
            isinstance(data, dict)
            and isinstance(data.get("regressions"), list)
            and isinstance(data.get("latest", []), list)
        ):
            raise FileError(f"{path}: not a regressions file (no 'regressions' list)")
        entries += load_rows(data["regressions"], str(path))
        latest += [_latest(o, f"{path} latest[{i}]") for i, o in enumerate(data.get("latest", []))]
    return entries, latest
