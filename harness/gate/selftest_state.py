"""What a gate self-test keeps between its workers and across runs.

- **Injection cycles.** The first injected worker on a GPU calibrates the delay; its
  cycles go to ``inject-cycles<tag>.json`` in the work folder and every later worker on
  that GPU sets them (``keep_cycles``).
- **The checkpoint** (``--resume FILE``). After every finished iteration the self-test
  rewrites FILE with its settings, each GPU's finished iterations (the gate's verdicts,
  A/A and injected), the injection calibrations and each GPU's cycles. Started again with
  the same FILE and settings, it loads them and runs only the iterations still missing,
  with the same cycles, so an n = 20 run can span several shorter sessions on one GPU.
  Settings that differ (another commit, regex, slowdown, threshold, method, rounds, GPUs
  or calibration file) are refused by name: their iterations would not add up.
"""

from __future__ import annotations

import dataclasses
import json
import os
import threading
from collections.abc import Callable, Mapping
from pathlib import Path

from harness.gate import decide as gd
from harness.gate import inject
from harness.revisions import records

VERSION = 1
# The settings a resumed run must share with the checkpoint, in the order they are checked.
SETTINGS = ("commit", "bench", "slowdown", "threshold", "method", "rounds", "gpus", "calibration")


def calibrations(run: records.Record) -> dict[str, records.Injection]:
    """``{benchmark: injection}`` of the calibrations one injected worker's run made
    (paired: the ``injected`` side's), leaving out benchmarks that were given their
    cycles and those that failed."""
    if isinstance(run, records.Fatal):
        return {}
    out = {}
    for name, entry in run.results.items():
        if isinstance(entry, records.Paired):
            found = entry.injection.get("injected")
        else:
            found = entry.injection
        if found is not None and found.steps:
            out[name] = found
    return out


def cycles_file(work: Path, tag: str) -> Path:
    """Where the workers of GPU ``tag`` (``""`` or ``-gpu<N>``) find their cycles."""
    return work / f"inject-cycles{tag}.json"


def keep_cycles(
    work: Path,
    slowdown: float,
    run: records.Record,
    tag: str,
    log: Callable[[str], None],
    calibrated: dict[str, records.Injection] | None = None,
) -> Path | None:
    """Write the cycles ``run``'s worker calibrated to a file for the later workers
    (``--inject-cycles``) and add its records to ``calibrated``; the file, or None where
    it calibrated nothing (the next worker calibrates again)."""
    found = calibrations(run)
    if not found:
        return None
    if calibrated is not None:
        calibrated.update(found)
    path = cycles_file(work, tag)
    cycles = {name: record.cycles for name, record in found.items()}
    path.write_text(json.dumps(inject.cycles_record(slowdown, cycles), indent=2) + "\n")
    log(
        f"gate_selftest{tag}: injection calibrated for {len(found)} benchmark(s); "
        f"the later workers set these cycles ({path.name})"
    )
    return path


def join_shards(parts: dict) -> list[tuple[list[gd.Verdict], list[gd.Verdict]]]:
    """Each iteration's verdicts joined across GPUs, for the iterations every GPU
    finished."""
    done = min((len(p) for p in parts.values()), default=0)
    return [
        (
            [v for p in parts.values() for v in p[i][0]],
            [v for p in parts.values() for v in p[i][1]],
        )
        for i in range(done)
    ]


def gpu_key(gpu: int | None) -> str:
    return "all" if gpu is None else str(gpu)


def tag_of(gpu: int | None) -> str:
    return "" if gpu is None else f"-gpu{gpu}"


class _Differs(Exception):
    """A checkpoint setting that is not this run's: (the setting, its saved value)."""


def _verdict(d: Mapping) -> gd.Verdict:
    return gd.Verdict(**{f.name: d[f.name] for f in dataclasses.fields(gd.Verdict)})


def _injection(d: Mapping) -> records.Injection:
    steps = tuple((int(c), float(s)) for c, s in d.get("steps", ()))
    return records.Injection(d["requested"], d["cycles"], d.get("seen"), steps)


class Checkpoint:
    """The resumable state of one self-test, read from and written to ``path``."""

    def __init__(self, path: Path, settings: Mapping, work: Path) -> None:
        missing = [k for k in SETTINGS if k not in settings]
        if missing:
            raise ValueError(f"checkpoint settings: missing {missing}")
        self.path = path
        self.settings = dict(settings)
        self.work = work
        self._lock = threading.Lock()

    def load(self) -> tuple[dict, dict[str, records.Injection]]:
        """``(finished, calibrated)`` from the file, or empty ones where there is none
        yet; each GPU's cycles go back to its file in the work folder. ValueError naming
        the file and the setting that differs, or what is wrong with the file."""
        if not self.path.exists():
            return {}, {}
        try:
            data = json.loads(self.path.read_text())
            version = data["version"]
            if version != VERSION:
                raise ValueError(f"version {version!r}, this reads {VERSION}")
            saved = data["settings"]
            for key in SETTINGS:
                if saved.get(key) != self.settings[key]:
                    raise _Differs(key, saved.get(key))
            finished = {
                (None if key == "all" else int(key)): [
                    ([_verdict(v) for v in aa], [_verdict(v) for v in injected])
                    for aa, injected in iterations
                ]
                for key, iterations in data["iterations"].items()
            }
            cycles = {
                (None if key == "all" else int(key)): record
                for key, record in data.get("cycles", {}).items()
            }
            calibrated = {name: _injection(d) for name, d in data.get("calibrated", {}).items()}
        except _Differs as differs:
            key, theirs = differs.args
            raise ValueError(
                f"--resume {self.path}: {key} was {theirs!r} there, is {self.settings[key]!r} "
                "now; resume with the same settings, or name a new checkpoint file"
            ) from None
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as err:
            raise ValueError(f"--resume {self.path}: not a self-test checkpoint ({err})") from None
        for gpu, record in cycles.items():
            cycles_file(self.work, tag_of(gpu)).write_text(json.dumps(record, indent=2) + "\n")
        return finished, calibrated

    def resumed_cycles(self, gpu: int | None) -> Path | None:
        """The cycles file a loaded checkpoint left for ``gpu``, if any."""
        path = cycles_file(self.work, tag_of(gpu))
        return path if path.exists() else None

    def save(self, finished: Mapping, calibrated: Mapping[str, records.Injection]) -> None:
        """Rewrite the file (atomically) with every finished iteration so far."""
        with self._lock:
            cycles = {}
            for gpu in finished:
                path = cycles_file(self.work, tag_of(gpu))
                if path.exists():
                    cycles[gpu_key(gpu)] = json.loads(path.read_text())
            data = {
                "version": VERSION,
                "settings": self.settings,
                "iterations": {
                    gpu_key(gpu): [
                        [[dataclasses.asdict(v) for v in aa], [dataclasses.asdict(v) for v in inj]]
                        for aa, inj in list(iterations)
                    ]
                    for gpu, iterations in list(finished.items())
                },
                "calibrated": {
                    name: dataclasses.asdict(record) for name, record in dict(calibrated).items()
                },
                "cycles": cycles,
            }
            self.path.parent.mkdir(parents=True, exist_ok=True)
            # One temporary file per process: two runs never write through the same one.
            tmp = self.path.with_name(f"{self.path.name}.{os.getpid()}.tmp")
            tmp.write_text(json.dumps(data, indent=1) + "\n")
            os.replace(tmp, self.path)
