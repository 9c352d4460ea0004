"""Recorded sweeps read back from JSON lines (``bench_gemm --jsonl``), without a GPU.

A file may hold several runs, appended one after another: each starts with a meta line
and tags its rows with the run's id. Rows from before run ids were recorded belong to the
run-less meta line above them: one legacy run per such line (``legacy``, or ``legacy-1``,
``legacy-2``... when there are several). A torn line (an interrupted write: not complete
JSON) is skipped with a note naming its line; a row that does not match the schema, or
holds a timing that is not a positive finite number, is refused with its line.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from harness.measure.cases import CaseResult

LEGACY = "legacy"


class RecordError(ValueError):
    """A recorded file that cannot be used as it is; the message names the line."""


@dataclass(frozen=True, slots=True)
class Run:
    id: str
    meta: Mapping
    rows: tuple[CaseResult, ...]
    line: int  # where the run starts

    def describe(self) -> str:
        """One line for a listing: id, GPU, start, rows, command."""
        when = self.meta.get("started") or self.meta.get("date") or "?"
        gpu = self.meta.get("gpu", "?")
        command = self.meta.get("command", "?")
        return f"{self.id}  {gpu}  {when}  {len(self.rows)} rows  {command}"


def read_jsonl(path: Path) -> tuple[list[tuple[int, dict]], list[str]]:
    """Each complete JSON object of ``path`` with its line number, and a note per torn
    line. A complete line that is not an object raises RecordError."""
    records, notes = [], []
    for number, text in enumerate(path.read_text().splitlines(), 1):
        if not text.strip():
            continue
        try:
            record = json.loads(text)
        except json.JSONDecodeError as err:
            notes.append(f"{path}:{number}: torn line skipped (not complete JSON: {err})")
            continue
        if not isinstance(record, dict):
            raise RecordError(f"{path}:{number}: must be a JSON object, got {text[:60]!r}")
        records.append((number, record))
    return records, notes


def read_runs(path: Path) -> tuple[list[Run], list[str]]:
    """The runs recorded in ``path``, in file order, and notes on skipped torn lines and
    runs without a meta line."""
    records, notes = read_jsonl(path)
    metas: dict[str, Mapping] = {}
    rows: dict[str, list[CaseResult]] = {}
    starts: dict[str, int] = {}
    legacy: str | None = None
    legacy_count = 0
    for number, record in records:
        if "meta" in record:
            meta = record["meta"]
            if not isinstance(meta, dict):
                raise RecordError(f"{path}:{number}: meta must be a JSON object")
            run = meta.get("run")
            if run is None:
                legacy_count += 1
                run = legacy = f"{LEGACY}-{legacy_count}"
            if not isinstance(run, str):
                raise RecordError(f"{path}:{number}: meta.run={run!r}: must be a string")
            if run in metas:
                raise RecordError(f"{path}:{number}: a second meta line for run {run!r}")
            metas[run] = meta
            starts.setdefault(run, number)
            rows.setdefault(run, [])
            continue
        if "launch_us" in record:  # launch-overhead lines have no latency row
            continue
        run = record.get("run")
        if run is None:
            if legacy is None:  # rows before any meta line
                legacy_count += 1
                legacy = f"{LEGACY}-{legacy_count}"
            run = legacy
        if not isinstance(run, str):
            raise RecordError(f"{path}:{number}: run={run!r}: must be a string")
        try:
            row = CaseResult.from_dict(record)
        except (ValueError, TypeError, KeyError) as err:
            raise RecordError(f"{path}:{number}: {err}") from None
        starts.setdefault(run, number)
        rows.setdefault(run, []).append(row)
    if legacy_count == 1:  # one legacy run: plain "legacy"
        rename = {f"{LEGACY}-1": LEGACY}
        metas = {rename.get(k, k): v for k, v in metas.items()}
        rows = {rename.get(k, k): v for k, v in rows.items()}
        starts = {rename.get(k, k): v for k, v in starts.items()}
    runs = []
    for run, line in sorted(starts.items(), key=lambda kv: kv[1]):
        if run not in metas:
            notes.append(f"{path}: run {run!r} has no meta line (GPU and command unknown)")
        runs.append(Run(run, metas.get(run, {}), tuple(rows[run]), line))
    return runs, notes


def pick_run(path: Path, runs: Sequence[Run], wanted: str | None) -> Run:
    """The run ``wanted`` (an id or a unique prefix of one), or the only run with rows.
    Several runs and no choice, or a choice that matches none, raise RecordError that
    lists the runs."""
    measured = [r for r in runs if r.rows]
    listing = "\n".join("  " + r.describe() for r in measured)
    if not measured:
        raise RecordError(f"{path}: holds no measured rows")
    if wanted is None:
        if len(measured) == 1:
            return measured[0]
        raise RecordError(
            f"{path} holds {len(measured)} runs; choose one with --run ID:\n{listing}"
        )
    matches = [r for r in measured if r.id == wanted] or [
        r for r in measured if r.id.startswith(wanted)
    ]
    if len(matches) != 1:
        what = "matches no run" if not matches else "matches several runs"
        raise RecordError(f"--run {wanted!r} {what} with rows in {path}:\n{listing}")
    return matches[0]
