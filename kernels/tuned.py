"""Tuned GEMM configs per GPU, the search space they were picked from, and the fallback
heuristic for shapes nobody tuned.

The table (``tuned_configs.json`` beside this file) is data, written by the tuner
(``python3 -m benchmarks.tune_gemm``) and committed: GPU name -> the GPU's SM count
(``sm_count``, as the tuner read it) and its rows (``configs``: shape id -> the winning
config id with its measured latency, torch.matmul's latency on the same inputs and the
date). ``pick_config`` returns the tuned config when the table has the (GPU, shape, dtype,
layout) and ``heuristic`` otherwise. The search space and the heuristic depend on the
GPU's SM count, which the caller passes: this package reads no device. The table ships
in the wheel (package data), so one that is missing or unreadable raises
``TunedTableError`` naming the file; only a GPU with no rows falls back to the heuristic
wholesale, with one ``UntunedGpuWarning`` a process.
"""

import functools
import itertools
import json
import warnings
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path

from kernels.gemm import GemmConfig, GemmShape

TUNED_FILE = Path(__file__).with_name("tuned_configs.json")
# The keys of a GPU's entry in the table.
SMS_KEY = "sm_count"
CONFIGS_KEY = "configs"

# The cases the tuner covers by default: name -> (m, n, k, layout). Each runs in fp16 and
# bf16. LLM projections use Llama-3-70B's MLP (hidden 8192, intermediate 28672); decode is
# a skinny batch; attention is one head of sequence 4096 with head dim 128.
CASES = {
    "square4096": (4096, 4096, 4096, "NN"),
    "square8192": (8192, 8192, 8192, "NN"),
    "mlp_up": (8192, 28672, 8192, "NN"),
    "mlp_down": (8192, 8192, 28672, "NN"),
    "decode16": (16, 8192, 8192, "NN"),
    "decode64": (64, 8192, 8192, "NN"),
    "attn_qk_t": (4096, 4096, 128, "NT"),
    "attn_pv": (4096, 128, 4096, "NN"),
}


def case_shape(name: str, dtype: str) -> GemmShape:
    if name not in CASES:
        raise ValueError(f"case={name!r}: must be one of {sorted(CASES)}")
    m, n, k, layout = CASES[name]
    return GemmShape(m, n, k, dtype, layout)


@dataclass(frozen=True, slots=True)
class Tuned:
    """One row of the table."""

    config: GemmConfig
    tilelang_ms: float
    torch_ms: float
    date: str

    @property
    def speedup(self) -> float:
        """torch latency over the tuned kernel's: 1.00 is parity with cuBLAS."""
        return self.torch_ms / self.tilelang_ms


def check_sms(sms: object) -> int:
    """``sms`` if it is a usable SM count, else a ValueError naming the rule."""
    if isinstance(sms, bool) or not isinstance(sms, int) or sms <= 0:
        raise ValueError(f"sms={sms!r}: must be an int > 0, the GPU's SM count")
    return sms


def _valid(**fields) -> GemmConfig | None:
    try:
        return GemmConfig(**fields)
    except ValueError:
        return None  # over the shared-memory or register budget: not a candidate


