"""The first-use tuning cache: per GPU, the GEMM config tuned on this machine for a shape
the committed table (``kernels/tuned_configs.json``) lacks. A versioned record, written
and read in this module only.

One file per GPU name and SM count, ``<dir>/<gpu>-<sms>sm.json`` (``nvidia-h200-<N>sm.json``),
where ``<dir>`` is ``$TILELANG_GEMM_PERF_CACHE``, else ``$XDG_CACHE_HOME/tilelang-gemm-perf``,
else ``~/.cache/tilelang-gemm-perf``::

    {"version": 1, "gpu": "NVIDIA H200", "sm_count": N,
     "entries": {"m3000_n5000_k7000_bf16": {"m": 3000, ..., "config": "b128x256x64_t256_s3",
                 "latency_ms": 0.61, "tried": [{"config": ..., "latency_ms": ...}, ...],
                 "budget_s": 60.0, "spent_s": 41.2, "date": "2026-12-01",
                 "tilelang": "0.1.15"}}}

An entry is keyed by the shape's id (M, N, K, dtype, layout) inside the file of its GPU
name and SM count. One recorded under another TileLang version is stale: it is tuned
again and replaced. A file that cannot be read as this record (not JSON, another
version, another GPU in its header, a malformed entry) is moved aside to
``<file>.damaged`` with a ``FirstUseCacheWarning``, never an error.

The cache is local and opt-in: only the user-facing commands read it
(``benchmarks.bench_gemm --tune-first-use``, ``benchmarks.offtable --first-use``).
``kernels.tuned.pick_config``, asv, the gate, precompile and the suite measure what the
committed table names, and never import this module.
"""

from __future__ import annotations

import fcntl
import json
import math
import os
import re
import warnings
from dataclasses import dataclass
from pathlib import Path

from kernels import GemmConfig, GemmShape

VERSION = 1
ENV = "TILELANG_GEMM_PERF_CACHE"
APP = "tilelang-gemm-perf"
DAMAGED_SUFFIX = ".damaged"
HEADER_KEYS = ("version", "gpu", "sm_count", "entries")
SHAPE_KEYS = ("m", "n", "k", "dtype", "layout")
ENTRY_KEYS = (
    *SHAPE_KEYS,
    "config",
    "latency_ms",
    "tried",
    "budget_s",
    "spent_s",
    "date",
    "tilelang",
)


class FirstUseCacheWarning(UserWarning):
    """A cache file could not be read and was moved aside (or left alone where it could
    not be moved); the shapes it held are tuned again."""


class CacheRecordError(ValueError):
    """A cache record breaks its schema: the message names the field and the rule."""


def cache_dir(environ: os._Environ | dict | None = None) -> Path:
    """Where the cache files live: ``$TILELANG_GEMM_PERF_CACHE``, else the user's cache
    folder (``$XDG_CACHE_HOME``, default ``~/.cache``) / ``tilelang-gemm-perf``."""
    env = os.environ if environ is None else environ
    if env.get(ENV):
        return Path(env[ENV]).expanduser()
    base = Path(env.get("XDG_CACHE_HOME") or Path.home() / ".cache").expanduser()
    return base / APP


def file_name(gpu: str, sms: int) -> str:
    """The cache file of a GPU: its name in lower case, runs of other characters as one
    ``-``, and its SM count (a part sold under one name with fewer SMs gets its own)."""
    slug = re.sub(r"[^a-z0-9]+", "-", gpu.lower()).strip("-") or "gpu"
    return f"{slug}-{sms}sm.json"


def _number(where: str, field: str, value: object, *, positive: bool = True) -> float:
    ok = isinstance(value, (int, float)) and not isinstance(value, bool)
    if not ok or not math.isfinite(value) or (value <= 0 if positive else value < 0):
        rule = "> 0" if positive else ">= 0"
        raise CacheRecordError(f"{where}.{field}={value!r}: must be a finite number {rule}")
    return float(value)


def _text(where: str, field: str, value: object) -> str:
    if not isinstance(value, str) or not value:
        raise CacheRecordError(f"{where}.{field}={value!r}: must be a non-empty string")
    return value


@dataclass(frozen=True, slots=True)
class Tried:
    """One candidate of a tuning: its config id and median latency, or why it has none."""

    config: str
    latency_ms: float | None = None
    error: str | None = None

    def to_dict(self) -> dict:
        return {"config": self.config, "latency_ms": self.latency_ms, "error": self.error}

    @classmethod
    def from_dict(cls, d: object, where: str) -> Tried:
        if not isinstance(d, dict) or sorted(d) != ["config", "error", "latency_ms"]:
            raise CacheRecordError(f"{where}: must be an object with config, latency_ms, error")
        ms = d["latency_ms"]
        error = d["error"]
        if (ms is None) == (error is None):
            raise CacheRecordError(f"{where}: exactly one of latency_ms and error is set")
        return cls(
            _text(where, "config", d["config"]),
            None if ms is None else _number(where, "latency_ms", ms),
            None if error is None else _text(where, "error", error),
        )


