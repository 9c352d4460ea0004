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

from kernels.gemm import (
    ELEMENT_BYTES,
    SHORT_DTYPES,
    TMA_ALIGN,
    WARPGROUP,
    GemmConfig,
    GemmShape,
    check_combination,
    padded,
)
from kernels.schedules import Units, grid_blocks

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
    """The shape of case ``name`` in ``dtype`` (``float16``, or its short name ``f16`` as
    the benchmarks' parameters give it)."""
    if name not in CASES:
        raise ValueError(f"case={name!r}: must be one of {sorted(CASES)}")
    m, n, k, layout = CASES[name]
    return GemmShape(m, n, k, SHORT_DTYPES.get(dtype, dtype), layout)


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
    and those that do not build for ``shape`` (``builds``) dropped.

    - Skinny M (<= 64, decode) or N (<= 128, attention's P@V): 64-row tiles (wgmma's
      smallest M; 128 too for thin N), block_N 64/128/256, block_K 64/128/256, 3-8
      stages (memory-bound, so deep pipelines), epilogue direct or shared, and K split
      over 2/4/8 blocks (TMA reduce-add into C) while that stays within 4 waves.
    - Everything else: tiles 128x256 and 256x128 (two consumer warpgroups) and 128x128
      (one), plus 128x192 (two) where it covers the SMs better than 128x256
      (``NARROW_WIDE``), block_K 64 with 3-5 stages (block_K 64/128 with 1-2 stages when K <= 256,
      where a tile sees one or two K steps), warp policy square/col/row on the
      two-warpgroup tiles (with the plain order and direct epilogue; on 128x192 with
      every order and epilogue), the epilogue direct or through shared memory, and the block
      order plain, swizzled (panels 4, 8, 16) or persistent (one block per SM); plus
      block_K 128 with 2 stages on the two-warpgroup tiles; plus, where a two-warpgroup
      tile's output tiles leave more than ``STREAM_K_IDLE`` of the SMs' block slots idle
      over their waves (K > 256), its stream-K twins (one block per SM; block_K 64, 3 or 4
      stages, epilogue direct or shared, tile order plain or in panels of 8 or 16); plus,
      where a tile's output tiles are less than a wave, K split 2-16 ways on 128x128 and
      128x256 (``split_k_candidates``); plus each ``FITTED`` tile of the shape's layout
      whose output tiles cover the SMs better than 128x256's, in 3-5 stages and panels of
      0, 8 or 16 tile rows (``fitted_candidates``).
    - With ``async_mma``: also each supported config on the hand-written asynchronous
      pipeline (``_a``, kernels/gemm_async.py), and those of the two-warpgroup tiles
      again in two-block clusters sharing the wider operand (``PAIRED``), and those with
      the shared-memory epilogue again in their persistent form (one block per SM, where
      the C tile, or half of it (``GemmConfig.c_parts``), fits beside the stages), and
      the stream-K configs with the shared-memory epilogue on that pipeline too (its
      persistent form, the last wave shared out), and 128x192's persistent form where
      the heuristic takes it (``narrow_persistent``), and the forms that won the sweeps
      over mid shapes (``forms``). 256x256 tiles are left out: four
      consumer warpgroups plus the producer leave ~100 registers a thread for 128
      accumulators.
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
        if covers_better(shape, sms, NARROW_WIDE, (128, 256)):
            tiles.append((*NARROW_WIDE, 256))
        orders = [{}, {"swizzle": 4}, {"swizzle": 8}, {"swizzle": 16}, {"persistent": sms}]
        for (bm, bn, th), bk, st, ep, order in itertools.product(
            tiles, bks, stages, (False, True), orders
        ):
            every_policy = (bm, bn) == NARROW_WIDE or (th == 256 and not (ep or order))
            policies = ("square", "col", "row") if every_policy else ("square",)
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
            out += stream_k_candidates(shape, sms)
            out += split_k_candidates(shape, sms)
            out += fitted_candidates(shape, sms)
    out += swap_candidates(shape, sms)
    if async_mma:
        # The hand-written asynchronous pipeline (kernels/gemm_async.py) as a twin of every
        # config it supports, and the two-warpgroup tiles' also in pairs (``PAIRED``).
        twins = [
            _twin(c)
            for c in out
            if c is not None
            and not c.persistent
            and c.split_k == 1
            and not c.stream_k
            and not c.swap_ab
        ]
        twins = [c for c in twins if c is not None]
        out += twins
        out += [
            replace(c, multicast=PAIRED[c.block_m, c.block_n])
            for c in twins
            if (c.block_m, c.block_n) in PAIRED
        ]
        out += [_persistent(c, sms) for c in twins if c.smem_epilogue]
        # Stream-K on that pipeline: its persistent form with the last wave shared out,
        # through shared memory (the segments' sums are reduce-added by TMA).
        out += [_twin(c) for c in out if c is not None and c.stream_k and c.smem_epilogue]
        out += [c for c in (narrow_persistent(shape, sms),) if c is not None]
        out += forms(shape, sms)
    return list(dict.fromkeys(c for c in out if c is not None and builds(shape, c)))


# The narrower two-warpgroup tile: 192 columns (two warpgroups of 128x96, or of 64x192
# under the row policy), three quarters of 128x256's work per tile, up to 5 stages. It
# joins the space where its tiles cover the SMs better than 128x256's (``covers_better``):
# mid shapes under a wave (1536^2: 96 tiles against 72 on an H200's SMs; 1000x3000: 128
# against 96) and shapes whose last wave of 128x256 tiles runs part-empty (3000x5000:
# 4.9 waves against 3.6; square8192: 20.8 against 15.5). Its warp policy matters as no
# other tile's does, so every policy is searched with every order and epilogue: on the
# H200 (bf16, 4 stages, shared-memory epilogue) the row policy's 64x192 slices ran
# 0.878x torch on 1000x3000x2400 against 0.653x for the square policy's 128x96, and
# 0.974x against 0.774x on 3072x5120x7040.
NARROW_WIDE = (128, 192)

# Two-block clusters in the search space (``GemmConfig.multicast``): each two-warpgroup
# tile shares its wider operand's tile, which a pair then reads from the L2 once: B's for
# the 256- and 192-column tiles, A's for 256x128.
PAIRED = {(128, 256): "b", NARROW_WIDE: "b", (256, 128): "a"}


# The heuristic takes the narrower wide tile only where A's rows start on this many
# bytes. Its grid has a third more tile columns than 128x256's, each reading all of A, and
# on the one H200 shape measured whose A rows do not (3000x5000x7000, rows of 14,000
# bytes) it lost: 0.660x torch against 128x256's 0.715x in the tile sweep
# (reports/tiles_h200.jsonl). Off the table, where A's rows are aligned, it won: 1536^2 NT
# 0.824x against 0.661x, 1000x3000x2400 NT 1.016x against 0.813x, 384x384x24576 NT split
# 16 1.103x against 0.888x (reports/offtable_h200.json, against the record before it).
# The search space keeps it either way. Under a wave of its output tiles
# (``under_a_wave``) the SMs it covers count for more than A's sectors: there it is
# scored whatever A's rows, and its pair sharing B (``NARROW_PAIR_TILE``) in NT too,
# where B's rows are A's length. On 12 such shapes drawn after that rule
# (reports/offtable_underwave_shapes.json; H200, bench_gemm CUPTI,
# reports/underwave_h200.jsonl) its pick ran faster than the pick before it on all 12,
# 1.06-1.28x in kernel time, median 1.19x: in NT the pair against 128x256's pair
# (1456x1544x1704 bf16 18.4 us against 21.9, 1080x1800x1560 fp16 17.1 against 20.9), in
# NN the plain tile against 128x256 (1240x2112x1288 bf16 13.7 against 17.3;
# 1056x1280x3384 split in two 20.2 against 23.0); before it, 1776x1472x4088 bf16 ran
# 33.3 us in 128x192 against 43.4 in 128x256 (reports/cp_async_h200.jsonl).
# The L2's sector, in bytes: the unit it serves a load in.
SECTOR_BYTES = 32
NARROW_A_ALIGN = SECTOR_BYTES


def narrow_fits(shape: GemmShape) -> bool:
    """Whether the heuristic may pick the narrower wide tile for ``shape``: A's rows are
    a whole number of ``NARROW_A_ALIGN`` bytes."""
    return (shape.k * ELEMENT_BYTES) % NARROW_A_ALIGN == 0


# The L2 serves 32-byte sectors: a TMA row of 128 bytes that starts 16 bytes into one
# reads five. Where B's rows start off that boundary, 128x256 tiles are bound by their
# loads of B (two thirds of the bytes a tile loads), and the heuristic scores them as
# their twin in two-block clusters (``PAIRED_TILE``), which reads B's tile from the L2
# once per pair, at ``PAIR_GAIN`` times the plain tile's pace. On the H200 (bench_gemm,
# CUPTI, against torch.matmul; reports/pairs_h200.jsonl) the twin ran, where B's rows
# are off: 3000x5000x7000 bf16 0.917x against the plain tile's 0.708x, 4000x3000x5000
# fp16 0.971x against 0.772x, 5000^3 NT bf16 0.856x against 0.744x, 3072x5000x7040 fp16
# 0.908x against 0.819x, 2500x1800x4000 fp16 0.604x against 0.564x (a grid of 1.2 waves,
# where stream-K's 256x128 tiles ran 0.762x and stay the pick). Where only A's are off
# it did not gain (2000x6000x3000 fp16 0.944x against 0.959x, 6000x4000x3496 0.952x
# against 0.966x), nor where both are aligned (6144^3 fp16 0.973x against 0.981x,
# 4096x11008x4096 bf16 0.983x against 0.998x).
# What rows off a sector cost is a ceiling on the tiles' loads, not their latency: on
# 2096x2728 NT fp16 (reports/sector_stages_h200.jsonl) the fastest of seven configs loaded
# their tiles at 6.3-6.4 TB/s at K=1304 (rows 16 bytes off) against 8.2-9.1 TB/s at
# K=1312, deeper pipelines (5 and 6 stages) gained nothing, and the smaller the tile the
# more it lost (128x128 in 6 stages 40.3 us against 28.4; 128x192 in 4, 34.7 against
# 26.6). Nor does the L2's fetch size move it: every descriptor at 256, 64 or no L2
# promotion instead of TileLang's 128 bytes ran as fast or slower (an ad-hoc run that
# rewrote the descriptors, ten configs on eight shapes; 256 bytes up to 1.15x slower).
PAIRED_TILE = GemmConfig(
    128, 256, 64, 256, 4, swizzle=16, smem_epilogue=True, async_mma=True, multicast="b"
)
# The median of those five gains (1.30, 1.26, 1.15, 1.11, 1.07).
PAIR_GAIN = 1.15
# The narrower wide tile's pair: 128x192 under the row policy (64x192 per warpgroup) on the
# hand-written pipeline, two blocks sharing B. Where 128x256's pairs leave much of their
# last wave idle it covers the SMs better: 2000x3000x3000 fp16 (both operands' rows off a
# sector, 256 tiles against 192 of 128x256, on the H200) 0.0591 ms, 0.92x torch, against
# 0.0702 for the heuristic's stream-K before it and 0.0729 for the plain 128x192 tile
# (bench_gemm, CUPTI; reports/streamk_async_h200.jsonl). Its pace per SM slot covered
# against 128x256's pair, where both fill their waves alike: 0.91 (3000x5000x7000 bf16,
# 0.3239 ms in 4.9 waves against 0.3146 in 3.6) and 0.96 (9000x7000x4000 bf16, 0.7563
# in 19.9 against 0.7770 in 15.1): ``NARROW_PAIR_EFFICIENCY`` is their mean, so it wins
# only where it covers the SMs over 7% better than 128x256's pair. Measured on NN only.
NARROW_PAIR_TILE = GemmConfig(
    128,
    192,
    64,
    256,
    4,
    swizzle=8,
    policy="row",
    smem_epilogue=True,
    async_mma=True,
    multicast="b",
)
NARROW_PAIR_EFFICIENCY = 0.93


def row_bytes(shape: GemmShape) -> dict[str, int]:
    """Bytes per row of A and of B, as the kernel loads them."""
    b_row = shape.k if shape.layout == "NT" else shape.n
    return {"A": shape.k * ELEMENT_BYTES, "B": b_row * ELEMENT_BYTES}


def rows_aligned(shape: GemmShape) -> bool:
    """Whether TMA can take both A's and B's rows: 16-byte multiples (``row_bytes``)."""
    return all(r % TMA_ALIGN == 0 for r in row_bytes(shape).values())


def pair_fits(shape: GemmShape) -> bool:
    """Whether the heuristic scores 128x256 as its two-block twin (``PAIRED_TILE``) on
    ``shape``: B's rows start off a sector boundary, and the twin can load both operands
    (TMA: 16-byte aligned rows)."""
    return rows_aligned(shape) and row_bytes(shape)["B"] % SECTOR_BYTES != 0


def covers_better(shape: GemmShape, sms: int, tile: tuple, than: tuple) -> bool:
    """Whether ``tile``'s output tiles keep more of the SMs' block slots busy with useful
    work than ``than``'s do: the share of slots they fill over their waves, over the
    padding they compute (``fill`` / ``waste``)."""

    def covered(bm: int, bn: int) -> float:
        return fill(output_tiles(shape, bm, bn), sms) / waste(shape, bm, bn)

    return covered(*tile) > covered(*than)


# Stream-K (kernels/schedules.py) can win back at most the block slots that the last,
# partial wave of output tiles leaves idle; searched where that is over this share
# (square4096 in 128x256 tiles: 512 tiles; over 4 waves of an H200's SMs, 3.0% idle).
STREAM_K_IDLE = 0.01


def stream_k_candidates(shape: GemmShape, sms: int) -> list[GemmConfig]:
    """Stream-K twins of the two-warpgroup tiles (128x256, 256x128, and 128x192 where the
    space has it) whose output tiles leave more than ``STREAM_K_IDLE`` of the SMs' slots
    idle: block_K 64, 3 or 4 stages, the epilogue direct or through shared memory (3
    stages only on the wider tiles: 4 leave no room for the C tile), tiles taken in
    row-major order or in panels of 8 or 16 tile rows."""
    out = []
    tiles = [(128, 256), (256, 128)]
    if covers_better(shape, sms, NARROW_WIDE, (128, 256)):
        tiles.append(NARROW_WIDE)
    for bm, bn in tiles:
        if 1 - fill(output_tiles(shape, bm, bn), sms) <= STREAM_K_IDLE:
            continue
        for st, ep, panel in itertools.product((3, 4), (False, True), (0, 8, 16)):
            fields = dict(swizzle=panel, smem_epilogue=ep, stream_k=sms)
            out.append(
                _valid(block_m=bm, block_n=bn, block_k=64, threads=256, num_stages=st, **fields)
            )
    return [c for c in out if c is not None]


# Split-K in the wide-tile space: splits searched where a tile's output tiles are less
# than a wave, keeping at most two waves of blocks and this much K per split.
WIDE_SPLITS = (2, 4, 8, 16)
WIDE_MIN_SPLIT_K = 512