def candidates(shape: GemmShape, sms: int, *, async_mma: bool = False) -> list[GemmConfig]:
    """The documented search space for ``shape`` on a GPU of ``sms`` SMs, invalid points
    dropped.

    - Skinny M (<= 64, decode) or N (<= 128, attention's P@V): 64-row tiles (wgmma's
      smallest M; 128 too for thin N), block_N 64/128/256, block_K 64/128/256, 3-8
      stages (memory-bound, so deep pipelines), epilogue direct or shared, and K split
      over 2/4/8 blocks (TMA reduce-add into C) while that stays within 4 waves.
    - Everything else: tiles 128x256 and 256x128 (two consumer warpgroups) and 128x128
      (one), block_K 64 with 3-5 stages (block_K 64/128 with 1-2 stages when K <= 256,
      where a tile sees one or two K steps), warp policy square/col/row on the
      two-warpgroup tiles, the epilogue direct or through shared memory, and the block
      order plain, swizzled (panels 4, 8, 16) or persistent (one block per SM); plus
      block_K 128 with 2 stages on the two-warpgroup tiles.
    - With ``async_mma``: also each supported config on the hand-written asynchronous
      pipeline (``_a``, kernels/gemm_async.py). 256x256 tiles are
      left out: four consumer warpgroups plus the producer leave ~100 registers a thread
      for 128 accumulators.
    """
    check_sms(sms)
    out: list[GemmConfig] = []
    if shape.m <= 64 or shape.n <= 128:
        # One side is thin: few output tiles, so the grid underfills the SMs unless the
        # tiles are narrow or K is split.
        thin_m = shape.m <= 64
        for bm, bn, bk, st, ep, split in itertools.product(
            (64,) if thin_m else (64, 128),
            (64, 128, 256) if thin_m else (64, 128),
            (64, 128, 256),
            (3, 4, 6, 8),
            (False, True),
            (1, 2, 4, 8),
        ):
            if split > 1 and (ep or -(-shape.m // bm) * -(-shape.n // bn) * split > 4 * sms):
                continue  # split-K stages C in shared memory anyway; no more than 4 waves
            out.append(
                _valid(
                    block_m=bm,
                    block_n=bn,
                    block_k=bk,
                    threads=128,
                    num_stages=st,
                    smem_epilogue=ep,
                    split_k=split,
                )
            )
    else:
        small_k = shape.k <= 256
        bks = (64, 128) if small_k else (64,)
        stages = (1, 2) if small_k else (3, 4, 5)
        tiles = [(128, 256, 256), (256, 128, 256), (128, 128, 128)]
        orders = [{}, {"swizzle": 4}, {"swizzle": 8}, {"swizzle": 16}, {"persistent": sms}]
        for (bm, bn, th), bk, st, ep, order in itertools.product(
            tiles, bks, stages, (False, True), orders
        ):
            if st == 5 and bm != bn:
                continue  # the wide tiles fit at most 4 stages of block_K 64
            policies = ("square", "col", "row") if th == 256 and not (ep or order) else ("square",)
            for policy in policies:
                out.append(
                    _valid(
                        block_m=bm,
                        block_n=bn,
                        block_k=bk,
                        threads=th,
                        num_stages=st,
                        smem_epilogue=ep,
                        policy=policy,
                        **order,
                    )
                )
        if not small_k:
            # block_K 128: half the K steps (and barriers) for two stages of 96 KiB.
            for bm, bn in ((128, 256), (256, 128)):
                for order in orders:
                    out.append(
                        _valid(
                            block_m=bm, block_n=bn, block_k=128, threads=256, num_stages=2, **order
                        )
                    )
    if async_mma:
        # The hand-written asynchronous pipeline (kernels/gemm_async.py) as a twin of every
        # config it supports.
        out += [
            _twin(c)
            for c in out
            if c is not None and c.policy == "square" and not c.persistent and c.split_k == 1
        ]
    return list(dict.fromkeys(c for c in out if c is not None))


def _twin(config: GemmConfig) -> GemmConfig | None:
    """``config`` on the asynchronous pipeline, or None where that is not valid."""
    try:
        return replace(config, async_mma=True)
    except ValueError:
        return None


def heuristic(shape: GemmShape, sms: int) -> GemmConfig:
    """A sound config for an untuned shape on a GPU of ``sms`` SMs, after what won the
    tuning: enough tiles to fill the SMs, the largest tile that does, a pipeline deep
    enough to hide the loads, and C written back through shared memory."""
    check_sms(sms)
    if shape.m <= 64 or shape.n <= 128:
        # Memory-bound: stream the wide operand through a deep pipeline in narrow tiles,
        # so that there are enough blocks.
        return GemmConfig(64, 64, 128, 128, 6, smem_epilogue=True)
    if shape.k <= 256:
        # One or two K steps: the write-back dominates; a persistent grid overlaps it.
        return GemmConfig(128, 256, 64, 256, 2, smem_epilogue=True, persistent=sms)
    tiles_256 = -(-shape.m // 128) * -(-shape.n // 256)
    if tiles_256 >= 2 * sms:
        return GemmConfig(128, 256, 64, 256, 3, smem_epilogue=True, swizzle=16)
    return GemmConfig(128, 128, 64, 128, 4, smem_epilogue=True)


# What a row must hold for ``lookup``; the tuner writes more (spread, runner-up, clocks).
ROW_KEYS = ("config", "tilelang_ms", "torch_ms", "date")


@dataclass(frozen=True, slots=True)
class TunedGpu:
    """One GPU's part of the table: its SM count as the tuner read it, and its rows."""

    sm_count: int
    rows: Mapping[str, Tuned]


class TunedTableError(ValueError):
    """The table exists but cannot be read: the message names the file and the row."""


class UntunedGpuWarning(UserWarning):
    """The table has no rows for this GPU, so every shape gets the heuristic config."""


# GPUs already warned about, per table: the warning comes once per process.
_WARNED: set[tuple[Path, str]] = set()


def _row(path: Path, gpu: str, shape_id: str, row: object) -> Tuned:
    where = f"{path}: {gpu!r} / {shape_id!r}"
    if not isinstance(row, dict):
        raise TunedTableError(f"{where}: must be an object, got {type(row).__name__}")
    missing = [key for key in ROW_KEYS if key not in row]
    if missing:
        raise TunedTableError(f"{where}: missing {missing} (a row needs {list(ROW_KEYS)})")
    try:
        config = GemmConfig.from_id(row["config"])
    except (TypeError, ValueError) as err:
        raise TunedTableError(f"{where}: config {row['config']!r}: {err}") from None
    for key in ("tilelang_ms", "torch_ms"):
        value = row[key]
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
            raise TunedTableError(f"{where}: {key}={value!r}: must be a number > 0")
    return Tuned(config, float(row["tilelang_ms"]), float(row["torch_ms"]), str(row["date"]))


def gpu_entry(path: Path, gpu: str, entry: object) -> tuple[int, Mapping[str, object]]:
    """The SM count and the raw rows (shape id -> row) of one GPU's entry, its form
    checked: ``{"sm_count": N, "configs": {...}}``."""
    where = f"{path}: {gpu!r}"
    keys = (SMS_KEY, CONFIGS_KEY)
    if not isinstance(entry, dict) or sorted(entry) != sorted(keys):
        got = sorted(entry) if isinstance(entry, dict) else type(entry).__name__
        raise TunedTableError(f"{where}: must be an object with exactly {list(keys)}, got {got}")
    try:
        sms = check_sms(entry[SMS_KEY])
    except ValueError as err:
        raise TunedTableError(f"{where}: {err}") from None
    if not isinstance(entry[CONFIGS_KEY], dict):
        raise TunedTableError(f"{where}: {CONFIGS_KEY} must map shape ids to rows")
    return sms, entry[CONFIGS_KEY]


@functools.cache
def load(path: Path = TUNED_FILE) -> dict[str, TunedGpu]:
    """GPU name -> its SM count and rows (shape id -> row), every row checked. The table
    ships with the package, so a missing or unreadable file is an error
    (``TunedTableError``), never an empty table: that would benchmark the heuristic under
    the tuned name."""
    try:
        text = path.read_text()
    except OSError as err:
        raise TunedTableError(
            f"{path}: cannot read the tuned-config table ({err.strerror}); it ships with the "
            "kernels package (pyproject.toml package-data)"
        ) from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as err:
        raise TunedTableError(f"{path}: not valid JSON: {err}") from None
    if not isinstance(data, dict):
        raise TunedTableError(f"{path}: must map GPU names to rows, got {type(data).__name__}")
    table = {}
    for gpu, entry in data.items():
        sms, rows = gpu_entry(path, gpu, entry)
        table[gpu] = TunedGpu(sms, {sid: _row(path, gpu, sid, row) for sid, row in rows.items()})
    return table


def lookup(shape: GemmShape, gpu: str, path: Path = TUNED_FILE) -> Tuned | None:
    """The tuned row for ``shape`` on the GPU named ``gpu`` (torch's device name)."""
    entry = load(path).get(gpu)
    return None if entry is None else entry.rows.get(shape.id)


def recorded_sms(gpu: str, path: Path = TUNED_FILE) -> int | None:
    """The SM count the table records for ``gpu``, for work on a host without that GPU
    (rendering its results); None where the table has no entry for it."""
    entry = load(path).get(gpu)
    return None if entry is None else entry.sm_count


def pick_config(shape: GemmShape, gpu: str | None, sms: int, path: Path = TUNED_FILE) -> GemmConfig:
    """The tuned config for (GPU, shape, dtype, layout) when one exists, else the heuristic
    for ``sms`` SMs (the GPU's count, read from the device by the caller). A GPU the table
    has no rows for gets the heuristic for every shape, with one ``UntunedGpuWarning`` per
    process; without a GPU (``gpu`` None) nothing is timed."""
    check_sms(sms)
    if gpu is None:
        return heuristic(shape, sms)
    tuned = lookup(shape, gpu, path)
    if tuned is not None:
        return tuned.config
    entry = load(path).get(gpu)
    if (entry is None or not entry.rows) and (path, gpu) not in _WARNED:
        _WARNED.add((path, gpu))
        warnings.warn(
            f"{path} has no tuned configs for {gpu!r}: using the heuristic for every shape "
            "(tune with python3 -m benchmarks.tune_gemm)",
            UntunedGpuWarning,
            stacklevel=2,
        )
    return heuristic(shape, sms)