@dataclass(frozen=True, slots=True)
class Entry:
    """The winner of one shape's first-use tuning, and how it was found."""

    shape: GemmShape
    config: GemmConfig
    latency_ms: float
    tried: tuple[Tried, ...]
    budget_s: float
    spent_s: float
    date: str
    tilelang: str

    def to_dict(self) -> dict:
        s = self.shape
        return {
            **{"m": s.m, "n": s.n, "k": s.k, "dtype": s.dtype, "layout": s.layout},
            "config": self.config.id,
            "latency_ms": self.latency_ms,
            "tried": [t.to_dict() for t in self.tried],
            "budget_s": self.budget_s,
            "spent_s": self.spent_s,
            "date": self.date,
            "tilelang": self.tilelang,
        }

    @classmethod
    def from_dict(cls, d: object, where: str) -> Entry:
        if not isinstance(d, dict) or sorted(d) != sorted(ENTRY_KEYS):
            got = sorted(d) if isinstance(d, dict) else type(d).__name__
            raise CacheRecordError(f"{where}: must have exactly {list(ENTRY_KEYS)}, got {got}")
        try:
            shape = GemmShape(*(d[k] for k in SHAPE_KEYS))
        except (TypeError, ValueError) as err:
            raise CacheRecordError(f"{where}: {err}") from None
        try:
            config = GemmConfig.from_id(_text(where, "config", d["config"]))
        except ValueError as err:
            raise CacheRecordError(f"{where}.config: {err}") from None
        if not isinstance(d["tried"], list) or not d["tried"]:
            raise CacheRecordError(f"{where}.tried: must be a non-empty list")
        return cls(
            shape,
            config,
            _number(where, "latency_ms", d["latency_ms"]),
            tuple(Tried.from_dict(t, f"{where}.tried[{i}]") for i, t in enumerate(d["tried"])),
            _number(where, "budget_s", d["budget_s"]),
            _number(where, "spent_s", d["spent_s"], positive=False),
            _text(where, "date", d["date"]),
            _text(where, "tilelang", d["tilelang"]),
        )


def parse(data: object, gpu: str, sms: int, where: str) -> dict[str, Entry]:
    """Shape id -> entry of a cache file's content; ``CacheRecordError`` naming the field
    where it is not this version's record for (``gpu``, ``sms``)."""
    if not isinstance(data, dict) or sorted(data) != sorted(HEADER_KEYS):
        got = sorted(data) if isinstance(data, dict) else type(data).__name__
        raise CacheRecordError(f"{where}: must be an object with {list(HEADER_KEYS)}, got {got}")
    if data["version"] != VERSION:
        raise CacheRecordError(f"{where}: version={data['version']!r}: this reader needs {VERSION}")
    if (data["gpu"], data["sm_count"]) != (gpu, sms):
        raise CacheRecordError(
            f"{where}: gpu={data['gpu']!r}, sm_count={data['sm_count']!r}: the file is for "
            f"{gpu!r} with {sms} SMs"
        )
    if not isinstance(data["entries"], dict):
        raise CacheRecordError(f"{where}.entries: must map shape ids to entries")
    entries = {}
    for key, raw in data["entries"].items():
        entry = Entry.from_dict(raw, f"{where}.entries[{key!r}]")
        if entry.shape.id != key:
            raise CacheRecordError(f"{where}.entries[{key!r}]: holds {entry.shape.id}")
        entries[key] = entry
    return entries


@dataclass(frozen=True, slots=True)
class CacheFile:
    """The cache of one GPU (name and SM count) in ``directory``."""

    directory: Path
    gpu: str
    sm_count: int

    @classmethod
    def for_gpu(cls, gpu: str, sms: int, directory: Path | None = None) -> CacheFile:
        return cls(cache_dir() if directory is None else Path(directory), gpu, sms)

    @property
    def path(self) -> Path:
        return self.directory / file_name(self.gpu, self.sm_count)

    def read(self) -> dict[str, Entry]:
        """Every entry of the file; none where it does not exist. A file that is not this
        record is moved aside with a warning, and reads as empty."""
        path = self.path
        try:
            text = path.read_text()
        except FileNotFoundError:
            return {}
        except OSError as err:
            warnings.warn(
                f"first-use cache {path}: cannot read ({err.strerror}); ignored",
                FirstUseCacheWarning,
                stacklevel=2,
            )
            return {}
        try:
            return parse(json.loads(text), self.gpu, self.sm_count, str(path))
        except json.JSONDecodeError as err:
            self._set_aside(f"{path}: not valid JSON: {err}")
        except CacheRecordError as err:
            self._set_aside(str(err))
        return {}

    def _set_aside(self, reason: str) -> None:
        path = self.path
        aside = path.with_name(path.name + DAMAGED_SUFFIX)
        try:
            os.replace(path, aside)
        except OSError as err:
            where = f"could not be moved aside ({err.strerror}); ignored"
        else:
            where = f"moved aside to {aside}"
        warnings.warn(
            f"first-use cache {reason}; {where}, its shapes are tuned again",
            FirstUseCacheWarning,
            stacklevel=3,
        )

    def get(self, shape: GemmShape, tilelang: str) -> Entry | None:
        """The entry for ``shape`` tuned under TileLang ``tilelang``; None where there is
        none or it was tuned under another version."""
        entry = self.read().get(shape.id)
        return entry if entry is not None and entry.tilelang == tilelang else None

    def put(self, entry: Entry) -> None:
        """Record ``entry`` (replacing the shape's earlier one): read-modify-write under a
        lock, so that two commands on one host keep both their shapes."""
        path = self.path
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path.with_name(path.name + ".lock"), "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            entries = self.read()
            entries[entry.shape.id] = entry
            data = {
                "version": VERSION,
                "gpu": self.gpu,
                "sm_count": self.sm_count,
                "entries": {key: e.to_dict() for key, e in sorted(entries.items())},
            }
            tmp = path.with_name(path.name + ".tmp")
            tmp.write_text(json.dumps(data, indent=1) + "\n")
            os.replace(tmp, path)