def split_k_candidates(shape: GemmShape, sms: int) -> list[GemmConfig]:
    """K split over 2-16 blocks for the 128x128 (one warpgroup, 4 stages) and 128x256 (two,
    3 stages) tiles where their output tiles fill less than one wave of ``sms`` SMs: mid
    shapes (1.5k^2: 72 tiles of 128x256) and long K over small M and N, which the thin
    space does not reach (M > 64 and N > 128). Splits that keep the blocks within two
    waves and ``WIDE_MIN_SPLIT_K`` of K each (added into C by TMA, or from registers
    where C's rows are not 16-byte aligned)."""
    out = []
    for bm, bn, th, st in ((128, 128, 128, 4), (128, 256, 256, 3)):
        tiles = output_tiles(shape, bm, bn)
        if tiles >= sms:
            continue
        for split in WIDE_SPLITS:
            if tiles * split <= 2 * sms and -(-shape.k // split) >= WIDE_MIN_SPLIT_K:
                out.append(
                    _valid(
                        block_m=bm,
                        block_n=bn,
                        block_k=64,
                        threads=th,
                        num_stages=st,
                        split_k=split,
                    )
                )
    return [c for c in out if c is not None]


def _replaced(config: GemmConfig, **fields) -> GemmConfig | None:
    """``config`` with ``fields`` changed, or None where that is not a valid config."""
    try:
        return replace(config, **fields)
    except ValueError:
        return None


def _persistent(config: GemmConfig, sms: int) -> GemmConfig | None:
    """The asynchronous ``config`` in its persistent form (one block per SM, its tiles in
    the config's panels), or None where the C tile and the stages do not both fit."""
    return _replaced(config, persistent=sms)


def _twin(config: GemmConfig) -> GemmConfig | None:
    """``config`` on the asynchronous pipeline, or None where that is not valid."""
    return _replaced(config, async_mma=True)


# --- the heuristic for shapes nobody tuned --------------------------------------------
#
# The numbers below are read off the tuning log (reports/tune_h200.jsonl, the H200,
# quick timings of every candidate); ``tests/test_tuned.py`` recomputes the efficiencies.


@dataclass(frozen=True, slots=True)
class Tile:
    """A tile the heuristic chooses among: its schedule (no split), its throughput per
    output element relative to the best tile's, on large shapes (``efficiency``), and the
    layouts it is scored on."""

    config: GemmConfig
    efficiency: float
    layouts: tuple[str, ...] = ("NN", "NT")


# The tiles of the tuned winners, best first. Efficiency: the median, over the four large
# cases (square4096, square8192, mlp_up, mlp_down; fp16, and bf16 where logged), of the
# fastest config's time over this config's.
TILES = (
    # Every large case's winner (or within 1.1% of it).
    Tile(GemmConfig(128, 256, 64, 256, 3, swizzle=16, smem_epilogue=True), 1.0),
    # 0.85-1.00 of the winner, 0.973 the median of eight.
    Tile(GemmConfig(256, 128, 64, 256, 3, swizzle=8, smem_epilogue=True), 0.97),
    # The narrower wide tile (``NARROW_WIDE``), row policy: not a large case's tile, so
    # its efficiency is per SM slot it covers, against 128x256's best, on the aligned
    # shapes of the H200 tile sweep (reports/tiles_h200.jsonl): 0.927-0.970, 0.949 the
    # median of four.
    Tile(GemmConfig(128, 192, 64, 256, 4, swizzle=8, policy="row", smem_epilogue=True), 0.95),
    # One warpgroup: 0.73-0.80 of the winner (fp16), 0.794 the median. Where it wins the
    # scores (mid shapes under a wave, about 4% of random ones) tiles on two warpgroups were
    # timed against it on ten shapes drawn for that (reports/offtable_one_group_shapes.json,
    # H200, reports/one_group_h200.jsonl): 128x128's pair sharing B in 5 stages ran faster
    # on six, a median 1.037x but 0.61-1.23x; 128x192, 128x160's pair, 128x144 and 128x96
    # exchanged ran slower at the median (0.66-0.95x). It stays, but in NT under a wave
    # ``nt_quads`` gives it to four-block clusters.
    Tile(GemmConfig(128, 128, 64, 128, 4, swizzle=8, smem_epilogue=True), 0.79),
    # The thin cases' winner (decode64, attn_pv; within 4% on decode16). Not timed on a
    # large shape: a 64x64 tile feeds half the products per loaded byte that 128x128 does,
    # so it counts half of 128x128's efficiency, and wins only where the larger tiles
    # leave most SMs idle even split.
    Tile(GemmConfig(64, 64, 128, 128, 6, smem_epilogue=True), 0.4),
)
# The thin tile: rows of 64 (wgmma's least) against a skinny M, or against a thin N.
THIN = TILES[-1]
# Its wide twin for a skinny M: decode16's winner (64x256, 0.0464 ms, 64x64 within 4%).
# A thin GEMM streams the wide operand once whatever the tile, so what differs is how
# many waves of blocks stream it: where 64x64 tiles spill past one wave and 64x256 (split
# as ``split_for`` splits it) fit one, the wide tile wins (the H200's first-use
# tuning of 8x14336x4096 NT: 64x256 split 2, one wave of 112 blocks, 0.954x torch; the
# 64x64 tiles' 224 blocks in two waves, 0.726x).
WIDE_THIN = GemmConfig(64, 256, 64, 128, 4)
# Split K only when the output tiles fill fewer than this share of the SMs: decode16's
# 32 tiles of 64x256 (a quarter of the SMs) gained 24% split in two (0.0614 -> 0.0469 ms),
# while decode64's 128 tiles of 64x64 lost 7% split in two (0.0449 -> 0.0482 ms).
SPLIT_BELOW = 0.5
# Splits the tuning measured; each split reduce-adds its partial tile into C in the input
# dtype, so fewer splits also round less. 16: on the H200's off-table long-K shapes,
# first-use tuning picked 16 ways on 512x512x32768 (1.001x torch against 0.924x split 8)
# and 128x1024x65536 NT (1.025x in 128x128 tiles against 0.814x split 4 in 64x64).
SPLITS = (2, 4, 8, 16)
# K each split keeps at least: decode16 split eight ways (1024 each) stayed within 2% of
# its best split.
MIN_SPLIT_K = 1024
# K at or below which a tile sees one or two K steps and a persistent grid won (attn_qk_t:
# every top-5 config is persistent, 0.0194 ms against 0.0234 ms for the best that is not).
SMALL_K = 256
# The grid for it: TileLang's persistent pipeline, and the hand-written pipeline's
# persistent form (``SMALL_K_ASYNC``), whose tile stores run on under the next tile's K
# steps, where its loads are TMA's (attn_qk_t fp16 on the H200, CUPTI: 13.1 us against
# 15.3 us, 1.11x torch.matmul against 0.95x; reports/remeasure_deferred_h200.jsonl and the
# table's runner-up).
SMALL_K_TILE = GemmConfig(128, 256, 64, 256, 2, smem_epilogue=True)
SMALL_K_ASYNC = GemmConfig(128, 256, 64, 256, 3, smem_epilogue=True, async_mma=True)
# Where a block's trips cost less in 192x192 tiles: the most tiles an SM takes times the
# tile's area, at most ``SMALL_K_SQUARE_COST`` of 128x256's, for a K of
# ``SMALL_K_SQUARE_MAX_K`` or less (one or two K steps), the 192x192 persistent form in 2
# stages without panels (``SMALL_K_SQUARE``). On the H200 (bench_gemm, CUPTI; nine short-K
# shapes drawn with random.Random(20261221), reports/short_k_forms_h200.jsonl) it ran
# faster on all four such shapes: 2936x2952x128 fp16 (2 trips against 3, 0.75 the cost)
# 11.1 us against 12.4, 0.945x torch against 0.846x; 3560x6416x128 fp16 (0.94) 16.8
# against 18.0; 5192x3264x128 fp16 (0.90) 14.0 against 14.4; 2152x4088x64 bf16 (0.75)
# 10.1 against 10.5. At an even cost or more it lost or tied (3192x6288x128 fp16, 1.125:
# 16.3 against 15.5; 5736x7808x128 fp16, 1.02: 29.1 against 29.3), and at K=256 (four K
# steps) it lost in 2 stages and in 3 (7696x5208x256 NT fp16, 0.90: 50.1 and 50.6 us
# against 46.7; 4544x2544x256 fp16 17.3 and 15.2 against 15.4). On eight shapes drawn
# after the rule among those it changes (random.Random(20261222),
# reports/short_k_check_h200.jsonl) it ran faster on five, 1.04-1.20x (7816x1040x128
# fp16 8.3 us against 10.0, 1.16x torch against 0.97x; 5064x2576x64 NT fp16 9.7 against
# 11.1), level on one (5984x3824x128 NT bf16 17.0 against 16.9) and slower on two
# (2576x6408x64 bf16, 0.90 the cost: 17.1 against 15.7; 7776x3024x128 NT fp16, 0.94:
# 17.5 against 17.0), median 1.05x: the trips' cost is a rough guide where the stores'
# traffic, not the busiest SM, sets the pace.
SMALL_K_SQUARE = GemmConfig(192, 192, 64, 384, 2, policy="row", smem_epilogue=True, async_mma=True)
SMALL_K_SQUARE_MAX_K = 128
SMALL_K_SQUARE_COST = 0.95
# Over K of ``SMALL_K_SQUARE_MAX_K`` (three or four K steps), where a tile of
# ``SMALL_K_CHEAPER`` covers the busiest SM's trips in at most ``SMALL_K_CHEAPER_COST`` of
# 128x256's area, the cheapest of them (the first of a tie), persistent on the
# hand-written pipeline. On an H100 (bench_gemm, CUPTI; reports/h100/short_k8_around_h100.jsonl,
# short_k9_around_h100.jsonl, random8_losers_h100.jsonl, random8_losers_around_h100.jsonl,
# short_k_sector_h100.jsonl) every such shape timed in it ran faster than 128x256: 128x192
# at 0.75 of the area 1.11-1.19x on five (2808x2208x256 NT fp16 1.19x, 1304x3888x160
# bf16 1.12x), 192x192 at 0.56-0.84 1.09-1.23x on four (7584x1096x248 NT bf16 1.23x,
# where 128x192 ran 1.13x; 4976x2784x248 fp16 1.16x); at 0.90 and more neither led
# (128x192 0.84-1.01x over seven shapes at 0.94-1.12, 192x192 0.93-1.14x). On eight shapes
# drawn after the rule among those it changes (random.Random(20261220),
# reports/h100/short_k_cheaper_check_h100.jsonl) the pick ran faster than the pick before
# it on all eight, 1.045-1.191x, median 1.08x, and than the other cheaper tile on seven.
# The H200 has yet to time them.
SMALL_K_CHEAPER = (
    GemmConfig(192, 192, 64, 384, 3, policy="row", smem_epilogue=True, async_mma=True),
    GemmConfig(128, 192, 64, 256, 4, smem_epilogue=True, async_mma=True),
)
SMALL_K_CHEAPER_COST = 0.85
# In NT where K's rows start off a 32-byte sector (both operands' rows: K = 8 mod 16
# elements), the short K's 128x256 form over K of more than ``SMALL_K_SQUARE_MAX_K`` runs
# in persistent two-block clusters sharing B's tile (``SMALL_K_OFF_SECTOR_PAIR``), which
# read it from the L2 once per pair (where no ``SMALL_K_CHEAPER`` tile takes the shape
# first): on an H100 (bench_gemm, CUPTI) all seven such shapes timed both ways ran faster
# in them, 1.013-1.179x, median 1.15x (7920x4064x200 bf16
# 41.2 us against 48.4, reports/h100/short_k8_around_h100.jsonl; 6656x2256x168 bf16
# 1.179x and 3360x3464x152 bf16 1.140x, short_k_sector_h100.jsonl, drawn with
# random.Random(20261218) before any was measured), where the three NT shapes with K's
# rows on a sector ran 0.88-0.92x in them (2808x2208x256 fp16, random8_losers_h100.jsonl)
# and NN ran 0.96-1.06x whatever the sector, so those keep the form alone. On eight
# shapes drawn after the rule among those it changes (random.Random(20261219),
# reports/h100/short_k_pairs_check_h100.jsonl) the pairs ran faster than the form alone on
# all eight, 1.067-1.290x, median 1.17x, and ahead of clusters sharing A and of 192x192
# in three stages on each. The H200 has yet to time them.
SMALL_K_OFF_SECTOR_PAIR = "b"


def trip_area(shape: GemmShape, config: GemmConfig, sms: int) -> int:
    """The output area the busiest of ``sms`` SMs covers in ``config``'s tiles of
    ``shape``, one tile a trip: its trips (``trips_of``) times the tile's area."""
    return trips_of(shape, config, sms) * config.block_m * config.block_n


def small_k_grid(shape: GemmShape, sms: int) -> GemmConfig:
    """The persistent grid of ``sms`` blocks for a K of ``SMALL_K`` or less: on the
    hand-written pipeline where it builds for ``shape``, else TileLang's; in
    ``SMALL_K_SQUARE``'s 192x192 tiles where K is at most ``SMALL_K_SQUARE_MAX_K`` and
    their trips cost at most ``SMALL_K_SQUARE_COST`` of 128x256's; over that K, in the
    ``SMALL_K_CHEAPER`` tile whose trips cost least where that is at most
    ``SMALL_K_CHEAPER_COST`` of 128x256's, else in NT with K's rows off a sector in
    clusters sharing B's tile (``SMALL_K_OFF_SECTOR_PAIR``)."""
    form = _persistent(SMALL_K_ASYNC, sms)
    if form is None or not builds(shape, form):
        return replace(SMALL_K_TILE, persistent=sms)
    square = _persistent(SMALL_K_SQUARE, sms)
    if (
        square is not None
        and shape.k <= SMALL_K_SQUARE_MAX_K
        and trip_area(shape, square, sms) <= SMALL_K_SQUARE_COST * trip_area(shape, form, sms)
        and builds(shape, square)
    ):
        return square
    if shape.k <= SMALL_K_SQUARE_MAX_K:
        return form
    grids = [_persistent(tile, sms) for tile in SMALL_K_CHEAPER]
    costs = [
        (trip_area(shape, grid, sms), order, grid)
        for order, grid in enumerate(grids)
        if grid is not None and builds(shape, grid)
    ]
    cheapest = min(costs, default=None)  # the least area, the first listed of a tie
    if cheapest and cheapest[0] <= SMALL_K_CHEAPER_COST * trip_area(shape, form, sms):
        return cheapest[2]
    if SMALL_K_OFF_SECTOR_PAIR and shape.layout == "NT" and row_bytes(shape)["A"] % SECTOR_BYTES:
        pair = _replaced(form, multicast=SMALL_K_OFF_SECTOR_PAIR)  # None: an odd grid
        if pair is not None and builds(shape, pair):
            return pair
    return form


def output_tiles(shape: GemmShape, block_m: int, block_n: int) -> int:
    return -(-shape.m // block_m) * -(-shape.n // block_n)


# Where C's rows are not 16-byte aligned a split's partial tiles are added from
# registers. Where both operands' rows are aligned (NT, K a multiple of 8), 64x64 tiles
# split so ran faster than unsplit on four of the five long-K shapes it splits on the
# H200 (bench_gemm, CUPTI; reports/c_rows_h200.jsonl, six drawn before measuring):
# 76x50x15512 NT bf16 9.2 us split eight ways against 45.2, 171x420x22000 NT bf16 20.2
# split four ways against 46.8, 304x404x20632 NT fp16 38.2 split four ways against 65.3
# (two ways, its pick, ran 1.09x torch on an H100: reports/h100/pad_rules); 25x75x5944
# NT fp16 (two tiles) ran slower split four ways, 30.2 us against 16.9. 128x128 split
# there lost to 64x64 unsplit where the scores would take it (437x837x12200: 138.4 us
# split four ways against 53.1), so it stays whole; other tiles are unmeasured, and rows
# TMA cannot take have their own rule (``thread_split``).
SPLIT_C_TILES = ((64, 64),)


def split_for(shape: GemmShape, tiles: int, sms: int, tile: tuple | None = None) -> int:
    """How many ways to split K when ``tiles`` output tiles fill the ``sms`` SMs: 1 unless
    they fill fewer than ``SPLIT_BELOW`` of them; then the largest of ``SPLITS`` that keeps
    the blocks within one wave and ``MIN_SPLIT_K`` of K per split. Where C's rows are not
    16-byte aligned, only for a ``tile`` (block_m, block_n) of ``SPLIT_C_TILES`` on
    operands whose rows are (``rows_aligned``)."""
    c_aligned = (shape.n * ELEMENT_BYTES) % TMA_ALIGN == 0
    if tiles >= SPLIT_BELOW * sms or not (
        c_aligned or (tile in SPLIT_C_TILES and rows_aligned(shape))
    ):
        return 1
    return most_splits(tiles, shape.k, sms, MIN_SPLIT_K)


def most_splits(tiles: int, k: int, sms: int, min_k: int) -> int:
    """The most of ``SPLITS`` ways to split K that keep ``tiles`` output tiles' blocks
    within one wave of ``sms`` SMs and ``min_k`` of ``k`` per split; 1 where none does."""
    fits = [s for s in SPLITS if tiles * s <= sms and -(-k // s) >= min_k]
    return max(fits, default=1)


def tile_of_c(config: GemmConfig) -> tuple[int, int]:
    """(rows, columns) of C that one of ``config``'s tiles covers: block_m x block_n, or
    block_n x block_m with the operands exchanged (``swap_ab``)."""
    if config.swap_ab:
        return config.block_n, config.block_m
    return config.block_m, config.block_n


def waves(shape: GemmShape, config: GemmConfig, sms: int) -> int:
    """Rounds of ``config``'s blocks (output tiles times splits) over the ``sms`` SMs."""
    blocks = output_tiles(shape, *tile_of_c(config)) * config.split_k
    return -(-blocks // sms)


# --- skinny M with the operands exchanged ---------------------------------------------
#
# A wgmma computes 64 rows (M) by a multiple of 8 columns (N), so a plain tile pads a
# skinny M up to 64 or 128 rows; with the operands exchanged (``GemmConfig.swap_ab``: C^T
# = B^T A^T) M rides on the N side, in steps of 16. On the H200 (bench_gemm, CUPTI,
# against torch.matmul; reports/swap_h200.jsonl), unsplit: 96x7168x2048 NT fp16 in
# 64x96x128 swapped tiles (4 stages) 1.01x against the plain pick's 0.87x (128x128 split
# in two); decode16 bf16 (16x8192x8192) in 64x16x128 (6 stages) 1.01x against 0.97x
# (64x256 split in two); 8x14336x4096 NT bf16 in 128x16x128 (6 stages) 1.01x against
# 0.95x. Split K with the operands exchanged added the transposed partial tiles into C
# element by element, and ran 0.13x on 96x7168x2048; it now reduce-adds them by TMA from
# shared memory where C's rows are 16-byte aligned. No H200 record has timed that yet. On
# an H100 64x96 split two ways ran 1.7-2.9x faster than before on four skinny shapes;
# split, the exchanged tile ran ahead of its unsplit form on 8 of 18 shapes timed both
# ways and was the fastest form timed on three (reports/h100/skinny*split*_h100.jsonl):
# too few for a rule, so the swapped configs stay unsplit.
SWAP_MAX_M = 128
# Swapped tiles' widths along N (wgmma's M side): the wider where it fills as many SMs.
SWAP_BLOCKS = (128, 64)
SWAP_BLOCK_K = 128
# The least share of the SMs a swapped grid must fill: the measured wins had 112 and 128
# tiles on an H200's SMs; a thinner grid keeps the plain rules, which split K.
SWAP_MIN_FILL = 0.8
# Where M rounds to at most this many rows (the exchange saves a quarter or more of the
# plain tile's 64), the swapped grid takes the shape down to ``SWAP_PADDED_FILL`` of the
# SMs, where the plain rules start to split K (``SPLIT_BELOW``); between the two the plain
# pick was 64x64 unsplit, the same grid along N with M padded to 64. On an H100 (bench_gemm,
# CUPTI; reports/h100/skinny_swap_h100.jsonl, ten shapes drawn before any was measured,
# 66-105 tiles of 64 columns) the swapped tile ran faster than that pick on all five
# shapes whose M rounds to 48 or fewer, 1.06-1.20x (13x5096x14064 fp16: 0.777x torch to
# 0.931x), and level where M rounds to 64 (0.955-1.032x, median 1.010x), so those keep
# ``SWAP_MIN_FILL``. On ten shapes drawn after the rule (skinny_swap_check_h100.jsonl)
# it ran faster on eight, 0.972-1.252x, median 1.072x: all five at 16 or 32 rows, three
# of five at 48 (median 1.035x); on ten more at 33-48 rows alone (skinny_swap48_h100.jsonl,
# drawn after the rule) on seven, 0.964-1.105x, median 1.038x, one under 0.90x torch against
# three for 64x64. Narrower plain tiles (64x32, 64x16, 64x48) ran slower than the pick on
# all ten shapes of reports/h100/skinny_narrow_h100.jsonl, and K split in two about level
# (reports/h100/thin_fill_h100.jsonl). The H200 has yet to time it.
SWAP_PADDED_ROWS = 48
SWAP_PADDED_FILL = SPLIT_BELOW
# Stages: 6 where the tile holds at most 32 rows of M (decode16's and 8x14336's), 4 for
# wider ones (96x7168's); fewer where shared memory runs out.
SWAP_STAGES = {32: 6, SWAP_MAX_M: 4}
# In NN, M over this keeps the plain rules where K splits four ways (``SWAP_NN_MIN_K``),
# which take 128x256 split four ways there (below it they take 128x128 split two ways,
# untimed on such a shape). The exchanged tile fell behind it; it reads B (K x N,
# N-major) as the wgmma's transposed first operand, a likely cause not yet profiled. On
# the H200 90x7440x8848 bf16 ran 0.954x torch in 128x256 split four ways against 0.889x
# exchanged (reports/skinny_pairs_h200.jsonl), 88x7928x4136 bf16 0.854x in 128x192 split
# two ways against 0.835x (random4_forms_h200.jsonl). On an H100 128x256 split four ways
# ran ahead of the exchanged pick on nine of the ten shapes it changes that were timed in
# both forms, six of them drawn before they were measured (1.00-1.23x, 89x7120x14024 fp16
# 1.12x), level on the tenth (90x7440x8848; reports/h100/skinny_nn2_h100.jsonl,
# skinny_split_nn_h100.jsonl, skinny_split_h100.jsonl). In NT the exchanged tile kept its
# lead (86x7104x12928 bf16: 1.08x torch against 0.99x on the H100).
SWAP_NN_MAX_M = 64
SWAP_NN_MIN_K = 4 * MIN_SPLIT_K


def swap_fits(shape: GemmShape) -> bool:
    """Whether exchanging the operands saves padding: M at most ``SWAP_MAX_M`` and not a
    multiple of 64 (the wgmma's rows)."""
    return shape.m <= SWAP_MAX_M and shape.m % 64 != 0


def swap_rows(shape: GemmShape) -> int:
    """The swapped tile's rows of C: M rounded up to the wgmma's step of 16."""
    return -(-shape.m // 16) * 16


def swap_for(shape: GemmShape, sms: int) -> GemmConfig | None:
    """The swapped config for a skinny M, or None where the heuristic keeps its plain
    rules: M over ``SWAP_MAX_M`` or a multiple of 64 (no padding to save), in NN M over
    ``SWAP_NN_MAX_M`` with K of ``SWAP_NN_MIN_K`` or more, or a grid of
    swapped tiles under ``SWAP_MIN_FILL`` of the SMs, or under ``SWAP_PADDED_FILL`` where
    M rounds to ``SWAP_PADDED_ROWS`` rows or fewer (32x4096: 64 tiles; the plain rules
    split K there, which the swapped kernel does slowly). Of ``SWAP_BLOCKS``
    the one whose tiles fill the most of the SMs' slots over their waves, the wider on a
    tie."""
    plain_nn = shape.layout == "NN" and shape.m > SWAP_NN_MAX_M and shape.k >= SWAP_NN_MIN_K
    if not swap_fits(shape) or plain_nn:
        return None
    rows = swap_rows(shape)
    stages = next(st for limit, st in sorted(SWAP_STAGES.items()) if rows <= limit)
    least = SWAP_PADDED_FILL if rows <= SWAP_PADDED_ROWS else SWAP_MIN_FILL
    best = None
    for width in SWAP_BLOCKS:
        tiles = output_tiles(shape, rows, width)
        if tiles < least * sms:
            continue
        fits = (_swapped(width, rows, SWAP_BLOCK_K, st) for st in range(stages, 1, -1))
        config = next((c for c in fits if c is not None), None)
        if config is not None and (best is None or fill(tiles, sms) > best[0]):
            best = (fill(tiles, sms), config)
    return None if best is None else best[1]


def swap_candidates(shape: GemmShape, sms: int) -> list[GemmConfig]:
    """The swapped configs searched for a skinny M (M up to ``SWAP_MAX_M``, not a
    multiple of 64): tiles of ``SWAP_BLOCKS`` columns by M rounded up to 16 rows, block_K
    64/128/256, 3-8 stages, unsplit, where they fit."""
    if not swap_fits(shape):
        return []
    rows = swap_rows(shape)
    out = [
        _swapped(width, rows, bk, st)
        for width, bk, st in itertools.product(SWAP_BLOCKS, (64, 128, 256), (3, 4, 6, 8))
    ]
    return [c for c in out if c is not None]


def _swapped(width: int, rows: int, block_k: int, stages: int) -> GemmConfig | None:
    """The swapped config of one warpgroup: ``width`` columns of C by ``rows`` rows."""
    return _valid(
        block_m=width, block_n=rows, block_k=block_k, threads=128, num_stages=stages, swap_ab=True
    )


def fill(blocks: int, sms: int) -> float:
    """The share of the SMs' block slots that ``blocks`` keep busy over their waves."""
    return blocks / (-(-blocks // sms) * sms)


# A grid of two-block clusters rounds its tiles along the pair's axis up to whole pairs
# (``kernels.schedules.pair_grid``): the block past an odd count loads zeros and computes
# a tile nobody reads. Where a wave holds the output tiles and not the rounded grid, the
# last blocks run in a second wave of their own. On the H200 (bench_gemm, CUPTI; every
# record with both grids of one tile) such pair grids took 1.30-1.92x the plain grid's
# time, median 1.52x over nine (1616x1888x3352 fp16 in 128x192: 57.2 us against 36.0,
# 130 tiles in 140 blocks, rules_check_h200.jsonl; 1280x3432x3440 bf16 in 192x192: 84.4
# against 43.8, mid_train_h200.jsonl; 1728x1536x1240 NT bf16 in 192x112: 26.4 against
# 16.9, one_wave_forms_h200.jsonl). The scores counted the output tiles alone, and took
# 128x192's pair for 1632x1816x3520 fp16 (58.4 us, 0.627x torch, rules_check_h200.jsonl);
# they now count the rounded grid's waves (``pair_fill``) and take the plain grid. Over
# a wave the pair runs as persistent clusters (``clustered_pair``), whose trips round the
# same way, unmeasured there, so the scores keep the output tiles. Checked on no shape
# drawn after the rule yet (reports/offtable_pair_round_shapes.json is that draw).
def pair_fill(shape: GemmShape, pair: GemmConfig, sms: int) -> float:
    """``fill`` of a grid of two-block clusters (``pair``) whose output tiles make a
    wave or less on ``sms`` SMs (so it stays a plain grid, ``clustered_pair``): its output
    tiles over the slots of the waves its grid takes, the tiles rounded up to whole pairs;
    over a wave, ``fill`` of its output tiles."""
    tiles = output_tiles(shape, *tile_of_c(pair))
    if tiles > PAIR_CLUSTERS_WAVES * sms:
        return fill(tiles, sms)
    return tiles / (-(-grid_blocks(shape, pair) // sms) * sms)


def waste(shape: GemmShape, block_m: int, block_n: int) -> float:
    """Padded output area over the real one: what a tile that does not divide M or N
    computes for nothing (1.0 where it divides both)."""
    area = -(-shape.m // block_m) * block_m * -(-shape.n // block_n) * block_n
    return area / (shape.m * shape.n)


def with_split(config: GemmConfig, split: int) -> GemmConfig:
    """``config`` with K split ``split`` ways: C is staged in shared memory and reduce-added
    (no separate epilogue option), and the grid's z dimension carries the splits (no
    swizzle)."""
    if split == 1:
        return config
    return replace(config, split_k=split, swizzle=0, smem_epilogue=False)


def score(shape: GemmShape, tile: Tile, sms: int) -> tuple[float, GemmConfig]:
    """Expected throughput of ``tile`` on ``shape``, relative (higher is better): the
    tile's efficiency, times the SMs its blocks (split where that pays) keep busy, over the
    padding it computes; and the config that gets it. An unsplit 128x256 grid where B's
    rows are off a sector (``pair_fits``) is its two-block twin, ``PAIR_GAIN`` faster.
    0 where the config does not build for ``shape`` (``builds``)."""
    c = tile.config
    tiles = output_tiles(shape, c.block_m, c.block_n)
    split = split_for(shape, tiles, sms, (c.block_m, c.block_n))
    if not builds(shape, with_split(c, split)):
        return 0.0, with_split(c, split)
    value = tile.efficiency * fill(tiles * split, sms) / waste(shape, c.block_m, c.block_n)
    if split == 1 and (c.block_m, c.block_n) == (128, 256) and pair_fits(shape):
        value *= pair_fill(shape, PAIRED_TILE, sms) / fill(tiles, sms)
        return value * PAIR_GAIN, PAIRED_TILE
    return value, with_split(c, split)


def heuristic(shape: GemmShape, sms: int) -> GemmConfig:
    """A config for a shape nobody tuned, on a GPU of ``sms`` SMs. The rule, and the
    tuning log's evidence for it (reports/tune_h200.jsonl, the H200, fp16 quick timings):

    - First, where A's or B's rows are not 16-byte aligned and the output tiles
      are few: 64x64 tiles split K eight ways (``thread_split``), sixteen by cp.async
      where only B's rows are off and come in 4-byte steps, fewer where the blocks pass
      three an SM (475x183x10976 fp16: 60.6 us against 116.2 unsplit on the H200;
      107x550x14088 bf16 by cp.async: 20.1 us against 42.5 split eight ways on an
      H100, 17.7 us on the H200); only where eight ways fit, but for rows in 2-byte
      steps under half a wave of tiles or with M or N at most 128. Rows in 2-byte steps
      go padded instead (``padding_pays``: in NN where they are half the copy or more,
      in NT under a wave of blocks; 475x183x10976 fp16 22.0 us against 61.2), in
      128x128 tiles where 64x64's leave two splits (``PAD_WIDE_TILE``: 312x463x13760
      bf16 35.4 us split eight ways against 38.6).
    - A skinny M that is not a multiple of 64 (up to ``SWAP_MAX_M``): the operands
      exchanged (``swap_for``), M on the wgmma's N side in steps of 16, unsplit, where the
      swapped tiles fill ``SWAP_MIN_FILL`` of the SMs (96x7168x2048 NT: 1.01x torch on the H200
      against the plain 128x128 split in two, 0.87x; decode16 bf16 1.01x against 0.97x),
      or half of them where M rounds to 48 rows or fewer (``SWAP_PADDED_FILL``: on an H100
      five of five shapes drawn for it faster than 64x64 unsplit, 1.06-1.20x, eight of
      ten drawn after it, median 1.07x),
      in NN only for M up to ``SWAP_NN_MAX_M`` or K under ``SWAP_NN_MIN_K`` (else
      128x256 split four ways ran ahead: 90x7440x8848 bf16 0.954x against 0.889x on the
      H200).
    - K <= ``SMALL_K`` (one or two K steps; M > 64 and N > 128): the write-back dominates,
      and a persistent grid of one block per SM overlaps it with the next tile's loads
      (attn_qk_t: 0.0194 ms, the best non-persistent config 0.0234 ms), on the
      hand-written pipeline where it builds, which overlaps the tile's store with the
      next tile's K steps too (``small_k_grid``: attn_qk_t 13.1 us against 15.3 us);
      in 192x192 tiles where K is 128 or less and their trips cost less (2936x2952x128:
      11.1 us against 12.4); over K of 128, in 192x192 or 128x192 tiles where their trips
      cost at most 0.85 of 128x256's (``SMALL_K_CHEAPER``: on an H100 2808x2208x256 NT
      fp16 1.19x faster in 128x192), else in NT where K's rows are off a sector in
      two-block clusters sharing B (on an H100 7920x4064x200 bf16: 41.2 us against 48.4).
    - Thin, M <= 64 or N <= 128 (decode, attention's P@V): 64x64 tiles streaming the wide
      operand through six stages (decode64 0.0449 ms and attn_pv 0.0194 ms, both the
      winners; 128x128 tiles took 0.032 ms on attn_pv), K split when they fill fewer than
      half the SMs; for M <= 64, 64x256 tiles (``WIDE_THIN``) where they stream it in one
      wave and 64x64 tiles take more, without more padding (8x14336x4096 NT: 0.954x torch
      against 0.726x).
    - Otherwise each of ``TILES`` is scored: its efficiency on large shapes (128x256 1.0,
      256x128 0.97, 128x128 0.79, 64x64 0.4), times the share of SM slots its blocks fill
      over their waves, over the padding it computes where it does not divide M and N;
      the best score wins (the first of a tie). So a tile that divides M and N beats one
      that pads them, 128x256 wins wherever it fills the SMs (every large case's winner),
      and smaller tiles win where it leaves SMs idle.
    - 128x192 (``NARROW_WIDE``, row policy, 0.95) is scored alike, but only where A's
      rows are 32-byte aligned (``narrow_fits``) or its output tiles make less than a
      wave (``under_a_wave``): where it covers the SMs better than 128x256 it wins
      (1536^2 NT: 0.824x torch against 0.661x on the H200; 1240x2112x1288 bf16, A off a
      sector: 13.7 us against 17.3).
    - The wave-fitting tiles (``FITTED``: 128 rows by 144-224 columns, 192 rows by 96-192)
      are scored alike on the layouts they were measured on (NN only the widths of whole
      128-byte rows), unsplit and where A's rows are 32-byte aligned: a tile whose output
      tiles fill a wave wins over one that leaves SMs idle (1536^3 NT on the H200: one
      wave of 128x144 tiles, 0.945x torch in the off-table record, against 0.820x for
      128x192's 96 tiles).
    - Stream-K (``stream_k_score``) for the two-warpgroup tiles where their output tiles
      are a wave or more: every SM busy at 0.90 of the plain grid's pace, so it wins where
      the last wave leaves over a tenth of the slots idle (2500x1800x4000: 256x128 tiles
      stream-K 0.0756 ms; plain 0.0949, 128x128 0.0947, persistent 128x128 0.0934).
    - Where B's rows start off a 32-byte sector, an unsplit grid of 128x256 tiles is
      scored as its twin in two-block clusters sharing B, 1.15x its pace (``pair_fits``,
      ``PAIR_GAIN``: 3000x5000x7000 bf16 0.917x torch against 0.708x on the H200), so it
      also wins over stream-K where the plain tile would not (5000^3 NT bf16: 0.856x,
      stream-K 0.731x).
    - Split-K (``split_for``), in every branch but the first: where a tile's output tiles
      fill fewer than half the SMs (small M and N, long K), K is split 2-16 ways, the
      most that keeps the blocks within one wave and 1024 of K per split (decode16: 32
      tiles of 64x256 took 0.0614 ms, split in two 0.0469, eight ways 0.0478; decode64's
      128 tiles of 64x64 lost 7% split in two, so a grid that half-fills is left whole);
      where C's rows are off 16 bytes, only 64x64 tiles on aligned operands
      (``SPLIT_C_TILES``: 76x50x15512 NT bf16 9.2 us split eight ways against 45.2).
    - Where B's rows start off a sector (NN, and NT under a wave of 128x192 tiles),
      128x192 in pairs sharing B (``NARROW_PAIR_TILE``, 0.93 of the 128x256 pair's pace
      per slot) is scored too: it wins where it covers the SMs over 7% better
      (2000x3000x3000: 0.92x torch against 0.77x for stream-K; 1456x1544x1704 NT bf16:
      18.4 us against 21.9 for 128x256's pair).
    - A pair's grid (either tile) whose output tiles make a wave counts the waves of its
      grid rounded up to whole pairs (``pair_fill``): where the rounding tips it over,
      the plain grid ran faster on all nine recorded (1616x1888x3352 fp16 in 128x192:
      36.0 us against 57.2 in pairs).
    - Two or three waves of 128x192 tiles, the last 70% full or more, both operands'
      rows on a sector: 128x192's persistent form on the hand-written pipeline
      (``narrow_persistent``), ahead of the scores above (3072x1968x3232: 0.998x torch
      against 0.880x on the H200), and then only the exchanged rules below.
    - In NN where A's or B's rows are not 16-byte aligned (K or N not a multiple of 8),
      128x256 with both operands loaded by cp.async (``thread_loads``), ahead of the
      scores, where its tiles fill half the SMs or more (4000x3002x3000 fp16: 1.671x
      torch against 1.255x for 128x128; 1707x1507x2783 fp16 1.073x against 0.234x for
      128x192, which spills there); but where K is odd (A's rows, which cp.async cannot
      copy) and N a multiple of 8, 128x192 with B by TMA (``scalar_a``: 3341x4104x1459
      bf16 2.436x torch against 1.926x).
    - Six waves or more of 192x192 tiles: their stream-K form on the hand-written
      pipeline in 3 stages (``large_stream_k``), ahead of the scores above too (9000x7000x4000
      bf16: 1.001x torch in first use against the rules' 0.891x on the H200); where B's
      rows are off a sector, in two-block clusters sharing B's tile (on an H100 1.06-1.26x
      faster on the thirteen such shapes drawn for it, NT and NN, 1.03-1.24x on the
      fourteen drawn after).
    - A narrower wave-fitting tile's plain grid (any ``FITTED`` but 192x192) past two
      waves of its output tiles gives way to 192x192's stream-K form
      (``streamed_fitted``: on an H100 2960x3096x3168 NT bf16 0.854x torch against 0.684x
      in 128x144; 23 of 23 recorded rows past two waves slower than it, seven of them
      on the H200).
    - Where A's rows are off a sector and the pick is a stream-K grid of 128x256 or
      256x128 tiles, 192x192 takes its place (``off_sector_square``): in stream-K form
      over a wave of its tiles, plain just under one (3648x2336x3608 NT: 110.8 us
      against 124.4 on the H200).
    - In NT where K's rows are off a sector, 128x192's pair in persistent clusters takes
      that stream-K's place where its trips fit stream-K's even share within 1.25
      (``off_sector_pair``: 3496x1568x2200 fp16 0.893x torch against 0.745x), and the
      plain 192x192 grid runs in pairs sharing B where they stay within the wave
      (``off_sector_plain_pair``: 3296x1344x2920 fp16 0.964x torch against 0.837x),
      taking tiles of 0.85 of a wave there, not 0.9 (1128x3624x3688 bf16: 46.1 us against
      57.5 for the operands exchanged).
    - Then the pick goes on the hand-written pipeline where that form ran faster with the
      same tile (``async_form``): stream-K in its persistent form (2500x1800x4000: 0.0581
      ms against 0.0658), and an unsplit 128x256 grid of two waves or more persistent
      in 4 stages (4096^3 fp16: 0.1772 ms against 0.1781 in 3 stages, which ran 0.1804
      against 0.1850 for TileLang's pipeline); a pair's grid of more than a wave runs
      in persistent two-block clusters (``clustered_pair``: 3040x1912x2528 fp16 0.994x
      torch against 0.892x for the plain pair); and a plain or paired grid of two waves
      or fewer runs without panels (``unpanelled``: 46 of 57 such grids measured ran
      slower in them), but 128x256's plain grid in NN with A's rows off a sector, in
      panels of 4 (``A_OFF_PANEL``: on an H100 1.002-1.099x faster on the ten shapes
      drawn after it, median 1.047x).
    - Last, a pick on the hand-written pipeline gives way to the operands exchanged
      (``exchanged``: 256 columns by 144-192 rows of C, rows in steps of 16) where those
      tiles make two trips or fewer within 1.2 of an even share and the pick is stream-K
      or covers over 1 / 0.96 of their area a trip (3792x2728x2256 fp16: 0.908x torch
      against 0.812x for 128x256's pairs; 21 of 21 recorded shapes faster, median 1.07x);
      and a plain unsplit grid of TileLang's pipeline, but 192x192, where they cover at
      most 1.1 times its area a trip (1400x3616x3216 NT bf16: 48.3 us against 55.3 for
      128x160 on the H200; on an H100 twenty of twenty shapes faster, median 1.18x).
      Where the form alone leaves a pick on the hand-written pipeline, 128x192's
      persistent one among them, its pairs sharing B's tile take it where their trips
      cover no more area (``exchanged_reach``: on an H100 eight of nine faster, 1.009-1.143x,
      2872x2984x3160 fp16 0.967x torch against 0.848x; eleven of twelve drawn after).
      In NT under a wave, 128x192's pair narrows to 128x160's in 5 stages where that
      pads N 3% less or more and its pairs fit the wave (``narrower_nt_pair``: on the
      H200 faster on seven of the eight shapes drawn for it, 1.03-1.08x, 0.96x on the
      eighth, and on the two earlier records of both; on an H100 on all eight). Then
      either NT pair, or 128x128 on one warpgroup, gives way to four-block clusters of
      128x160, 128x176 or 128x192, the narrowest whose grid stays within 0.91 of the SMs
      (``nt_quads``: on an H100 1.04-1.22x faster on the ten shapes drawn before it, on
      eight drawn after six 1.03-1.20x faster and two level, 1.03-1.37x on the five
      one-warpgroup picks timed; on the H200 a median 1.10x over the 23 picks it changes
      there, 1.10-1.18x where the tile narrows, 0.95-1.32x elsewhere).
    - In NN under a wave of 128x192 tiles, where A's rows start off a sector and B's do
      not and 192 columns make six tiles or more, the plain 128x192 grid gives way to
      the operands exchanged in 192 columns by 96-128 rows, persistent in one trip
      (``nn_exchanged``: on the H200 the six shapes drawn for it that keep this form
      all ran faster, 1.01-1.25x, 912x2432x1192 bf16 10.9 us against 13.6); where K is
      2000 or more, to 128x192 in clusters sharing A (on an H100 nine of ten shapes
      drawn for it faster, median 1.17x).

    Nothing is picked that does not build for the shape (``builds``): a tile whose config
    does not scores 0, and a short K's grid that does not gives way to the scores. In NN
    with only one operand's rows 16-byte aligned, that leaves out the two-warpgroup tiles
    over 128x192 (128x208 to 128x256, 256x128) and the three-warpgroup ones over 192x96
    (``check_combination``); timed past that rule on the H200, they ran 0.42-0.76x of
    the tiles left (reports/split_loads_h200.jsonl).
    """
    check_sms(sms)
    split_threads = thread_split(shape, sms)
    if split_threads is not None:
        return split_threads
    swapped = swap_for(shape, sms)
    if swapped is not None:
        return swapped
    thin = shape.m <= 64 or shape.n <= 128
    if shape.k <= SMALL_K and not thin:
        grid = small_k_grid(shape, sms)
        if builds(shape, grid):
            return grid
    if thin:
        config = score(shape, THIN, sms)[1]
        wide = with_split(WIDE_THIN, split_for(shape, output_tiles(shape, 64, 256), sms))
        if shape.m <= 64 and waves(shape, wide, sms) == 1 < waves(shape, config, sms):
            return wide if waste(shape, 64, 256) <= waste(shape, 64, 64) else config
        return config
    threads = scalar_a(shape, sms) or thread_loads(shape, sms)
    if threads is not None:
        return threads
    narrow = narrow_persistent(shape, sms)
    if narrow is not None:
        return exchanged(shape, narrow, sms)
    large = large_stream_k(shape, sms)
    if large is not None:
        return large
    best_value, best = score(shape, TILES[0], sms)
    for tile in TILES[1:]:
        if (tile.config.block_m, tile.config.block_n) == NARROW_WIDE and not (
            narrow_fits(shape) or under_a_wave(shape, sms)
        ):
            continue
        value, config = score(shape, tile, sms)
        if value > best_value:
            best_value, best = value, config
    for tile in FITTED:
        value, config = fitted_score(shape, tile, sms)
        if value > best_value:
            best_value, best = value, config
    for tile in TILES[:2]:
        value, config = stream_k_score(shape, tile, sms)
        if value > best_value:
            best_value, best = value, config
    value = narrow_pair_score(shape, sms)
    if value > best_value:
        best_value, best = value, NARROW_PAIR_TILE
    best = off_sector_square(shape, streamed_fitted(shape, best, sms), sms)
    best = off_sector_plain_pair(shape, off_sector_pair(shape, best, sms), sms)
    best = off_sector_nn(shape, best, sms)
    best = streamed_pair(shape, clustered_pair(shape, async_form(shape, best, sms), sms), sms)
    best = nn_exchanged(shape, unpanelled(shape, exchanged(shape, best, sms), sms), sms)
    return nt_quads(shape, narrower_nt_pair(shape, best, sms), sms)


# Where A's rows start off a 32-byte sector (``narrow_fits`` false) the scores above
# leave out the 192x192 tile with the other fitted ones, and pick stream-K in 128x256 or
# 256x128 tiles on most mid shapes. 192x192 took their place on the H200 (bench_gemm,
# CUPTI; reports/narrow_rows_h200.jsonl and mid_train_h200.jsonl, pairs from one record
# each): over a wave of its output tiles, its stream-K form on the hand-written pipeline
# (``LARGE_STREAM_K``, the form that takes six waves or more anywhere) ran faster than the
# stream-K pick on 11 of 12 shapes of 1.2-2.9 waves, median 1.09x (3248x2096x2968 bf16
# 62.7 us against 74.6, 3648x2336x3608 NT fp16 110.8 against 124.4; 3464x1592x1064 NT
# bf16 31.3 against 31.1); just under a wave its stream-K form lost (1272x3352x1896 bf16,
# 126 tiles: 37.6 us against 35.3) where its plain grid won on all three shapes measured
# (31.2; 1576x2608x3784 58.0 against 60.9; 3456x1304x2136 NT 34.9 against 43.7). On
# 12 shapes drawn after the rule where it changes the pick
# (reports/offtable_offsector_shapes.json, offsector_h200.jsonl) its pick ran faster on
# every one, 1.002-1.173x, median 1.056x (2288x2656x3912 bf16 71.2 us against 83.0;
# 1840x2368x3480 fp16, 130 tiles, plain 44.7 against 52.4).
# Against the persistent forms in clusters, on twelve NT shapes drawn later whose pick it
# is (both operands' rows off a sector, 1.4-2.1 waves of 128x192; random.Random(20261212),
# reports/nt_off_forms_h200.jsonl), its stream-K pick was the fastest of seven forms or
# within 8% of it on 11 of 12; 128x192's clusters form led six, by 1.02-1.18x
# (4080x1352x1368 bf16 0.841x torch against 0.710x), and lost by up to 1.21x on the others
# (1664x3840x3672 bf16 0.735x against 0.891x): where its trips fit, it takes the pick
# (``off_sector_pair``, below). A fresh draw found a loss too: 1648x3520x2024 fp16 (B's
# rows on a sector; reports/random2_forms_h200.jsonl), 44.0 us against 40.6 for 128x256
# stream-K, so over the records it ran faster on 29 of 31 shapes it changes.
# In NT the plain grid runs in pairs (``off_sector_plain_pair``, below), which took a
# shorter wave too: 1128x3624x3688 NT bf16, 114 tiles (0.86 of a wave), 46.1 us in
# 192x192's pairs against 63.0 for 192x192's stream-K and 54.2 for the plain grid
# (reports/quad_clusters_h200.jsonl), 57.5 for the operands exchanged that took it
# without this (exchanged_forms_h200.jsonl); 1024x3376x2824 NT fp16, 108 tiles (0.82),
# ran 1.06x slower in them than in 128x256's pairs (quad_clusters_h200.jsonl) and stays
# out. It changes no other recorded or listed shape's pick; NN there is unmeasured.
OFF_SECTOR_PLAIN_WAVE = 0.9
OFF_SECTOR_PAIR_WAVE = 0.85
OFF_SECTOR_TILES = ((128, 256), (256, 128))


def off_sector_square(shape: GemmShape, config: GemmConfig, sms: int) -> GemmConfig:
    """192x192 in place of a stream-K pick of 128x256 or 256x128 tiles where A's rows are
    off a sector: its stream-K form (``LARGE_STREAM_K``) where its output tiles make a
    wave or more, its plain grid (the fitted tile) where they make
    ``OFF_SECTOR_PLAIN_WAVE`` of one, or in NT ``OFF_SECTOR_PAIR_WAVE`` where its pairs
    stay within the wave; ``config`` elsewhere or where the form does not build."""
    if narrow_fits(shape) or not config.stream_k or tile_of_c(config) not in OFF_SECTOR_TILES:
        return config
    tiles = output_tiles(shape, 192, 192)
    least = OFF_SECTOR_PAIR_WAVE if plain_pairs_fit(shape, sms) else OFF_SECTOR_PLAIN_WAVE
    if tiles >= sms:
        form = replace(LARGE_STREAM_K, stream_k=sms)
    elif tiles >= least * sms:
        form = _fitted(192, 192)
    else:
        return config
    return form if builds(shape, form) else config


# The narrower wave-fitting tiles (``FITTED`` but 192x192) were scored on one-wave
# evidence (1536^3 NT). Past two waves of their output tiles, 192x192's stream-K form
# (``LARGE_STREAM_K``) took their place in every record that timed both in one run
# (bench_gemm, CUPTI): 23 of 23 rows over 2.0 waves ran faster in it, 1.006-1.388x
# (seven of reports/narrow_rows_h200.jsonl on the H200, 1.17-1.39x, 3144x2912x3400 NT
# bf16 in 128x144 tiles 1.39x; ten of reports/h100/mid_losers_h100.jsonl on an H100). On
# ten mid shapes drawn for the question whose pick was a fitted tile past two waves
# (random.Random(20261216), reports/offtable_fitted_waves_shapes.json;
# reports/h100/fitted_waves_h100.jsonl) the six
# narrower picks all ran slower than it on an H100, by 1.016-1.249x (2960x3096x3168 NT
# bf16 in 128x144: 0.684x torch against 0.854x), where the four 192x192 picks ran 1.01-1.05x
# faster than it, so 192x192's plain grid stays. At two waves and under it was mixed
# (2232x3384x2048 NT bf16 in 192x160, 2.0 waves: 0.92x of it). On ten shapes drawn after
# the rule among those it changes (random.Random(20261217),
# reports/h100/fitted_sk_check_h100.jsonl) the picks with it, the rules after it
# included, ran faster than the picks before it on all ten, 1.021-1.292x, median 1.11x
# (3848x2424x1056 NT bf16 0.914x torch against 0.708x). The H200 has yet to time the two
# drawn lists.
FITTED_STREAM_K_WAVES = 2


def streamed_fitted(shape: GemmShape, config: GemmConfig, sms: int) -> GemmConfig:
    """``LARGE_STREAM_K`` over ``sms`` blocks in place of a plain grid of a narrower
    ``FITTED`` tile (any but 192x192) whose output tiles make more than
    ``FITTED_STREAM_K_WAVES`` waves; ``config`` elsewhere or where the form does not build."""
    narrower = {tile_of_c(t.config) for t in FITTED} - {(192, 192)}
    if (
        tile_of_c(config) not in narrower
        or config.async_mma
        or config.persistent
        or config.stream_k
        or config.split_k > 1
        or config.multicast
        or config.swap_ab
        or output_tiles(shape, config.block_m, config.block_n) <= FITTED_STREAM_K_WAVES * sms
    ):
        return config
    form = replace(LARGE_STREAM_K, stream_k=sms)
    return form if builds(shape, form) else config


# Where both operands' rows are off a sector (NT, K*2 bytes 16 past a sector) the loads
# are what costs (reports/sector_clusters_h200.jsonl, 2096x2728 NT fp16: K=1304 against
# K=1312, 1.10-1.31x the time in persistent and stream-K grids, 1.03-1.05x in clusters
# sharing B, which read B's tile from the L2 once per pair). A pair of 128x192 tiles then
# takes the place of ``off_sector_square``'s 192x192 stream-K where its pairs' trips
# cost each block little more than stream-K's even share: the most trips a cluster takes,
# times the tile, at most ``OFF_SECTOR_PAIR_SLACK`` times the 192x192 tiles' area over
# the SMs. On the H200 (bench_gemm, CUPTI), on twelve NT shapes whose pick was that
# stream-K (random.Random(20261212), reports/nt_off_forms_h200.jsonl) the pair in
# persistent clusters ran faster on every shape at 1.00-1.23 of the share (1.02-1.18x:
# 4080x1352x1368 bf16 0.841x torch against 0.710x) and slower on every one at 1.29 or more
# (1664x3840x3672 bf16, 1.47: 0.735x against 0.891x); it ran faster on both such shapes
# of reports/b_off_forms_h200.jsonl too (2216x4000x2664 bf16, 1.05: 0.952x against
# 0.811x). On twelve shapes drawn after the rule among those it changes
# (random.Random(20261213), reports/nt_pairs_check_h200.jsonl) it ran faster on all
# twelve, 1.008-1.199x (3496x1568x2200 fp16 0.893x against 0.745x). 128x256's pairs were
# never within the slack where this stream-K is picked; NN is unmeasured.
OFF_SECTOR_PAIR_SLACK = 1.25


def pair_trip_share(shape: GemmShape, form: GemmConfig, sms: int) -> float:
    """The output area one block of a persistent clusters ``form`` covers at most (its
    cluster's trips times a tile) over ``LARGE_STREAM_K``'s tiles' whole area shared
    evenly by ``sms`` SMs (what that stream-K grid gives each)."""
    _, trips = pair_trips(shape, form)
    bm, bn = LARGE_STREAM_K.block_m, LARGE_STREAM_K.block_n
    share = output_tiles(shape, bm, bn) * bm * bn / sms
    return trips * form.block_m * form.block_n / share


def off_sector_pair(shape: GemmShape, config: GemmConfig, sms: int) -> GemmConfig:
    """128x192's pair in persistent clusters (``NARROW_PAIR_TILE``) in place of
    ``off_sector_square``'s stream-K in NT where A's rows are off a sector and the pair's
    trips are within ``OFF_SECTOR_PAIR_SLACK`` of stream-K's even share; ``config``
    elsewhere or where the form does not build."""
    if (
        shape.layout != "NT"
        or narrow_fits(shape)
        or config != replace(LARGE_STREAM_K, stream_k=sms)
    ):
        return config
    form = form_of(NARROW_PAIR_TILE, "clusters", sms)
    if form is None or pair_trip_share(shape, form, sms) > OFF_SECTOR_PAIR_SLACK:
        return config
    return form if builds(shape, form) else config


# In NT where K's rows are off a sector, ``off_sector_square``'s plain 192x192 grid (its
# tiles just under a wave) runs in two-block clusters sharing B's tile, on the
# hand-written pipeline, where the pairs' blocks stay within the wave (the M tiles'
# count rounded up to whole pairs): B's tile is then read from the L2 once per pair, what
# rows off a sector are short of (``off_sector_pair``'s evidence). On the H200 (bench_gemm,
# CUPTI), where both ran in one record with the pairs within a wave of at least
# ``OFF_SECTOR_PLAIN_WAVE`` of one, the pairs ran faster on all five shapes measured so:
# both whose pick is that grid (3296x1344x2920 fp16 1.152x, 0.964x torch against 0.837x,
# and 3688x1048x1896 bf16 1.092x, reports/wave_rows_h200.jsonl), 1784x2144x1688 bf16
# (1.108x, reports/mid_train_h200.jsonl), and two in other 192-row widths (1128x3624x3688
# bf16, 192x176: 1.27x; 1024x3376x2824 fp16, 192x160: 1.18x). Where the rounding took
# the pairs past the wave they lost (1312x2792x1832 bf16, 192x160: 126 tiles in 144
# blocks, 0.66x), under 0.9 of a wave too (1416x1848x3720 bf16, 80 tiles: 0.98x), and with
# K's rows on a sector on all seven NT shapes measured so (0.94-0.98x). On eight NT
# shapes drawn after the rule among those it changes (random.Random(20261220),
# reports/plain_pair_check_h200.jsonl) the pairs ran faster on all eight, 1.053-1.203x,
# median 1.124x (3456x1160x2952 bf16 0.910x torch against 0.756x; 1888x2496x3144 fp16
# 0.967x against 0.851x). It changes no off-table list's pick.


def off_sector_plain_pair(shape: GemmShape, config: GemmConfig, sms: int) -> GemmConfig:
    """``OFF_SECTOR_PLAIN_PAIR`` in place of ``off_sector_square``'s plain 192x192 grid in
    NT where K's rows are off a sector and its pairs' blocks make at most a wave of
    ``sms``; ``config`` elsewhere or where the form does not build."""
    if narrow_fits(shape) or config != _fitted(192, 192) or not plain_pairs_fit(shape, sms):
        return config
    form = OFF_SECTOR_PLAIN_PAIR
    return form if builds(shape, form) else config


def plain_pairs_fit(shape: GemmShape, sms: int) -> bool:
    """Whether ``off_sector_plain_pair`` may run ``shape``'s 192x192 grid in pairs: NT,
    and the pairs' blocks (M tiles rounded up to whole pairs) make at most a wave."""
    return shape.layout == "NT" and grid_blocks(shape, OFF_SECTOR_PLAIN_PAIR) <= sms


# In NN where both operands' rows are off a sector (K and N times 2 bytes 16 past one),
# 256x128 tiles in stream-K over two-block clusters sharing A's tile (multicast "a",
# ``kernels.schedules.Units``) take the place of ``off_sector_square``'s 192x192 stream-K.
# On the H200 (bench_gemm, CUPTI), on sixteen shapes whose pick was that stream-K with
# B's rows off a sector (random.Random(20261214), reports/sk_pairs_h200.jsonl), the rule
# was read off the first two of each dtype and layout and checked on the other two. In
# NN it ran faster on all four it was read from, 1.024-1.181x (1264x4040x1080 fp16 0.793x
# torch against 0.672x), and on three of the four it was checked on, 1.030-1.115x
# (2568x1752x1560 fp16 0.783x against 0.702x; 3088x3032x2488 bf16 0.997x); also on
# 3800x1576x1592 fp16 (reports/sk_clusters_h200.jsonl: 39.4 us against 42.1). On eight
# NN shapes drawn after the rule among those it changes (random.Random(20261215),
# reports/nn_clusters_check_h200.jsonl) it ran faster on all eight, 1.039-1.163x, median
# 1.122x (1264x3896x2472 fp16 0.826x torch against 0.710x); in the off-sector list's
# record 3800x1576x1592 went from 0.805-0.808x torch (two runs before it) to 0.854x. In
# NT no clusters form won steadily (1296x3592x1640 bf16: all three 0.78x the pick), and
# in NN with B's rows on a sector it lost (1392x3344x2344 fp16: 43.6 us against 41.6), so
# the rule keeps to NN with both off. cuBLAS ran two-block clusters on 11 of the
# off-sector list's 12 shapes (benchmarks.torch_kernels,
# reports/torch_kernels_offsector_h200.json).
OFF_SECTOR_NN_CLUSTERS = GemmConfig(
    256, 128, 64, 256, 3, smem_epilogue=True, async_mma=True, multicast="a"
)


def off_sector_nn(shape: GemmShape, config: GemmConfig, sms: int) -> GemmConfig:
    """``OFF_SECTOR_NN_CLUSTERS`` in stream-K over the most whole two-block clusters that
    ``sms`` SMs hold, in place of ``off_sector_square``'s stream-K in NN where B's rows
    are off a sector too; ``config`` elsewhere or where the form does not build."""
    if (
        shape.layout != "NN"
        or row_bytes(shape)["B"] % SECTOR_BYTES == 0
        or config != replace(LARGE_STREAM_K, stream_k=sms)
    ):
        return config
    form = _replaced(OFF_SECTOR_NN_CLUSTERS, stream_k=sms - sms % 2)
    return form if form is not None and builds(shape, form) else config


# A pair's grid of more than one wave (``PAIRED_TILE``, ``NARROW_PAIR_TILE``: two-block
# clusters sharing B, picked where B's rows are off a sector) runs in its persistent form
# of clusters (``kernels.schedules.Units``: one cluster a pair of tiles per trip), as
# first-use tuning tries it (``FORMS``' "clusters"): a plain grid's second wave starts
# each block's pipeline afresh, where a persistent cluster loads its next pair's first K
# steps under its last pair's write-back. Read off first-use tuning (3168x1560x3648 bf16:
# 60.8 us against 69.7 for the plain pair). On the H200 (bench_gemm, CUPTI): on twelve NN
# shapes drawn after it whose pick was a plain pair over 1.3 waves or more of 128x192
# tiles (reports/offtable_pair_forms_shapes.json, random.Random(20261210);
# reports/pair_forms_h200.jsonl) the clusters form ran faster on 11, 1.035-1.129x in
# kernel time (3040x1912x2528 fp16 0.994x torch against 0.892x, 3592x2984x1760 bf16
# 0.938x against 0.843x), and lost at one wave exactly (2800x1464x1104 fp16, a tile per
# SM: 0.937x against 0.947x), where a block has no second tile to overlap; on the eleven
# other recorded shapes whose pick it changes (reports/pair_clusters_h200.jsonl, 1.7-6.1
# waves, NN and NT) it ran faster on all, 1.007-1.161x (2760x3640x1056 fp16 0.859x
# against 0.740x, 3000x5000x7000 bf16 0.924x against 0.918x); and on six NT shapes with
# K off a sector drawn later (random.Random(20261211), reports/b_off_forms_h200.jsonl)
# faster than the plain pair in panels on all six, 1.03-1.12x (3600x3152x1144 fp16 0.904x
# against 0.804x). On eight NN shapes of that draw whose pick was not a pair (B's rows off
# a sector, A's on) the clusters forms lost to the pick (1648x2760x3344 fp16: 0.589x and
# 0.738x against 0.850x for 128x256 stream-K), so the rule keeps to pairs.
PAIR_CLUSTERS = {(128, 256): PAIRED_TILE, NARROW_WIDE: NARROW_PAIR_TILE}
PAIR_CLUSTERS_WAVES = 1


def clustered_pair(shape: GemmShape, config: GemmConfig, sms: int) -> GemmConfig:
    """The persistent clusters form (``form_of(..., "clusters")``) of a plain pair grid
    of ``PAIR_CLUSTERS``' tiles whose output tiles make more than ``PAIR_CLUSTERS_WAVES``
    waves on ``sms`` SMs; ``config`` elsewhere or where the form does not build."""
    tile = PAIR_CLUSTERS.get(tile_of_c(config))
    if (
        tile is None
        or config.multicast != tile.multicast
        or config.persistent
        or config.stream_k
        or output_tiles(shape, *tile_of_c(config)) <= PAIR_CLUSTERS_WAVES * sms
    ):
        return config
    form = form_of(tile, "clusters", sms)
    return form if form is not None and builds(shape, form) else config


# A pair's persistent clusters form whose last trip leaves most clusters idle (its pairs
# over the clusters just past a whole number of trips) runs as stream-K over the same
# clusters instead (kernels.schedules.Units: the pairs of the whole trips data-parallel,
# the K steps of the rest shared out). Over the H200's records (bench_gemm, CUPTI), where
# both forms of a pair tile of ``PAIR_CLUSTERS`` ran in one record at two trips or more,
# the stream-K form ran faster on all 20 whose trips were under ``PAIR_TRIP_FILL`` full,
# 1.064-1.407x (1560x3480x2408 fp16, 133 pairs of 128x192 on 66 clusters, three trips
# 0.67 full: 54.8 us against 65.9, reports/random2_forms_h200.jsonl; 1128x3624x3688 NT
# bf16 in 128x256 pairs, 0.57 full: 57.9 against 81.5), and on none of the seven 0.80
# full or more (2232x3384x2048 NT bf16 in 128x256 pairs, 0.95 full: 53.8 us against
# 46.6; 3168x1560x3648 bf16 in 128x192 pairs, 0.89 full: 63.9 against 61.3); between,
# 2096x2728x1304 NT fp16 in 128x256 pairs, 0.75 full, ran 0.96x in stream-K in both
# records that have it, and 3800x1576x1592 fp16, 0.80 full, level. Checked on eight
# shapes drawn after the rule among those it changes (Random(20261217),
# reports/pair_trips_check_h200.jsonl): stream-K faster on all eight, 1.204-1.331x
# (2056x3840x3576 NT bf16 in 128x256 pairs, 0.68 full: 0.874x torch against 0.657x;
# 3608x1544x3800 fp16 in 128x192 pairs, 0.68 full: 0.974x against 0.753x). A later
# sweep (reports/random4_forms_h200.jsonl) added one more of each side: 2344x3384x2672
# fp16 in 128x256 pairs, 0.71 full, 1.18x in stream-K; and the first shape 0.80 full or
# more where stream-K won, 3792x2728x2256 fp16 in 128x256 pairs, 0.83 full: 75.0 us
# against 81.5 (two others there, 0.81 and 0.83 full, ran 0.98x and 0.96x). Stream-K's
# own panel (reports/fixup_h200.jsonl, 12 mid shapes) added eight more at 0.76-0.89 full,
# five of them faster in stream-K (2824x3368x3744 fp16 in 128x192 pairs, 0.82 full:
# 1.12x): between 0.75 and 0.90 full the two forms run level at the median (18 pairs,
# 0.95-1.16x); at 0.90 full or more the clusters won all ten.
PAIR_TRIP_FILL = 0.75


def pair_trips(shape: GemmShape, form: GemmConfig) -> tuple[int, int]:
    """The pairs of a clusters ``form`` (persistent, two-block clusters) and the trips its
    clusters take over them: the most pairs one cluster runs."""
    units = Units.of(shape, form).count
    return units, -(-units // (form.persistent // 2))


def streamed_pair(shape: GemmShape, config: GemmConfig, sms: int) -> GemmConfig:
    """The stream-K form of a pair's persistent clusters ``config`` (a ``PAIR_CLUSTERS``
    tile over ``sms``' whole clusters) whose trips are under ``PAIR_TRIP_FILL`` full;
    ``config`` elsewhere or where the form does not build."""
    tile = PAIR_CLUSTERS.get(tile_of_c(config))
    if tile is None or config != form_of(replace(tile, swizzle=config.swizzle), "clusters", sms):
        return config
    units, trips = pair_trips(shape, config)
    if units / (trips * (config.persistent // 2)) >= PAIR_TRIP_FILL:
        return config
    form = _replaced(config, persistent=0, stream_k=config.persistent)
    return form if form is not None and builds(shape, form) else config


# The operands exchanged on the hand-written pipeline (``GemmConfig.swap_ab``, C^T =
# op(B)^T A^T): 256 columns of C on the wgmma's M side and 144-192 rows of C on its N
# side, so the tile steps along M by 16 rows, as cuBLAS cuts its large tiles to whole
# waves (reports/profile_random4_h200.md: 3792x2728x2256 in 256x160, 264 tiles, two
# waves). Persistent over every SM, in 3 stages with the C tile staged in halves of 128
# columns (``GemmConfig.c_parts``). On the H200 (bench_gemm, CUPTI, against torch.matmul
# in one run; reports/exchanged_forms_h200.jsonl, 20 mid shapes below 0.93x torch in the
# off-table lists), where its tiles make at most ``EXCHANGED_MAX_TRIPS`` trips within
# ``EXCHANGED_MAX_FIT`` of an even share of C: against a stream-K pick it ran faster on
# all 8 (2096x2728x1304 NT fp16 0.974x torch against 0.751x, 1648x3520x2024 fp16 1.022x
# against 0.817x, 3016x3504x3832 fp16 0.917x against 0.876x); against the pairs'
# persistent clusters, which covered 1.13-1.36x its area a trip, on all 6 (3792x2728x2256
# fp16 0.908x against 0.812x, 3896x2392x1184 bf16 0.841x against 0.823x). So it runs at
# about 0.96 of their pace per area covered (``EXCHANGED_PACE``). In 256x128 tiles, whose
# trips fit worse, it lost (2336x2776x2160 bf16 0.713x against 0.861x). On eight shapes
# measured after the rule (reports/exchanged_check_h200.jsonl) it ran faster on all, 1.02-
# 1.12x (1160x3888x1768 NT bf16, drawn with random.Random(20261224), 0.836x against 0.748x).
#
# A plain unsplit grid of TileLang's pipeline gives way to it alike where the form's trips
# cover at most ``EXCHANGED_PLAIN_PACE`` times the pick's area, but for 192x192 in three
# warpgroups (``EXCHANGED_PLAIN_KEEPS``), the tile of the best pace per SM slot. On the
# H200 1400x3616x3216 NT bf16 ran 48.3 us in 256x176 against 55.3 for 128x160
# (exchanged_forms_h200.jsonl, fit 1.17 against 1.07). On an H100 (bench_gemm, CUPTI;
# reports/h100/exchanged_plain_h100.jsonl, the thirteen earlier shapes it changed as
# first written, and exchanged_plain_check_h100.jsonl, ten drawn after, before any was
# measured) it ran faster than every other tile on all ten, 1.02-1.35x, median 1.18x
# (2216x2704x1808 NT bf16 in 256x192 33.5 us against 45.3 for 192x128), and against
# 192x192 it lost on eleven of thirteen, 0.81-1.23x, median 0.96x: the exclusion is
# read from those two panels. On ten shapes drawn after it, before any was measured
# (exchanged_plain_check2_h100.jsonl), the H100 ran the form faster on all ten,
# 1.04-1.50x, median 1.16x; the H200 has yet to run that list.
EXCHANGED_ROWS = (144, 160, 176, 192)
EXCHANGED_MAX_TRIPS = 2
EXCHANGED_MAX_FIT = 1.2
EXCHANGED_PACE = 0.96
EXCHANGED_PLAIN_PACE = 1.1
EXCHANGED_PLAIN_KEEPS = ((192, 192),)


def trips_of(shape: GemmShape, config: GemmConfig, sms: int) -> int:
    """Tiles the busiest SM computes under ``config``: its trips over a persistent grid
    (a cluster's pairs in clusters), its waves otherwise (stream-K: its whole tiles'
    waves, rounded up)."""
    if config.persistent and config.multicast in ("a", "b"):
        return pair_trips(shape, config)[1]
    if config.persistent:
        return -(-output_tiles(shape, *tile_of_c(config)) // config.persistent)
    return waves(shape, config, sms)


def fit(shape: GemmShape, config: GemmConfig, sms: int) -> float:
    """The output area the busiest SM covers (``trip_area``) over an even share of C
    among ``sms`` SMs: 1.0 where the tiles divide C and fill whole waves."""
    return trip_area(shape, config, sms) * sms / (shape.m * shape.n)


def exchanged_forms(shape: GemmShape, sms: int, multicast: str = "") -> list[GemmConfig]:
    """The exchanged tile (256 columns of C by each of ``EXCHANGED_ROWS`` rows, two
    warpgroups of 128 columns each, 3 stages) persistent over ``sms`` SMs, alone or in
    ``multicast``'s two-block clusters, in the rows where it builds for ``shape``."""
    forms = [
        GemmConfig(
            256,
            rows,
            64,
            256,
            3,
            policy="row",
            smem_epilogue=True,
            persistent=sms,
            async_mma=True,
            swap_ab=True,
            multicast=multicast,
        )
        for rows in EXCHANGED_ROWS
    ]
    return [c for c in forms if builds(shape, c)]


def exchanged_form(shape: GemmShape, sms: int) -> GemmConfig | None:
    """``exchanged_forms``' tile alone in the rows whose trips fit best (the fewest rows
    of a tie); None where it builds in none."""
    return min(exchanged_forms(shape, sms), key=lambda c: fit(shape, c, sms), default=None)


def exchanged_fitting(shape: GemmShape, sms: int) -> GemmConfig | None:
    """``exchanged_form`` where its tiles make at most ``EXCHANGED_MAX_TRIPS`` trips
    within ``EXCHANGED_MAX_FIT`` of an even share; None elsewhere."""
    form = exchanged_form(shape, sms)
    if form is None or trips_of(shape, form, sms) > EXCHANGED_MAX_TRIPS:
        return None
    return form if fit(shape, form, sms) <= EXCHANGED_MAX_FIT else None


def exchanged(shape: GemmShape, config: GemmConfig, sms: int) -> GemmConfig:
    """``exchanged_fitting``'s form in place of a pick on the hand-written pipeline where
    the pick is a stream-K grid or covers ``1 / EXCHANGED_PACE`` more area a trip, and
    in place of a plain unsplit grid of TileLang's pipeline (not of
    ``EXCHANGED_PLAIN_KEEPS``' tiles) where the form covers at most
    ``EXCHANGED_PLAIN_PACE`` times its area; ``exchanged_reach`` elsewhere."""
    plain = (
        not (config.async_mma or config.persistent or config.stream_k)
        and config.split_k == 1
        and (config.block_m, config.block_n) not in EXCHANGED_PLAIN_KEEPS
    )
    if config.swap_ab or not (config.async_mma or plain):
        return config
    form = exchanged_fitting(shape, sms)
    pace = EXCHANGED_PACE if config.async_mma else EXCHANGED_PLAIN_PACE
    if form is not None and (
        config.stream_k or fit(shape, form, sms) <= pace * fit(shape, config, sms)
    ):
        return exchanged_pair(shape, form, sms)
    return exchanged_reach(shape, config, sms)


# The exchanged form in two-block clusters of two M tiles sharing B's tile (``multicast``
# "b" on its persistent grid: B's 256 columns multicast, each block its own rows of A),
# where the pairs take no more trips than the tiles alone. Profiled on an H100 (Nsight
# Compute, reports/h100/profile_exchanged_pairs_h100.md), 4080x1224x3640 NT fp16 in
# 256x160 ran 55.9 us in pairs against 68.7 alone (torch.matmul 53.4), the tensor pipe
# busy 77.9% of the time against 61.4%, at 74.2% of the L2's throughput against 82.7%.
# Timed on an H100 (bench_gemm, CUPTI; reports/h100/exchanged_pairs_h100.jsonl, nine
# shapes where the exchanged pick ran below 0.95x torch): on the eight whose pairs keep
# the trips, faster on all eight, 1.08-1.40x (3968x2448x3416 NT fp16 0.969x torch against
# 0.694x); on the one where the pairs double them, 0.56x. Pairs sharing A's tile ("a")
# ran slower than those sharing B's on every shape where both kept the trips. On the ten
# shapes drawn before any was measured (exchanged_pairs_check_h100.jsonl, timed in the
# same call and read beside it, so not a clean check), the rule changed eight: five
# faster, 1.00-1.24x, three slower, 0.977-0.984x (where the pick already ran 0.96-1.38x
# torch); it left the two whose pairs would take two trips, where they ran 0.57x and
# 0.65x. On ten shapes drawn after the rule, before any was measured (random.Random(
# 20261208), exchanged_pairs_check2_h100.jsonl), the pairs ran faster than the form alone
# on nine, 1.004-1.322x, median 1.17x (3376x2968x2408 bf16 0.998x torch against 0.755x),
# and 2.5% slower on 3752x1248x1992 fp16. The H200 has yet to run any of these lists.
EXCHANGED_PAIR = "b"


def exchanged_pair(shape: GemmShape, form: GemmConfig, sms: int) -> GemmConfig:
    """``form`` (the exchanged persistent tile) in ``EXCHANGED_PAIR``'s two-block clusters
    where they take no more trips over ``sms`` SMs; ``form`` elsewhere."""
    pair = _replaced(form, multicast=EXCHANGED_PAIR)
    if pair is None or not builds(shape, pair):
        return form
    return pair if trips_of(shape, pair, sms) <= trips_of(shape, form, sms) else form


# Where the form alone does not take the pick (``exchanged``), its pairs sharing B's tile
# may: they cover the same area a trip at a faster pace than the form alone, so the pace
# rule read from the form alone (``EXCHANGED_PACE``) left them out. Timed on an H100
# (bench_gemm, CUPTI; reports/h100/exchanged_reach_h100.jsonl: twelve shapes drawn where
# the pick is not exchanged and the pairs fit, random.Random(20261209), the pick against
# the pairs in each of the form's rows), the pairs in the rows whose trips fit best were
# the fastest of the four rows on eleven of twelve (a tie of 1.4% on the twelfth). Against
# a pick on the hand-written pipeline (128x192 persistent, alone or in clusters, and
# 128x256 in persistent clusters) whose trips cover the same area or more, they ran faster
# on eight of nine, 1.009-1.143x, median 1.10x (2872x2984x3160 fp16 0.967x torch against
# 0.848x), and 0.959x on 2992x3040x2048 NT bf16. Against TileLang's own 128x256 grid,
# covering 1.125 its area, they ran 1.126x and 0.938x, and against 192x192 (the tile of
# ``EXCHANGED_PLAIN_KEEPS``) at the same area 0.908x: those stay out. So the pairs take a
# pick on the hand-written pipeline, but 192x192, where their trips cover at most
# ``EXCHANGED_PAIR_PACE`` times its area. On twelve shapes drawn after the rule, before
# any was measured (random.Random(20261210), reports/h100/exchanged_reach_check_h100.jsonl),
# the new pick ran faster than the old on eleven, 1.013-1.254x, median 1.11x (3240x1768x2888
# bf16 1.179x torch against 0.940x), and 0.991x on 2664x3192x1104 fp16; on the nine H200
# off-table rows whose pick it changes (reach_changed_h100.jsonl, chosen from results)
# seven faster, 1.05-1.26x, one level, 0.963x on 3584x2560x2048 NT bf16. The H200 has yet
# to time any of them.
# Tried and left out: the exchanged form in 256 columns by 128 rows (128x256's own tile)
# in those pairs, against the 128x256 picks. On an H100 (reports/h100/exchanged_wide_h100.
# jsonl, seventeen H200 off-table rows of 128x256 picks) it ran level with 128x256 in
# persistent clusters, 0.98-1.03x on eleven, and against TileLang's 128x256 1.158x on
# 2616x2896x2576 bf16 but 0.950x on 2048^3 fp16: at the same area a trip the pairs gain
# on 128x192's tiles, not on 128x256's.
EXCHANGED_PAIR_PACE = 1.0


def exchanged_reach(shape: GemmShape, config: GemmConfig, sms: int) -> GemmConfig:
    """``exchanged_forms`` in ``EXCHANGED_PAIR``'s clusters, in the rows whose trips fit
    best within ``EXCHANGED_MAX_TRIPS``, in place of a pick on the hand-written pipeline
    (not exchanged, not stream-K, not of ``EXCHANGED_PLAIN_KEEPS``' tiles) whose
    trips cover ``1 / EXCHANGED_PAIR_PACE`` of their area or more; ``config`` elsewhere."""
    if (
        not config.async_mma
        or config.swap_ab
        or config.stream_k
        or (config.block_m, config.block_n) in EXCHANGED_PLAIN_KEEPS
    ):
        return config
    pairs = [
        c
        for c in exchanged_forms(shape, sms, EXCHANGED_PAIR)
        if trips_of(shape, c, sms) <= EXCHANGED_MAX_TRIPS
    ]
    best = min(pairs, key=lambda c: fit(shape, c, sms), default=None)
    if best is None or fit(shape, best, sms) > EXCHANGED_PAIR_PACE * fit(shape, config, sms):
        return config
    return best


# Tried and left out: under a wave of 128x192 tiles in NN, the operands exchanged,
# persistent, in tiles of 96-192 rows by 64-192 columns that fit one trip (the least area
# a trip). On the H200 (bench_gemm, CUPTI; reports/one_wave_forms_h200.jsonl, the NN
# shapes of the under-a-wave list) they ran 1.06-1.19x faster than the plain 128x192 pick
# on three of four (1056x1856x1624 bf16 0.985x torch against 0.830x in 192x96 tiles) and
# 0.98x on the fourth; on four shapes drawn after (reports/rules_check_h200.jsonl,
# rules_check_shapes.json) 1.127x and 1.018x faster, 0.974x and 0.868x slower
# (1488x1552x2704 fp16 in 128x160: 0.746x torch against 0.860x). Five of eight, median
# 1.04x: not steady enough for a rule. Where the pick is 128x192's pair, the form ran
# 1.49x faster on 1632x1816x3520 fp16 and 0.85-0.87x on two others.


# Under a wave of 128x192 tiles in NN where A's rows start off a 32-byte sector and B's
# do not (``narrow_fits`` false: the plain 128x192 grid on TileLang's pipeline takes such
# shapes as under a wave), two forms take the plain grid's place (``nn_exchanged``).
# For K under ``NN_SHARED_MIN_K``: the operands exchanged, persistent, in the tile of 192
# columns by ``NN_EXCHANGED_ROWS`` rows of C that covers the least area in one trip
# (``nn_exchanged_form``), as cuBLAS runs such shapes (1432x1888x2568 bf16 in 192x112
# tiles, 130 of them: reports/torch_kernels_underwave_h200.json). It is the left-out form
# above, kept to the rows where it ran faster. On the H200 (bench_gemm, CUPTI), as first
# written for every K: fitted to one_wave_forms_h200.jsonl and rules_check_h200.jsonl,
# faster on four of six, median 1.07x (1056x1856x1624 bf16 13.2 us against 15.6); on ten
# shapes drawn after it, before any was measured (reports/offtable_nn_exchanged_check_
# shapes.json, nn_exchanged_check_h200.jsonl), eight faster, median 1.075x, two level
# (0.976x, 0.985x, both K of 2000 or more); the six of them with a shorter K all faster,
# 1.014-1.246x (912x2432x1192 bf16 10.9 us against 13.6). With 128 columns (t256) it lost
# 0.79x on 2520x928x3272 bf16 on an H100, and with 192 columns where they make five column
# tiles (N up to 960) 0.90x on that shape and 0.99x on 2256x944x1640 fp16 on the H200
# (nn_exchanged_fit_h200.jsonl): those stay out (``NN_EXCHANGED_MIN_COLUMN_TILES``).
# For K of ``NN_SHARED_MIN_K`` or more the loads of A's tiles, off a sector, set the pace,
# and 128x192 in clusters that share A's tile takes the place instead: four blocks (two M
# tiles by two N tiles) where their grid stays within ``QUAD_FILL`` of the SMs, else two N
# tiles sharing A's tile. On an H100 (reports/h100/nn_share_a_*_h100.jsonl, the shapes
# above) that pick ran 0.99-1.30x of the exchanged form on the seven with K of 2000 or
# more, five faster by 1.02x or more (2336x976x3800 bf16 36.1 us against 46.8), and
# trailed it on all nine with K of 1720 or less; on ten shapes drawn after
# (reports/offtable_nn_shared_check_shapes.json, reports/h100/nn_shared_check_h100.jsonl)
# it ran faster than the plain grid on nine, median 1.17x, 0.97x on the tenth. The H200
# has timed it on one shape of the branch (reports/nn_plain_h200.jsonl: 1240x2240x3720
# bf16, 33.5 us against 36.5).
NN_EXCHANGED_COLUMNS = 192  # of C, the wgmma's M side: three consumer warpgroups
NN_EXCHANGED_ROWS = (96, 112, 128)
NN_EXCHANGED_STAGES = (6, 5, 4, 3)
NN_EXCHANGED_MIN_COLUMN_TILES = 6
NN_SHARED_MIN_K = 2000


def nn_exchanged_form(shape: GemmShape, sms: int) -> GemmConfig | None:
    """The exchanged tile of ``NN_EXCHANGED_COLUMNS`` columns, persistent over ``sms``
    SMs, in the fewest of ``NN_EXCHANGED_ROWS`` rows whose output tiles fit one trip
    (the least area), in the most of ``NN_EXCHANGED_STAGES`` that build; None where
    none fits."""
    for rows in NN_EXCHANGED_ROWS:
        if output_tiles(shape, rows, NN_EXCHANGED_COLUMNS) > sms:
            continue
        for stages in NN_EXCHANGED_STAGES:
            form = _valid(
                block_m=NN_EXCHANGED_COLUMNS,
                block_n=rows,
                block_k=64,
                threads=3 * WARPGROUP,
                num_stages=stages,
                policy="row",
                smem_epilogue=True,
                persistent=sms,
                async_mma=True,
                swap_ab=True,
            )
            if form is not None and builds(shape, form):
                return form
    return None


def nn_exchanged(shape: GemmShape, config: GemmConfig, sms: int) -> GemmConfig:
    """In place of the plain, unsplit 128x192 grid on TileLang's pipeline under a wave
    in NN, where A's rows start off a sector and B's do not and N makes
    ``NN_EXCHANGED_MIN_COLUMN_TILES`` tiles of the exchanged form's columns or more: for
    a K of ``NN_SHARED_MIN_K`` or more, 128x192 in four-block clusters within
    ``QUAD_FILL`` of ``sms``, else in pairs sharing A within a wave; for a shorter K, or
    where neither fits, ``nn_exchanged_form`` where it covers no more area a trip;
    ``config`` elsewhere."""
    rows = row_bytes(shape)
    if (
        shape.layout != "NN"
        or config != replace(TILES[2].config, swizzle=0)  # 128x192, as ``unpanelled`` left it
        or rows["A"] % SECTOR_BYTES == 0
        or rows["B"] % SECTOR_BYTES != 0
        or not under_a_wave(shape, sms)
        or -(-shape.n // NN_EXCHANGED_COLUMNS) < NN_EXCHANGED_MIN_COLUMN_TILES
    ):
        return config
    if shape.k >= NN_SHARED_MIN_K:
        quad = quad_form(NARROW_WIDE[1])
        pair = replace(NARROW_PAIR_TILE, swizzle=0, multicast="a")
        for form, bound in ((quad, QUAD_FILL * sms), (pair, sms)):
            if grid_blocks(shape, form) <= bound and builds(shape, form):
                return form
    form = nn_exchanged_form(shape, sms)
    if form is None or fit(shape, form, sms) > fit(shape, config, sms):
        return config
    return form


# Panels (``GemmConfig.swizzle``) order a grid's blocks so that the tiles of one wave
# share rows of A and columns of B in the L2; a grid of ``FEW_WAVES`` waves or fewer runs
# its tiles all at once or nearly, and gained nothing from the order. Over the H200's
# recorded sweeps and first-use candidates (reports/*.jsonl, offtable_*first_use_h200.json)
# 46 of 57 plain or paired grids of two waves or fewer ran slower in panels than the same
# config without them in the same record: median 1.017x the latency, up to 1.135x
# (2288x1368x3248 bf16, 192x128 tiles, one wave); the exceptions ran 0.897x
# (1776x1472x4088 bf16, 192x128 in 3 stages, panels of 16), 0.932x (1056x1896x2904 NT
# bf16, 128x192, A's rows off a sector) and 0.97-0.999x. (Before the sweeps of
# reports/pair_forms_h200.jsonl, pair_clusters_h200.jsonl and b_off_forms_h200.jsonl,
# where 21 of 28 ran slower in panels: 25 of 29, 1.022x.)
FEW_WAVES = 2

# But in NN where A's rows start off a 32-byte sector (``narrow_fits`` false), 128x256's
# plain grid on TileLang's pipeline keeps panels of ``A_OFF_PANEL`` tile rows: on an H100
# (bench_gemm, CUPTI; reports/h100/nn_a_off_plain_h100.jsonl, ten such shapes drawn before
# any was measured, 0.7-1.9 waves) panels of 4 ran faster on eight, 0.896-0.986 of the
# latency without them (3184x2416x3896 fp16 0.901, 1064x3120x1896 fp16 0.896), and 1.006
# and 1.019 on the two others, both under 0.9 of a wave; after 1488x1936x2280 bf16 ran
# 0.760x torch without them (reports/h100/offtable_random12_h100.json). On ten shapes drawn
# after the rule (a_off_panel_check_h100.jsonl) faster on all ten, 1.002-1.099x, median
# 1.047x; panels of 8 and 16 ran within 0.97-1.08 of 4's latency. The H200 has yet to time
# 128x256 there; its plain 128x192 grids in that class (B's rows on a sector) ran at
# 0.864-1.013 of the latency without panels, median 1.006 (five pairs on four shapes).
A_OFF_PANEL = 4


def unpanelled(shape: GemmShape, config: GemmConfig, sms: int) -> GemmConfig:
    """``config`` without panels where it is a plain or paired grid (not persistent, not
    stream-K: those order their tiles themselves) of ``FEW_WAVES`` waves or fewer; in
    panels of ``A_OFF_PANEL`` where it is 128x256's plain grid in NN with A's rows off a
    sector."""
    if (
        config.swizzle
        and not (config.persistent or config.stream_k)
        and waves(shape, config, sms) <= FEW_WAVES
    ):
        bare = replace(config, swizzle=0)
        if A_OFF_PANEL and a_off_wide(shape, bare):
            return replace(config, swizzle=A_OFF_PANEL)
        return bare
    return config


def a_off_wide(shape: GemmShape, config: GemmConfig) -> bool:
    """Whether ``config`` is 128x256's plain grid as the scores give it (``TILES[0]``,
    without panels) and ``shape`` NN with A's rows off a sector."""
    return (
        shape.layout == "NN"
        and not narrow_fits(shape)
        and config == replace(TILES[0].config, swizzle=0)
    )


# In NT under a wave, 128x160's pair sharing B in 5 stages in place of 128x192's, where
# 128x160 pads N less by ``NT_NARROW_MIN_PAD`` of N or more and its pair grid still fits
# a wave: the blocks then split the output more finely with no more of it wasted. In NT
# B's rows are K steps of 128 bytes whatever the width (in NN a width of 160 loses TMA's
# 128-byte swizzle, ``FITTED``). On the H200 (reports/one_wave_forms_h200.jsonl) it ran
# 1456x1544x1704 bf16 in 17.4 us against 18.7 and 1496x1576x1992 bf16 in 19.8 against
# 20.8, and lost where it pads N no less (1080x1800x1560 fp16, 20.2 against 17.2) or its
# pairs passed a wave (1656x1504x2184 fp16). On eight shapes drawn before any was measured
# (reports/offtable_nt_narrow_shapes.json; on an H100, reports/h100/nt_narrow_h100.jsonl,
# when no H200 could be started) it ran faster on all eight, 1.03-1.09x (1760x1224x3288
# fp16 31.5 us against 34.3), the fastest of the panel's four configs on seven (128x176's
# pair on 1968x1040x2728 bf16); the least difference in padding there, 3.0% of N
# (1832x1048x2392 bf16), is the bound. The H200 timed the same panel after
# (reports/nt_narrow_h200.jsonl): faster on seven of eight, 1.03-1.08x (1760x1224x3288
# fp16 28.1 us against 30.2), slower on 1352x1560x1624 bf16 (18.6 us against 17.9).
# Deeper pipelines alone gain nothing on these grids (reports/h100/stages_h100.jsonl).
NT_NARROW_PAIR = replace(NARROW_PAIR_TILE, block_n=160, num_stages=5, swizzle=0)
NT_NARROW_MIN_PAD = 0.03


def n_padding(shape: GemmShape, block_n: int) -> float:
    """The columns a grid of ``block_n``-wide tiles computes past N, over N."""
    return (-(-shape.n // block_n) * block_n - shape.n) / shape.n


def narrower_nt_pair(shape: GemmShape, config: GemmConfig, sms: int) -> GemmConfig:
    """``NT_NARROW_PAIR`` in place of 128x192's pair (``NARROW_PAIR_TILE`` without
    panels) in NT where that pair's grid and its own fit a wave of ``sms`` blocks and it
    pads N less by ``NT_NARROW_MIN_PAD`` or more; ``config`` elsewhere."""
    if (
        shape.layout != "NT"
        or config != replace(NARROW_PAIR_TILE, swizzle=0)
        or grid_blocks(shape, config) > sms
        or grid_blocks(shape, NT_NARROW_PAIR) > sms
        or n_padding(shape, 192) - n_padding(shape, 160) < NT_NARROW_MIN_PAD
        or not builds(shape, NT_NARROW_PAIR)
    ):
        return config
    return NT_NARROW_PAIR


# In NT, a plain grid of 128x192's or 128x160's pair sharing B gives way to clusters of
# four blocks (two M tiles by two N tiles, ``multicast`` "ab": each operand's tile read
# from the L2 once per two blocks, where the pair reads A's for every block) in the
# narrowest of ``QUAD_WIDTHS`` whose grid, both tile counts rounded up to even, stays
# within ``QUAD_FILL`` of the SMs. A GPU places a cluster's blocks within one GPC, so
# fewer four-block clusters than a quarter of the SMs run at once: on the H100 measured
# grids of up to 120 blocks (30 clusters) ran in one wave and every grid of 128 or more
# took two. Fewer output columns a block then leave no SM slot idle that the pair filled.
# On an H100 (bench_gemm, CUPTI; reports/h100/low_fill_clusters_h100.jsonl, ten NT shapes
# drawn before any was measured, 90-110 tiles of 128x192) its pick ran faster than
# 128x192's pair on all ten, 1.04-1.22x, median 1.20x (1112x1840x3416 bf16 28.8 us
# against 35.0); on twelve drawn after the rule (reports/offtable_quad_fill_shapes.json,
# reports/h100/quad_fill_h100.jsonl) it changes eight picks: six faster, 1.03-1.20x, two
# level (0.992x, 0.996x). Through offtable on that H100 the low-fill panel ran a median
# 1.033x torch, worst 0.922x (reports/h100/offtable_low_fill_h100.md), and the fresh
# panel 0.993x, worst 0.845x on a shape no width fits (1192x2440x1496 fp16, where even
# 128x192's clusters take 140 blocks). Past the bound the clusters ran 0.58-0.78x of the
# pair. 128x144 in them, where it fits with more blocks than 128x160's (an H100,
# reports/h100/quads144_h100.jsonl), ran 1.04-1.06x of 128x160's only where that had 72
# blocks or fewer and 0.96-1.00x at 80-96: it stays out. On the H200
# (reports/low_fill_quads_h200.jsonl, quad_fill_h200.jsonl, one_group_quads_h200.jsonl)
# the bound held alike: every grid of 128 blocks or more ran 0.53-0.72x of the pair. Of
# the 23 picks the rule changes there, median 1.10x: from 128x192's pair to a narrower
# width, 1.10-1.18x on all ten; to 128x192's own clusters, level, 0.98-1.04x (five);
# from 128x160's pair 0.99-1.11x; from 128x128 0.95-1.32x. Their persistent form, a
# block per SM (33 clusters), lost to the pair there (reports/nt_quads_h200.jsonl).
# The one-warpgroup 128x128 pick (``TILES[3]`` without panels) gives way alike: on the
# H100 (reports/h100/one_group_quads_h100.jsonl, the NT five of the ten shapes drawn for
# that tile) 1.03-1.37x faster on all five (1472x1352x3752 fp16 31.2 us against 42.8);
# in NN, which the rule leaves alone, 0.86-1.06x; and on eight NN shapes drawn where the
# pick was plain 128x192, 128x192's clusters lost on six, 0.88-0.90x
# (reports/h100/nn_plain_h100.jsonl). Tried and left out: 128x208, wider than the pair,
# where no narrower width fits and the pair's grid is just past the bound (up to a block
# per SM). On the H200 (reports/wide_quads_h200.jsonl, drawn before any was measured)
# 0.96-1.10x of the pair on six shapes, five faster; on an H100 on eight drawn after
# (reports/h100/quads208_h100.jsonl) 0.98-1.11x, six faster; but on the H200 on those
# eight (reports/quads208_h200.jsonl) four faster, 0.94-1.16x, median 1.01x: not steady.
# 128x224 where 128x208 does not fit lost on two of three on the H200 (0.89x, 0.93x).
QUAD_WIDTHS = (160, 176, 192)
QUAD_FILL = 0.91  # of the SMs: 120 blocks on the H100 and the H200 measured
QUAD_PAIRS = (
    replace(NARROW_PAIR_TILE, swizzle=0),
    NT_NARROW_PAIR,
    replace(TILES[3].config, swizzle=0),
)


def quad_form(block_n: int) -> GemmConfig:
    """128 x ``block_n`` in four-block clusters on a plain grid: 4 stages from 192 columns
    (``NARROW_PAIR_TILE``'s), 5 narrower (``NT_NARROW_PAIR``'s)."""
    base = replace(NARROW_PAIR_TILE, swizzle=0) if block_n >= 192 else NT_NARROW_PAIR
    return replace(base, block_n=block_n, multicast="ab")


def nt_quads(shape: GemmShape, config: GemmConfig, sms: int) -> GemmConfig:
    """The narrowest ``quad_form`` whose grid stays within ``QUAD_FILL`` of ``sms`` in
    place of a plain grid of ``QUAD_PAIRS`` (the pairs, or 128x128 on one warpgroup) in
    NT; ``config`` elsewhere, or where no width fits."""
    if shape.layout != "NT" or config not in QUAD_PAIRS:
        return config
    for block_n in QUAD_WIDTHS:
        form = quad_form(block_n)
        if grid_blocks(shape, form) <= QUAD_FILL * sms and builds(shape, form):
            return form
    return config


def under_a_wave(shape: GemmShape, sms: int) -> bool:
    """Whether 128x192's output tiles make less than a wave on ``sms`` SMs."""
    return output_tiles(shape, *NARROW_WIDE) < sms


def narrow_pair_score(shape: GemmShape, sms: int) -> float:
    """``score`` of ``NARROW_PAIR_TILE``, unsplit, relative to the other tiles: 128x256's
    pace times ``PAIR_GAIN`` times ``NARROW_PAIR_EFFICIENCY`` per SM slot it covers; 0
    off NN unless its output tiles are under a wave (``under_a_wave``), where B's rows
    are on a sector or a load is off TMA's alignment (``pair_fits``), or where its
    output tiles are few enough to split K."""
    tiles = output_tiles(shape, 128, 192)
    if (
        (shape.layout != "NN" and not under_a_wave(shape, sms))
        or not pair_fits(shape)
        or split_for(shape, tiles, sms) > 1
        or not builds(shape, NARROW_PAIR_TILE)
    ):
        return 0.0
    value = pair_fill(shape, NARROW_PAIR_TILE, sms) / waste(shape, 128, 192)
    return PAIR_GAIN * NARROW_PAIR_EFFICIENCY * value


# --- two or three waves of 128x192 tiles: its persistent form ------------------------
#
# Where 128x192 tiles make two or three waves of blocks, the last at least
# ``NARROW_PERSISTENT_LAST_WAVE`` full, and B's rows start on a sector, their persistent
# form on the hand-written pipeline (``NARROW_PERSISTENT``, one block per SM) hides each
# block's first write-back and pipeline fill under its next tile's loads. The scores
# above, fitted to large shapes, pick other tiles there. On the H200 (bench_gemm, CUPTI,
# against torch.matmul; reports/mid_train_h200.jsonl, a sweep of forms over mid shapes
# drawn at random, and reports/mid_forms_h200.jsonl), against the rules' pick:
# 3072x1968x3232 0.998x against 0.880x (2.00 waves), 3672x1616x1632 0.948x against
# 0.866x (1.98), 2912x1872x3088 bf16 0.966x against 0.894x (1.74), 3976x2240x2608 bf16
# 1.011x against 0.980x (2.91), 3088x1616x2344 0.876x against 0.847x (1.70). Where the
# last wave is emptier it lost (1656x3184x2032 NT bf16, 1.67 waves: 0.874x against
# 0.900x; at 1.06-1.52 waves the rules' picks ran 0.94-1.10x in the off-table records),
# and where B's rows are off a sector the pairs sharing B stay (3040x2952x3840: 0.832x
# against 0.907x). On two shapes drawn after the rule (reports/mid_fresh_check_h200.jsonl):
# 3464x2352x1680 NT bf16 0.856x against 0.800x, 2632x3136x2912 NT 0.912x against 0.913x.
# Other forms swept there (stream-K and pairs of 192x192 tiles,
# 128x256's persistent form) won on some of those shapes and lost on others: scored
# together by efficiencies fitted to the sweep they lifted its median from 0.89x to
# 0.92x, but cost 8-9% on listed shapes outside it (2500x1800x4000 0.857x against 0.938x,
# 1792x1792x3072 NT bf16 0.923x against 1.011x; reports/offtable_fitted_forms_h200.json),
# so the heuristic takes none; first-use tuning tries them (``FORMS``). Where A's rows
# are off a sector too (``narrow_fits``) 192x192 won in the end: 3088x1616x2344 ran 43.3
# us in its stream-K form against 46.4 in this one (``off_sector_square``), so the rule
# asks for both operands' rows on a sector.
NARROW_PERSISTENT = GemmConfig(
    128, 192, 64, 256, 4, swizzle=8, policy="row", smem_epilogue=True, async_mma=True
)
NARROW_PERSISTENT_LAST_WAVE = 0.7
NARROW_PERSISTENT_WAVES = (2, 3)


def narrow_persistent(shape: GemmShape, sms: int) -> GemmConfig | None:
    """``NARROW_PERSISTENT`` over ``sms`` blocks where its output tiles are
    ``NARROW_PERSISTENT_WAVES`` waves, the last ``NARROW_PERSISTENT_LAST_WAVE`` full or
    more, A's and B's rows on a sector and the form builds for ``shape``; None elsewhere."""
    tiles = output_tiles(shape, *NARROW_WIDE)
    waves_of = -(-tiles // sms)
    last = tiles / sms - (waves_of - 1)
    if (
        waves_of not in NARROW_PERSISTENT_WAVES
        or last < NARROW_PERSISTENT_LAST_WAVE
        or row_bytes(shape)["B"] % SECTOR_BYTES
        or not narrow_fits(shape)
    ):
        return None
    config = replace(NARROW_PERSISTENT, persistent=sms)
    return config if builds(shape, config) else None


# --- NN rows that TMA cannot take: loads by threads ------------------------------------
#
# Where A's or B's rows in NN are not 16-byte aligned (K or N not a multiple of 8),
# TileLang loads such an operand by threads, not by TMA, and the register rule
# (``kernels.gemm.check_split_loads``) leaves out 128x256 on its pipeline where one
# operand is aligned; the scores then picked 128x128 over 128 threads. On the H200
# (bench_gemm, CUPTI, reports/split_loads_h200.jsonl) 128x256 with both operands loaded
# by cp.async (``THREAD_LOADS_TILE``, 3 stages, panels of 8) ran faster than that pick on
# four of five such shapes, 1.14-1.33x (4000x3002x3000 fp16 1.671x torch against
# 1.255x; 6410x9662x6120 bf16 1.545x against 1.167x) and 0.98x on 2500x1800x4004 fp16;
# where neither operand is aligned the scores picked 128x192 under a wave, which spills
# in its K loop there: 1707x1507x2783 fp16 ran 0.234x torch, against 1.073x for this
# tile (and 0.998x for TileLang's own 128x256). The refused tiles, timed past the rule,
# ran 0.42-0.76x of the pick. On twelve NN shapes drawn after the rule
# (reports/rules_check_shapes.json, rules_check_h200.jsonl) it ran faster than the old
# pick on ten: with one operand aligned 1.07-2.70x on five (3618x3775x2720 fp16 1.719x
# torch against 0.638x for 128x192, which spills where N is odd) and 0.967x on
# 3341x4104x1459 bf16 (median 1.17x); with neither aligned 1.004-1.041x on five, 0.994x
# on one. Where only K is unaligned TileLang's 128x192 (B by TMA) ran faster still on
# five of seven recorded shapes (3341x4104x1459 bf16 2.436x torch against 1.926x), slower
# on two (5088x6080x2516 fp16 0.91x). Below half a wave of its tiles the scores (split K)
# keep the pick.
THREAD_LOADS_TILE = GemmConfig(128, 256, 64, 256, 3, swizzle=8, smem_epilogue=True, cp_async=True)
# cp.async copies 4, 8 or 16 bytes, so where A's rows are not a whole number of
# ``CP_ASYNC_MIN_BYTES`` (K odd) TileLang 0.1.15 loads A for ``THREAD_LOADS_TILE`` by
# ordinary loads and shared-memory stores in the consumers' own K loop, a __syncthreads on
# each side, so nothing overlaps them (sm_90a source: 10 barriers against 6, and A by
# cp.async of 4 or 8 bytes where K is even). With B's rows 16-byte aligned, TileLang's
# 128x192 (``SCALAR_A_TILE``) takes B by TMA and A by its second set of threads, while the
# consumers run the wgmma (122 registers, no spills). The two recorded shapes with K odd,
# both faster in it (bench_gemm, CUPTI; reports/rules_check_h200.jsonl): 3341x4104x1459
# bf16 2.436x torch against 1.926x, 3134x6432x2617 bf16 2.470x against 2.083x. Where K is
# even the lead above was mixed (1.13x, 1.03x, 0.97x with rows of 4-byte steps, 0.91x with
# 8-byte ones), and where N is odd 128x192 spills (3618x3775x2720: 0.655x torch against
# 1.719x): the cp.async tile stays.
CP_ASYNC_MIN_BYTES = 4
SCALAR_A_TILE = GemmConfig(128, 192, 64, 256, 4, policy="row", smem_epilogue=True)


def thread_loads(shape: GemmShape, sms: int) -> GemmConfig | None:
    """``THREAD_LOADS_TILE`` in NN where A's or B's rows are not 16-byte aligned (TMA
    takes neither, or one and a second set of threads the other), its output tiles fill
    ``SPLIT_BELOW`` of the SMs or more and it builds for ``shape``; None elsewhere."""
    if shape.layout != "NN" or rows_aligned(shape):
        return None
    if output_tiles(shape, THREAD_LOADS_TILE.block_m, THREAD_LOADS_TILE.block_n) < (
        SPLIT_BELOW * sms
    ):
        return None
    return THREAD_LOADS_TILE if builds(shape, THREAD_LOADS_TILE) else None


def scalar_a(shape: GemmShape, sms: int) -> GemmConfig | None:
    """``SCALAR_A_TILE`` where ``thread_loads`` takes a shape whose A rows cp.async cannot
    copy (not a whole number of ``CP_ASYNC_MIN_BYTES``) and whose B rows TMA can, and it
    builds there; None elsewhere."""
    rows = row_bytes(shape)
    if rows["A"] % CP_ASYNC_MIN_BYTES == 0 or rows["B"] % TMA_ALIGN:
        return None
    if thread_loads(shape, sms) is None:
        return None
    return SCALAR_A_TILE if builds(shape, SCALAR_A_TILE) else None


# --- few output tiles, rows TMA cannot take: 64x64 tiles split eight or sixteen ways --
#
# Where A's or B's rows are not 16-byte aligned (K not a multiple of 8, or N in NN) and
# the output tiles are few (small M and N, long K), the heuristic's unsplit grid ran
# 0.10-0.36x torch on five of eight such shapes on the H200 (bench_gemm, CUPTI;
# reports/odd_c_split_h200.jsonl: 107x550x14088 bf16 151.6 us against 21.6 for torch):
# TileLang loads such an operand by threads, and the few blocks keep little of it in
# flight. More blocks, each a share of K, keep more: on the four shapes with rows in
# 2-byte steps (N or K odd) 64x64 tiles (``THREAD_SPLIT_TILE``) split eight ways ran
# 1.9-2.2x faster than unsplit, the best of that panel on two (312x463x13760 bf16 74.2
# us against 108.4 split four ways in 64x64x128) and within 8% of it on the other two
# (25x537x12576 fp16 62.0 against 58.0 in 64x64x128). Where B's rows come in
# 4-byte steps and A's are aligned (NN, N even), cp.async copies B, so the blocks' loads
# stay in flight across stages: split sixteen ways there (``THREAD_SPLIT_COPIES``), three
# blocks an SM, 107x550x14088 bf16 ran 20.1 us against 42.5 split eight ways without it on
# an H100 (reports/h100/odd_c_loads_h100.jsonl, the same panel); on the H200 its pick ran
# 17.7 us, 1.23x torch (benchmarks.offtable, reports/offtable_odd_c_h200.json).
# The 2-byte shapes gained nothing from it or from sixteen ways (25x537x12576: 68.6 us
# against 62.6 on the H100). Where cp.async copies every thread-loaded operand (rows in
# 4- or 8-byte steps) and eight ways would take over ``THREAD_SPLIT_MAX_BLOCKS`` blocks
# an SM, the heuristic's unsplit grid ran faster than the splits that fit (240x899x19132
# NT bf16, 60 tiles: 92.0 us against 100.2 split four ways on the H200; 339x735x21490 NT
# fp16: 129.0 against 169.1): the rule leaves those. Where rows come in 2-byte steps and
# M or N is small the split paid with fewer ways too, as many as fit (an H100, reports/h100/
# miss_panel_h100.jsonl: 11x3494x8143 NT bf16, 55 tiles, four ways 56.9 us against 118.7
# unsplit and 68.2 for torch; 8212x23x10687 NT fp16, 129 tiles, two ways 127.7 against
# 159.7 and 140.4; the H200 agreed, reports/two_byte_h200.jsonl: 55.7 us four ways against
# 67.1 for torch, 122.8 two ways against 141.0), though not for 42x1085x7498 fp16 (B's
# rows in 2-byte steps: 61.3 us split eight ways against 24.0 for torch), which the
# padded rows take (``padding_pays``, below).
THREAD_SPLIT_TILE = GemmConfig(64, 64, 64, 128, 4)
THREAD_SPLIT_COPIES = replace(THREAD_SPLIT_TILE, cp_async=True)
# (splits, for the thread-loaded tile and its cp.async form)
THREAD_SPLITS = {False: 8, True: 16}
# Blocks of 64x64 (64 KiB of shared memory in four stages, 128 threads) that share an
# SM: a split grid takes at most this many per SM over the GPU.
THREAD_SPLIT_MAX_BLOCKS = 3
# K each split keeps at least (16x127x8085 NT bf16 split eight ways: 1011).
THREAD_SPLIT_MIN_K = 512
# Where rows come in 2-byte steps and eight ways do not fit, the split takes as many as
# fit where the tiles fill under ``SPLIT_BELOW`` of the SMs (11x3494x8143 NT, 55 tiles)
# or M or N is at most this (8212x23x10687 NT, 129 tiles); wider shapes of more tiles
# (800x800, K odd: 169) have no record, and keep the rules below.
THREAD_SPLIT_NARROW = 128


def thread_grid(shape: GemmShape, sms: int) -> GemmConfig | None:
    """64x64 tiles split K ways where A's or B's rows are not 16-byte aligned: by cp.async
    in ``THREAD_SPLITS[True]`` ways where A's rows are aligned and B's come in 4-byte
    steps (NN, N even), else ``THREAD_SPLITS[False]``; fewer where the blocks would take
    over ``THREAD_SPLIT_MAX_BLOCKS`` per SM or a split under ``THREAD_SPLIT_MIN_K`` of K.
    None where no split fits; where eight ways would not fit, unless rows come in 2-byte
    steps and the tiles fill under ``SPLIT_BELOW`` of the SMs or M or N is at most
    ``THREAD_SPLIT_NARROW``; or where it does not build."""
    if rows_aligned(shape):
        return None
    rows = row_bytes(shape)
    copies = rows["A"] % TMA_ALIGN == 0 and rows["B"] % CP_ASYNC_MIN_BYTES == 0
    config = THREAD_SPLIT_COPIES if copies else THREAD_SPLIT_TILE
    tiles = output_tiles(shape, config.block_m, config.block_n)
    two_byte = any(r % CP_ASYNC_MIN_BYTES for r in rows.values())
    few = tiles < SPLIT_BELOW * sms or min(shape.m, shape.n) <= THREAD_SPLIT_NARROW
    if not (two_byte and few) and tiles * THREAD_SPLITS[False] > THREAD_SPLIT_MAX_BLOCKS * sms:
        return None
    split = THREAD_SPLITS[copies]
    while split > 1 and (
        tiles * split > THREAD_SPLIT_MAX_BLOCKS * sms or -(-shape.k // split) < THREAD_SPLIT_MIN_K
    ):
        split //= 2
    if split == 1:
        return None
    config = replace(config, split_k=split)
    return config if builds(shape, config) else None


def thread_split(shape: GemmShape, sms: int) -> GemmConfig | None:
    """``thread_grid``'s split, or ``padded_split`` in its place where ``padding_pays``."""
    config = thread_grid(shape, sms)
    if config is None or not padding_pays(shape, config, sms):
        return config
    return padded_split(shape, sms) or config


# Where rows come in 2-byte steps the threads load them two bytes at a time. Copying the
# operands whose rows TMA cannot take into zero-padded rows first (``GemmConfig.pad``)
# and running the padded shape's TMA kernel split K (``PAD_TILE``) reads and writes them
# once more, and ran faster on the H200 (bench_gemm, CUPTI, the copies' kernels summed
# with the GEMM's; reports/two_byte_h200.jsonl, fifteen shapes of the committed lists
# where ``thread_grid`` splits rows in 2-byte steps):
# - in NN on all seven where the operands in 2-byte steps hold half the elements copied
#   or more (``PAD_TWO_BYTE_SHARE``): 475x183x10976 fp16 22.0 us against 61.2,
#   312x463x13760 bf16 38.6 against 74.4, 42x1085x7498 fp16 35.6 against 60.7; not on
#   163x1022x7801 bf16 (A's 2-byte rows 14% of the copy, B's 4-byte ones the rest: 30.6
#   us on threads against 40.9 at best padded);
# - in NT (K odd, both operands) where the thread-loaded split holds under a wave of
#   blocks (``PAD_NT_WAVES``): 317x190x20041 fp16 41.0 us against 59.6, 56x498x18471
#   fp16 39.6 against 51.3, but 48x672x11501 bf16 (88 blocks: 32.8 against 31.1); over
#   a wave the threads kept ahead (11x3494x8143 bf16, 220 blocks: 55.7 us against 99.6;
#   90x1140x16327 bf16 68.7 against 76.7 at best padded; 8212x23x10687 fp16 122.8 against 288.2).
# An H100 agreed on the eight shapes of reports/offtable_pad_shapes.json
# (reports/h100/pad_h100.jsonl).
PAD_TILE = GemmConfig(64, 64, 128, 128, 6, pad=True)
PAD_TWO_BYTE_SHARE = 0.5
PAD_NT_WAVES = 1


def padding_pays(shape: GemmShape, grid: GemmConfig, sms: int) -> bool:
    """Whether ``shape``'s rows in 2-byte steps go padded rather than on ``grid``, the
    thread-loaded split: in NN where they hold ``PAD_TWO_BYTE_SHARE`` or more of the
    elements of the operands padding copies, in NT where ``grid`` holds under
    ``PAD_NT_WAVES`` waves of blocks on ``sms`` SMs."""
    rows = row_bytes(shape)
    if all(r % CP_ASYNC_MIN_BYTES == 0 for r in rows.values()):
        return False
    if shape.layout == "NT":
        return grid_blocks(shape, grid) < PAD_NT_WAVES * sms
    size = {"A": shape.m * shape.k, "B": shape.k * shape.n}
    copied = [op for op in size if rows[op] % TMA_ALIGN]
    two_byte = [op for op in copied if rows[op] % CP_ASYNC_MIN_BYTES]
    return sum(size[op] for op in two_byte) >= PAD_TWO_BYTE_SHARE * sum(size[op] for op in copied)


# Where PAD_TILE's output tiles leave room for only two splits in a wave (over a
# quarter of the SMs), 128x128 tiles split more ways (``PAD_WIDE_TILE``). On the H200
# (reports/two_byte_h200.jsonl), of the four such shapes padded there, 128x128 split
# eight ways ran faster on three: 312x463x13760 bf16, 40 tiles of 64x64, 35.4 us against
# 38.6 in 64x64 split in two; 321x541x5554 fp16, 54 tiles, 27.9 against 32.2 (an H100
# agreed: 30.1 against 34.4, reports/h100/pad_h100.jsonl); 90x1140x16327 NT bf16 76.7
# against 86.5; not on 11x3494x8143 NT bf16, 106.9 against 99.6, 28 tiles of 128x128,
# which the rule splits four ways (untimed). Threads take both NT shapes
# (``padding_pays``), so the rule changes the pick of the first two. Where 64x64 splits
# four ways or more it ran faster than 128x128 on all nine timed (264x38x18071 fp16
# 28.0 us in sixteen splits against 37.3). Checked on no shape drawn after the rule yet
# (reports/offtable_pad_wide_shapes.json is that draw).
PAD_WIDE_TILE = GemmConfig(128, 128, 64, 128, 4, pad=True)
PAD_WIDE_BELOW = 4


def padded_split(shape: GemmShape, sms: int) -> GemmConfig | None:
    """``PAD_TILE`` split K the most of ``SPLITS`` ways that keeps its blocks within one
    wave and ``THREAD_SPLIT_MIN_K`` of the padded K per split; ``PAD_WIDE_TILE`` so split
    where that leaves ``PAD_TILE`` two splits and it more; None where no split fits or
    it does not build."""
    split = _padded_ways(shape, PAD_TILE, sms)
    if 1 < split < PAD_WIDE_BELOW:
        wide = replace(PAD_WIDE_TILE, split_k=_padded_ways(shape, PAD_WIDE_TILE, sms))
        if wide.split_k > split and builds(shape, wide):
            return wide
    if split == 1:
        return None
    config = replace(PAD_TILE, split_k=split)
    return config if builds(shape, config) else None


def _padded_ways(shape: GemmShape, tile: GemmConfig, sms: int) -> int:
    """``most_splits`` of ``tile``'s grid on ``shape`` padded, ``THREAD_SPLIT_MIN_K`` of
    the padded K per split."""
    tiles = output_tiles(shape, tile.block_m, tile.block_n)
    return most_splits(tiles, padded(shape).k, sms, THREAD_SPLIT_MIN_K)


# --- six waves or more of 192x192 tiles: their stream-K form -------------------------
#
# On large shapes the first-use tunings of the H200 (reports/offtable*_first_use_h200.json,
# quick CUPTI timings of each candidate) found 192x192 in stream-K form on the hand-written
# pipeline, 3 stages (``LARGE_STREAM_K``, one block per SM, the last wave shared out), at
# or near the best wherever its tiles make six waves or more: against the rules' pick,
# 1.018x on 6144^3 (7.8 waves), 1.026x on 16384x8192x4096 NT bf16, 1.015x on
# 10000x8000x6000 bf16, 1.049x on 7168x6144x4096 NT bf16, 1.076x on 9000x7000x4000 bf16,
# 1.040x on 9984x10016x3648 NT bf16, 1.009x on 9656x9048x5120 NT bf16, and 0.994x on
# 7936x6784x2816 NT bf16 (11.5 waves). Under that it lost (3000x5000x7000 bf16, 3.3 waves:
# 0.880x; 3848x4056x3808 NT, 3.5 waves: 0.979x). Its persistent form without stream-K
# ran 0.98-1.05x there, less steadily. On ten large shapes drawn after the rule
# (reports/offtable_large_shapes.json; bench_gemm, CUPTI, reports/large_rule_h200.jsonl)
# it ran faster than the rules' pick on every one, 1.007-1.079x in kernel time (median
# 1.054x): 0.974x torch at the median against 0.918x, the worst 0.906x against 0.860x.
LARGE_STREAM_K = GemmConfig(
    192,
    192,
    64,
    384,
    3,
    swizzle=8,
    policy="row",
    smem_epilogue=True,
    async_mma=True,
)
LARGE_WAVES = 6
# Where B's rows start off a 32-byte sector (in NT K's rows, which both operands have; in
# NN N's), that form in two-block clusters sharing B's tile (``LARGE_OFF_SECTOR_PAIR``).
# On the H200 (reports/large_pairs_h200.jsonl) its 256-thread twin in those pairs ran
# 1.05x faster on 6288x8440x5192 NT fp16 (0.938x torch against 0.894x). On an H100
# (bench_gemm, CUPTI; reports/h100/large_nt_check_h100.jsonl, ten large NT shapes drawn
# with random.Random(20261231) before any was measured) the form ran 0.77-1.01x torch on
# the eight with K off a sector, and in pairs sharing B 1.156-1.262x faster on all eight,
# median 1.24x (7312x6560x5800 fp16 0.955x torch against 0.768x); every clustered form
# timed there ran 1.09x faster or more. On the two with K on a sector the pairs ran 1.020x
# and 0.978x: those keep the form alone. In NN (reports/h100/large_nn_check_h100.jsonl,
# eight large NN shapes drawn before any was measured, random.Random(20261232)) the pairs
# ran faster on all five with B's rows off a sector, 1.062-1.194x (8544x11048x5032 bf16
# 0.864x torch against 0.723x), and 0.96-1.04x on the three with only A's off, which keep
# the form alone. Checked on shapes drawn after the rule, before any was measured: eight
# NT (random.Random(20261212), reports/h100/large_pairs_check_h100.jsonl), all faster,
# 1.138-1.244x, median 1.22x (7128x5952x2344 NT bf16 0.969x torch against 0.784x; pairs
# sharing A's tile within 5% of them); six NN drawn after it came to take NN
# (random.Random(20261214), large_nn_pairs_check_h100.jsonl), all faster, 1.034-1.129x,
# median 1.07x (5928x10024x6072 fp16 1.001x torch against 0.887x). On the ten H200
# off-table rows whose pick it changes (large_changed_h100.jsonl, chosen from results) the
# H100 ran all ten faster, 1.074-1.242x. Where only A's rows are off (NN, K off a sector),
# eight shapes drawn for that question before any was measured (random.Random(20261215),
# large_a_off_h100.jsonl) ran the form alone at 0.891-1.033x torch, median 1.01x; pairs
# sharing A's tile ran 0.957-1.070x of it (median 0.99x) and pairs sharing B's
# 0.974-1.056x (median 1.01x), so those keep the form alone. The H200 has yet to time
# these lists.
LARGE_OFF_SECTOR_PAIR = "b"


def large_stream_k(shape: GemmShape, sms: int) -> GemmConfig | None:
    """``LARGE_STREAM_K`` over ``sms`` blocks where its output tiles make ``LARGE_WAVES``
    waves or more and the form builds for ``shape``, where B's rows are off a sector in
    ``LARGE_OFF_SECTOR_PAIR``'s two-block clusters where they build; None elsewhere."""
    if output_tiles(shape, 192, 192) < LARGE_WAVES * sms:
        return None
    config = replace(LARGE_STREAM_K, stream_k=sms)
    if row_bytes(shape)["B"] % SECTOR_BYTES and LARGE_OFF_SECTOR_PAIR:
        pair = replace(config, multicast=LARGE_OFF_SECTOR_PAIR)
        if builds(shape, pair):
            return pair
    return config if builds(shape, config) else None


# The hand-written pipeline (kernels/gemm_async.py) where the heuristic's pick has a form
# on it that the H200 measured faster, the tile and its score unchanged. Stream-K: its
# persistent form with the last wave shared out, against TileLang's pipeline with the same
# tile (bench_gemm, CUPTI, fp16; reports/streamk_async_h200.jsonl): 2500x1800x4000 in
# 256x128 tiles 0.0581 ms against 0.0658, 2000x3000x3000 in 128x256 0.0702 against
# 0.0708, 4096^3 in 128x256 0.1887 against 0.2023. The persistent form of an unsplit
# 128x256 grid (panels of 16) where each SM takes ``PERSISTENT_MIN_TRIPS`` tiles or more,
# so that a block's write-back overlaps its next tile's loads (4096^3, four trips: fp16
# 0.1804 ms against 0.1850, bf16 0.1755 against 0.1800; reports/persistent_async_h200.jsonl).
PERSISTENT_MIN_TRIPS = 2
# That form in ``PERSISTENT_STAGES`` stages where they fit, the C tile then staged in
# halves (``GemmConfig.c_parts``): one batch in flight with the producer two K steps
# ahead. On the H200 (bench_gemm, CUPTI; reports/persistent_halves_h200.jsonl), panels of
# 16, against the 3-stage form: 4096^3 fp16 0.1772 ms against 0.1781, bf16 0.1717 against
# 0.1728; 8192^3 fp16 1.4141 (0.992x torch for the table's data-parallel config beside
# it, 1.009x this), bf16 1.3603 (1.016x).
PERSISTENT_STAGES = 4


def async_form(shape: GemmShape, config: GemmConfig, sms: int) -> GemmConfig:
    """``config`` on the hand-written pipeline where that is measured faster: a stream-K
    grid through shared memory, and an unsplit, unpaired grid of 128x256 tiles that are
    ``PERSISTENT_MIN_TRIPS`` waves or more, in its persistent form (in
    ``PERSISTENT_STAGES`` stages where they fit); ``config`` itself
    otherwise, or where the form does not build for ``shape`` (every load by TMA)."""
    if config.async_mma:
        return config
    form = None
    if config.stream_k and config.smem_epilogue:
        form = _twin(config)
    elif (
        (config.block_m, config.block_n) == (128, 256)
        and config.smem_epilogue
        and config.split_k == 1
        and not (config.persistent or config.stream_k or config.swap_ab)
        and output_tiles(shape, 128, 256) >= PERSISTENT_MIN_TRIPS * sms
    ):
        twin = _twin(config)
        form = None if twin is None else _persistent(twin, sms)
        if form is not None:
            form = _replaced(form, num_stages=PERSISTENT_STAGES) or form
    return form if form is not None and builds(shape, form) else config


# Tiles cut to fit the waves: widths between 128x256's and 128x128's, in two warpgroups of
# 64 rows (the row policy), and 192 rows in three (384 threads), so that more shapes have
# a tile whose output tiles fill the SMs' slots (1536^2 in 128x144 tiles: one wave on an H200).
# Block_K 64, 4 stages, panels of 8, shared-memory epilogue. Efficiency per SM slot
# covered (``fill`` / ``waste``) against 128x256x64's (4 stages, panels of 16, shared
# epilogue) on 8192x8192x4096, H200, CUPTI (reports/tiles_fitted_h200.jsonl; bf16 NT and
# fp16 NN), rounded down to 0.01, the lower of the two where a tile is scored on both,
# and never above the winner's 1.0 (192x192 ran 1.02 per slot in both). In NN, B's tile
# rows are its columns: a width that is not a multiple of 64 columns (128 bytes) loses
# TMA's 128-byte swizzle, so NN keeps only 192 and 128: 144, 176 and 208 ran 0.63-0.66
# per slot, and 160 and 224 (64-byte swizzle) 0.85 and 0.93 on 8192^2 but 128x160 0.68
# of 128x192's pace per slot on 2500x1800x4000 (0.0913 against 0.0788 ms in two waves
# each), so neither is trusted; 192x96 ran 0.76. NT's B rows are K steps of 128 bytes
# whatever the width. On 1536^3 bf16 NT (one wave), 128x144 ran 0.94x torch (4 stages,
# panels of 8; 0.97x in row-major order, 0.98x with 5 stages) and 192x96 1.00x (6 stages),
# against 0.82x for 128x192 (96 tiles).
# More stages than the picks' do not pay where each block runs one tile within a wave: on
# an H100 (reports/h100/stages_h100.jsonl, 73 shapes, 12 picks, each stage count deeper
# that fits up to 7) the deeper form's median over each pick's shapes was under 1.0x:
# 128x192's pairs in 5 stages 0.988x over 23 shapes, 128x192 on TileLang's pipeline
# 0.936x over 12, 128x128 in 5-7 stages 0.92-0.97x. So the stage counts stay as they are.


def _fitted(block_m: int, block_n: int) -> GemmConfig:
    threads = 384 if block_m == 192 else 256
    return GemmConfig(block_m, block_n, 64, threads, 4, swizzle=8, policy="row", smem_epilogue=True)


# ``off_sector_plain_pair``'s form: the fitted 192x192 on the hand-written pipeline, in
# pairs sharing B.
OFF_SECTOR_PLAIN_PAIR = replace(_fitted(192, 192), async_mma=True, multicast="b")


FITTED = (
    Tile(_fitted(192, 192), 1.0),
    Tile(_fitted(192, 160), 0.97, ("NT",)),
    Tile(_fitted(192, 128), 0.94),
    Tile(_fitted(128, 224), 0.97, ("NT",)),
    Tile(_fitted(128, 208), 0.96, ("NT",)),
    Tile(_fitted(128, 176), 0.93, ("NT",)),
    Tile(_fitted(128, 160), 0.92, ("NT",)),
    Tile(_fitted(128, 144), 0.92, ("NT",)),
    Tile(_fitted(192, 96), 0.85, ("NT",)),
)


def fitted_candidates(shape: GemmShape, sms: int) -> list[GemmConfig]:
    """Each ``FITTED`` tile of ``shape``'s layout whose output tiles cover the SMs better
    than 128x256's (``covers_better``), in 3, 4 or 5 stages and panels of 0, 8 or 16 tile
    rows, where they fit."""
    out = []
    for tile in FITTED:
        c = tile.config
        if shape.layout in tile.layouts and covers_better(
            shape, sms, (c.block_m, c.block_n), (128, 256)
        ):
            for stages, panel in itertools.product((3, 4, 5), (0, 8, 16)):
                try:
                    out.append(replace(c, num_stages=stages, swizzle=panel))
                except ValueError:
                    continue  # over the shared-memory budget
    return out


# --- the forms a first-use tuning tries beside the spread ------------------------------
#
# The search space without the hand-written pipeline (``candidates``, what a first-use
# tuning spreads over) reaches few of the forms that won the sweeps over mid shapes drawn
# at random (reports/mid_train_h200.jsonl, mid_forms_h200.jsonl, mid_fresh_check_h200.jsonl
# and offtable_sweeps_h200.jsonl; H200, bench_gemm, CUPTI, against torch.matmul): of 29
# shapes, 24 had their fastest config outside it. ``FORMS`` are the forms that ran within
# 2% of a shape's fastest on at least one of them, as (config, grid): "tiles" as it is,
# "persistent" one block per SM, "stream_k" one block per SM with the last wave shared
# out. They led or tied: 128x192 and 192x192 in stream-K and persistent form five shapes
# each, 128x256's pair four, 192x192's pair, its plain grid, 128x192 plain and its pair,
# and 128x160 two each, the rest one. "clusters" is the persistent grid in two-block
# clusters (an even count of blocks, one per SM; each cluster a pair of tiles at a time,
# ``kernels.schedules.Units``): in a sweep of 12 mid shapes (reports/clusters_h200.jsonl)
# 128x256's pair led two, 2232x3384x2048 NT bf16 at 0.936x torch against 0.848x for the
# best of the older forms swept beside it, and 3848x4056x3808 NT fp16 at 0.972x against
# 0.952x; 128x192's pair (row policy) led 1536x1200x1736 NT bf16, 0.831x against 0.715x,
# and 3464x2352x1680 NT bf16, 0.89x against 0.837x, and lost elsewhere (1400x3616x3216
# NT bf16 0.772x against 0.817x). A form joins a shape's plan where its output tiles
# make ``FORM_MIN_WAVE`` of a wave or more (fewer leave too many SMs idle whatever the
# grid), the shape is neither thin nor short in K (``candidates``' other branches) and
# the form builds.
FORMS: tuple[tuple[GemmConfig, str], ...] = (
    (NARROW_PERSISTENT, "stream_k"),
    (LARGE_STREAM_K, "stream_k"),
    (LARGE_STREAM_K, "persistent"),
    (NARROW_PERSISTENT, "persistent"),
    (PAIRED_TILE, "tiles"),
    (replace(_fitted(192, 192), async_mma=True, multicast="b"), "tiles"),
    (_fitted(192, 192), "tiles"),
    (replace(NARROW_PERSISTENT, async_mma=False), "tiles"),
    (NARROW_PAIR_TILE, "tiles"),
    (_fitted(128, 160), "tiles"),
    (GemmConfig(256, 128, 64, 256, 3, smem_epilogue=True, async_mma=True), "stream_k"),
    (replace(PAIRED_TILE, multicast=""), "persistent"),
    (replace(_fitted(128, 160), async_mma=True), "persistent"),
    (_fitted(192, 128), "tiles"),
    (PAIRED_TILE, "clusters"),
    (replace(NARROW_PERSISTENT, multicast="b"), "clusters"),
)


# The least share of a wave a form's output tiles make for it to join a shape's plan. A
# whole wave kept out the fastest config of 1776x1472x4088 bf16 measured: 128x192 in its
# persistent form, 112 tiles on the H200's SMs (0.85 of a wave), 35.6 us against 39.5 us
# for the first-use tuning's winner without it (reports/clusters_h200.jsonl,
# offtable_mid_first_use_h200.json before this rule); with it first-use tuning took
# 128x192 on TileLang's pipeline there, 0.905x torch against 0.764x before.
FORM_MIN_WAVE = 0.8


def form_of(config: GemmConfig, grid: str, sms: int) -> GemmConfig | None:
    """One of ``FORMS`` on a GPU of ``sms`` SMs: "tiles" as it is, "persistent" and
    "stream_k" over ``sms`` blocks, "clusters" persistent over the most whole two-block
    clusters that ``sms`` SMs hold; None where that is not a valid config."""
    if grid == "tiles":
        return config
    if grid == "clusters":
        return _replaced(config, persistent=sms - sms % 2)
    return _replaced(config, **{grid: sms})


# The operands exchanged (``exchanged_form``) are a form of their own shape, not one of
# ``FORMS``' fixed tiles: where their tiles fit (``exchanged_fitting``) they lead a
# shape's forms whatever the heuristic picked. On the H200 (bench_gemm, CUPTI) it ran
# the fastest of the 3-4 configs timed beside it in its records on all 23 shapes
# (reports/exchanged_forms_h200.jsonl, exchanged_check_h200.jsonl), 1400x3616x3216 NT
# bf16 among them, whose pick stays on TileLang's pipeline: 0.945x torch against 0.817x.
# It is no sure winner: 1128x3624x3688 NT bf16 ran 0.753x in it and 0.932x in 192x176's
# pair in another record (wave_rows_h200.jsonl), so it joins the plan beside the other
# forms and does not replace them.
def forms(shape: GemmShape, sms: int) -> list[GemmConfig]:
    """``FORMS`` on a GPU of ``sms`` SMs that ``shape`` takes: where it is neither thin
    (M <= 64 or N <= 128) nor short in K (K <= 256), the forms whose output tiles make at
    least ``FORM_MIN_WAVE`` of a wave and that build for it, in ``FORMS``' order, after
    the operands exchanged where their tiles fit (``exchanged_fitting``, whatever the
    pick)."""
    check_sms(sms)
    if shape.m <= 64 or shape.n <= 128 or shape.k <= 256:
        return []
    exchanged_tiles = exchanged_fitting(shape, sms)
    out = [] if exchanged_tiles is None else [exchanged_tiles]
    for config, grid in FORMS:
        if output_tiles(shape, config.block_m, config.block_n) < FORM_MIN_WAVE * sms:
            continue
        form = form_of(config, grid, sms)
        if form is not None and builds(shape, form):
            out.append(form)
    return out


def tile_efficiency(shape: GemmShape, config: GemmConfig) -> float | None:
    """The listed efficiency (``TILES``, then ``FITTED``) of ``config``'s tile on
    ``shape``'s layout; None for a tile neither lists there."""
    size = (config.block_m, config.block_n)
    for tile in TILES + FITTED:
        if (tile.config.block_m, tile.config.block_n) == size and shape.layout in tile.layouts:
            return tile.efficiency
    return None


def fitted_score(shape: GemmShape, tile: Tile, sms: int) -> tuple[float, GemmConfig]:
    """``score`` of a ``FITTED`` tile, unsplit (its evidence is unsplit grids): 0 where
    the layout is not its own, where A's rows are off a 32-byte sector (``narrow_fits``,
    as for 128x192) or where its output tiles are few enough that ``split_for`` would
    split K."""
    c = tile.config
    tiles = output_tiles(shape, c.block_m, c.block_n)
    if (
        shape.layout not in tile.layouts
        or not narrow_fits(shape)
        or split_for(shape, tiles, sms) > 1
    ):
        return 0.0, c
    return score(shape, tile, sms)


# Stream-K's throughput over the data-parallel grid's with every SM busy: the best stream-K
# config over the best plain one, H200 quick timings of the same tile: 4096^3 fp16
# 0.1874/0.2073 ms (0.904) and bf16 0.1816/0.2013 (0.902); 10000x8000x6000 bf16
# 1.3116/1.4441 (0.908). The tiles go in row-major order (no panels), as in 4096^3's best
# stream-K configs; on 2500x1800x4000 fp16 (256x128) it ran 0.825x torch against
# 0.795x in panels of 8 (reports/tiles_fitted_h200.jsonl).
STREAM_K_EFFICIENCY = 0.90


def stream_k_score(shape: GemmShape, tile: Tile, sms: int) -> tuple[float, GemmConfig]:
    """``score`` of ``tile`` on a stream-K grid of one block per SM, which keeps every SM
    busy (fill 1) at ``STREAM_K_EFFICIENCY`` of the tile's pace, over the padding; 0 where
    the output tiles are less than a wave (there the blocks share a tile's K steps among
    too many, and split K is the tool: 1536^2 ran 0.0223 ms plain, slower stream-K)."""
    c = tile.config
    tiles = output_tiles(shape, c.block_m, c.block_n)
    config = replace(c, stream_k=sms, swizzle=0)
    if tiles < sms or not builds(shape, config):
        return 0.0, c
    value = tile.efficiency * STREAM_K_EFFICIENCY / waste(shape, c.block_m, c.block_n)
    return value, config


def builds(shape: GemmShape, config: GemmConfig) -> bool:
    """Whether ``config`` may run ``shape`` (``check_combination``: the rows that only TMA
    copies need 16-byte aligned). The heuristic picks nothing that does not: stream-K, for
    one, needs A's or B's rows aligned (3500x1200x2500 NT, rows of 5,000 bytes, is
    refused)."""
    try:
        check_combination(shape, config)
    except ValueError:
        return False
    return True


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
