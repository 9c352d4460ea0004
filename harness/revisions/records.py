"""The records the gate's worker writes and its readers read: one versioned, frozen
dataclass per worker mode, and ``Fatal`` where a run failed as a whole. This module is the
only one that turns them into JSON (``to_json``) or back (``from_json``); a record of
another ``VERSION`` is refused with a ``RecordError`` naming both versions.

- ``ProcessRun``: one revision's suite in one process (``harness/gate/worker/process.py``),
  per benchmark a ``Measured``: its tracks' samples, or why none;
- ``PairedRun``: several revisions' kernels launched in turn in one process
  (``worker/paired.py``), per benchmark a ``Paired``: each side's ``Side``, the per-trial
  ratios to the first side, the launches a side per trial, the GPU's state, whether the
  sides shared their inputs and any test-only ``Injection``;
- ``Listing``: the benchmark names a ``--bench`` regex selects (``worker/listing.py``);
- ``Resources``: kernels' compiled resources (``worker/resources.py``);
- ``Fatal``: why a run gave nothing, with the paired side that failed when one did.

Stdlib only, and importable by file path: the worker loads it from the gate's checkout
while the revision under test, whose harness may be older, is first on ``sys.path``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields

VERSION = 1


class RecordError(ValueError):
    """A worker record this reader cannot read: another version, or no such kind."""


@dataclass(frozen=True)
class Gpu:
    """The GPU's state while a benchmark's launches ran: the clock the kernels ran at (the
    highest reading), the lowest, and a throttle reason where the readings say so."""

    sm_mhz: float | None = None
    sm_mhz_min: float | None = None
    throttle: str | None = None


@dataclass(frozen=True)
class Injection:
    """A test-only delay (``harness.gate.inject``): the fraction asked for, the cycles
    set, the slowdown the calibration saw (None where the cycles were given) and its
    steps, (cycles, seen) each; ``settled_from``, where the self-test moved the cycles
    after its first iterations (``inject.settle``): the cycles before and the slowdown
    those iterations saw with them."""

    requested: float
    cycles: int
    seen: float | None = None
    steps: tuple[tuple[int, float], ...] = ()
    settled_from: tuple[int, float] | None = None


@dataclass(frozen=True)
class Measured:
    """One benchmark of a process-mode run: the GPU tracks' samples, or ``error`` (it
    failed) or ``skipped`` (an invalid combination), each with why."""

    track_latency: tuple[float, ...] = ()
    track_vs_torch: tuple[float, ...] = ()
    error: str | None = None
    skipped: str | None = None
    gpu: Gpu | None = None
    injection: Injection | None = None


@dataclass(frozen=True)
class Side:
    """One side of a paired benchmark: its latencies (seconds), or why none."""

    latency: tuple[float, ...] = ()
    error: str | None = None
    skipped: str | None = None


@dataclass(frozen=True)
class Paired:
    """One benchmark of a paired run: every side's outcome, each measured side's per-trial
    ratios to the first side, launches a side per trial, the GPU's state, whether the
    sides read the same inputs, and the injections (side -> record)."""

    sides: Mapping[str, Side] = field(default_factory=dict)
    ratios: Mapping[str, tuple[float, ...]] = field(default_factory=dict)
    launches: int | None = None
    gpu: Gpu | None = None
    shared_inputs: bool | None = None
    injection: Mapping[str, Injection] = field(default_factory=dict)


@dataclass(frozen=True)
class ProcessRun:
    results: Mapping[str, Measured]
    tilelang: str | None = None  # the TileLang the worker imported
    seconds: float = 0.0


@dataclass(frozen=True)
class PairedRun:
    sides: tuple[str, ...]
    results: Mapping[str, Paired]
    timer: str | None = None  # cupti, or event with why CUPTI was not used
    tilelang: str | None = None
    seconds: float = 0.0


@dataclass(frozen=True)
class Listing:
    names: tuple[str, ...]
    seconds: float = 0.0


@dataclass(frozen=True)
class Resources:
    # name -> {registers, smem_bytes, spill_bytes, has_wgmma, has_tma} or {"error": why}
    resources: Mapping[str, Mapping]
    seconds: float = 0.0


@dataclass(frozen=True)
class Fatal:
    fatal: str
    side: str | None = None  # the paired side that failed, the others did not
    seconds: float = 0.0


Record = ProcessRun | PairedRun | Listing | Resources | Fatal
KINDS = {
    "process": ProcessRun,
    "paired": PairedRun,
    "list": Listing,
    "resources": Resources,
    "fatal": Fatal,
}


def kind_of(record: Record) -> str:
    for kind, cls in KINDS.items():
        if isinstance(record, cls):
            return kind
    raise RecordError(f"{type(record).__name__}: not a worker record")


def to_dict(record: Record) -> dict:
    """The JSON form of ``record``, with its kind and this module's ``VERSION``."""
    return {"version": VERSION, "kind": kind_of(record), **asdict(record)}


def to_json(record: Record) -> str:
    return json.dumps(to_dict(record))


def _gpu(data) -> Gpu | None:
    return None if data is None else Gpu(**data)


def injection_from(data) -> Injection | None:
    if data is None:
        return None
    steps = tuple((int(c), float(s)) for c, s in data.get("steps", ()))
    settled = data.get("settled_from")
    settled = None if settled is None else (int(settled[0]), float(settled[1]))
    return Injection(data["requested"], data["cycles"], data.get("seen"), steps, settled)


def _measured(data: dict) -> Measured:
    return Measured(
        track_latency=tuple(data.get("track_latency", ())),
        track_vs_torch=tuple(data.get("track_vs_torch", ())),
        error=data.get("error"),
        skipped=data.get("skipped"),
        gpu=_gpu(data.get("gpu")),
        injection=injection_from(data.get("injection")),
    )


def _paired(data: dict) -> Paired:
    return Paired(
        sides={
            side: Side(tuple(v.get("latency", ())), v.get("error"), v.get("skipped"))
            for side, v in data.get("sides", {}).items()
        },
        ratios={side: tuple(r) for side, r in data.get("ratios", {}).items()},
        launches=data.get("launches"),
        gpu=_gpu(data.get("gpu")),
        shared_inputs=data.get("shared_inputs"),
        injection={s: injection_from(v) for s, v in data.get("injection", {}).items()},
    )


def from_dict(data: Mapping) -> Record:
    """The record ``data`` (``to_dict``'s form) holds; a RecordError where its version is
    not this module's or its kind is unknown."""
    version = data.get("version")
    if version != VERSION:
        raise RecordError(
            f"worker record version {version!r}: this reader reads version {VERSION}; "
            "the worker and its reader come from different checkouts"
        )
    kind = data.get("kind")
    if kind not in KINDS:
        raise RecordError(f"worker record kind {kind!r}: not one of {sorted(KINDS)}")
    cls = KINDS[kind]
    body = {f.name: data[f.name] for f in fields(cls) if f.name in data}
    if cls is ProcessRun:
        body["results"] = {n: _measured(e) for n, e in body["results"].items()}
    elif cls is PairedRun:
        body["sides"] = tuple(body["sides"])
        body["results"] = {n: _paired(e) for n, e in body["results"].items()}
    elif cls is Listing:
        body["names"] = tuple(body["names"])
    return cls(**body)


def from_json(text: str) -> Record:
    return from_dict(json.loads(text))
