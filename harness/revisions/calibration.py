"""The calibration file, ``calibration/<machine>.json``: what ``nox -s calibrate`` found
per benchmark on one machine, as one versioned record. The only reader and writer of the
file: calibration writes it, the gate, the self-test and the history detector read it.

A file without a ``version`` is of version 1 (those written before it was recorded);
another version is refused with a ``CalibrationError`` naming both.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path

from harness.revisions import git

VERSION = 1


class CalibrationError(ValueError):
    """A calibration file this reader cannot read."""


@dataclass(frozen=True)
class Benchmark:
    """One benchmark's calibration: the median of its run values, their robust relative
    spread, the A/A offset from 1 (paired), the minimum detectable effect, the threshold
    the gate applies, whether it is too noisy to gate, the runs that measured it,
    (paired) the launches a side per trial the worker chose and the launch scale the
    gate's workers apply to their own sizing (``Policy.launch_scale``)."""

    median: float | None = None
    spread: float | None = None
    offset: float = 0.0
    mde: float | None = None
    threshold: float = 0.0  # every file's benchmark has one (``read`` checks)
    too_noisy: bool = False
    runs: int | None = None
    launches: tuple[int, ...] | None = None
    launch_scale: int = 1


@dataclass(frozen=True)
class Calibration:
    gpu: str | None = None
    commit: str | None = None
    date: str | None = None
    runs: int | None = None
    method: str = "process"  # a file without a method is from process-mode calibration
    timer: str | None = None
    floor: float | None = None
    cap: float | None = None
    spread: str | None = None  # how the spread is computed, in words
    z_alpha: float | None = None
    z_power: float | None = None
    benchmarks: dict[str, Benchmark] = field(default_factory=dict)
    failures: tuple[str, ...] = ()


def calibration_path(machine: str | None = None) -> Path:
    """Where ``nox -s calibrate`` writes, and the gate reads, per-benchmark thresholds."""
    if machine is None:
        from harness.measure import device

        machine = device.machine_name()
    return git.ROOT / "calibration" / f"{machine}.json"


def from_dict(data: dict, where: str = "calibration") -> Calibration:
    version = data.get("version", 1)
    if version != VERSION:
        raise CalibrationError(
            f"{where}: calibration version {version!r}; this reader reads version {VERSION}"
        )
    known = {f.name for f in fields(Benchmark)}
    benchmarks = {}
    for name, entry in data.get("benchmarks", {}).items():
        if not isinstance(entry, dict) or "threshold" not in entry:
            raise CalibrationError(f"{where}: benchmarks[{name!r}]: no 'threshold'")
        value = entry["threshold"]
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < 10:
            raise CalibrationError(
                f"{where}: {name}: 'threshold' must be a fraction, got {value!r}"
            )
        body = {k: v for k, v in entry.items() if k in known}
        scale = body.get("launch_scale", 1)
        if isinstance(scale, bool) or not isinstance(scale, int) or scale < 1:
            raise CalibrationError(
                f"{where}: {name}: 'launch_scale' must be an integer >= 1, got {scale!r}"
            )
        if body.get("launches") is not None:
            body["launches"] = tuple(body["launches"])
        benchmarks[name] = Benchmark(**body)
    top = {f.name for f in fields(Calibration)} - {"benchmarks", "failures"}
    body = {k: v for k, v in data.items() if k in top}
    return Calibration(benchmarks=benchmarks, failures=tuple(data.get("failures", ())), **body)


def read(path: Path) -> Calibration:
    """The calibration in ``path`` (CalibrationError naming the file where it is none)."""
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        raise CalibrationError(f"{path}: no such calibration file") from None
    except (OSError, ValueError) as err:
        raise CalibrationError(f"{path}: not a calibration file ({err})") from None
    if not isinstance(data, dict) or not isinstance(data.get("benchmarks"), dict):
        raise CalibrationError(f"{path}: not a calibration file (no 'benchmarks' table)")
    return from_dict(data, str(path))


def to_dict(record: Calibration) -> dict:
    data = {"version": VERSION, **asdict(record)}
    for entry in data["benchmarks"].values():
        if entry["launches"] is None:
            del entry["launches"]
        if entry["launch_scale"] == 1:
            del entry["launch_scale"]
    return data


def write(path: Path, record: Calibration) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(to_dict(record), indent=1))
