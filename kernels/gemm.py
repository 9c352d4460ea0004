"""Tiled TileLang GEMM: ``C[M, N] = A[M, K] @ B`` with B as [K, N] (NN) or [N, K] (NT).

The kernel is the classic tiled form: A and B tiles are staged global -> shared with
``T.copy`` inside a software pipeline, multiplied on the tensor cores into a register
fragment, and the fragment is written back to global memory once. On sm_90a TileLang
lowers the copies to TMA and the product to wgmma, warp-specialised.

Shapes and configs are frozen values validated on construction; ``make_gemm`` is a pure
factory; ``compile_gemm`` memoises compilation per (shape, config, arch) in-process, and
TileLang's own disk cache ($TILELANG_CACHE_DIR) spares a new process the recompile.

    from kernels import GemmShape, GemmConfig, compile_gemm
    kernel = compile_gemm(GemmShape(4096, 4096, 4096), GemmConfig())
    c = kernel(a, b)
"""

import functools
import re
from dataclasses import dataclass, field, replace
from typing import Any

from kernels.schedules import Ops, StreamK, added_rows, fixup_buffers, grid_blocks, tile_coords

# torch dtype names keyed by the TileLang dtype string; short names make the ids.
DTYPES = {"float16": "f16", "bfloat16": "bf16"}
# The same, keyed by the short name (benchmark ids, command lines).
SHORT_DTYPES = {short: name for name, short in DTYPES.items()}
ACCUM_DTYPES = ("float32",)
# NN: B is [K, N]. NT: B is [N, K] and the kernel computes A @ B.T (attention's QK^T).
LAYOUTS = ("NN", "NT")

ELEMENT_BYTES = 2  # every supported input dtype is 16-bit
# A TMA descriptor's global address and row strides must be multiples of 16 bytes.
TMA_ALIGN = 16
# The kernel's argument names and the operands they hold.
OPERANDS = {"a": "A", "b": "B", "out": "C"}
WARPGROUP = 128  # threads in one Hopper warpgroup; wgmma is issued per warpgroup
MMA_ALIGN = 16  # tensor-core tiles are 16 elements along each dimension
# One wgmma covers 64 rows per warpgroup and a multiple of 8 columns. TileLang 0.1.15
# (src/cuda/op/gemm.cc, AllowWgmma) picks wgmma only for block_M >= 64 and lowers smaller
# tiles to mma.sync; ComputeWgmmaWarpPartition then needs the consumer warpgroups split
# g x (warpgroups / g) over the tile with block_M % (64 g) == 0 and
# block_N % (8 warpgroups / g) == 0, and fails the build ("No valid warp partition")
# where no g does.
WGMMA_M = 64
WGMMA_N = 8
# Each warpgroup's column slice of the tile must be a multiple of 16 (TileLang's
# select_wgmma_inst_n): a slice of 8, 24, 40... gets an 8-wide wgmma whose B operand
# TileLang lays out unswizzled, which it cannot describe for an N-major (NN) B ("Not a
# canonical GMMA_MN layout"); its notes also flag N % 16 == 8 as miscomputing.
WGMMA_SLICE_N = 16
# ptxas needs a wgmma's accumulators (N/2 fp32 per thread for an N-column slice) plus
# this many registers in one instruction (CUDA 13.0: "Insufficient registers (128) ...
# register target of 130" for N=208, 154 for 256, 98 for 144, 138 for 224), within the
# per-thread cap that the block's size sets: the consumer threads plus TileLang's
# producer warpgroup share the register file.
WGMMA_WORK_REGISTERS = 26
REGISTER_FILE = 65536  # 32-bit registers per SM; the block runs alone on its SM
MAX_REGISTERS_PER_THREAD = 255
MAX_TILE = 256  # a TMA box holds at most 256 elements per dimension
MAX_THREADS = 512  # consumer threads; warp specialisation adds one producer warpgroup
MAX_STAGES = 8
# fp32 accumulators per thread; past this the fragment crowds out the operand and
# address registers under the 255-per-thread limit and ptxas starts to spill.
MAX_ACCUM_PER_THREAD = 128
# Under ``GemmConfig.pingpong`` a consumer warpgroup holds a whole tile and takes 240
# registers (``setmaxnreg``): room for this many accumulators beside its addresses; so do
# the two consumer warpgroups of the hand-written persistent and stream-K forms
# (``GemmConfig.holds_large_tile``).
PINGPONG_MAX_ACCUM = 192
# Largest dynamic shared memory one block may opt in to on sm_90 (H100/H200): 227 KiB.
SM90_SMEM_LIMIT = 232_448


# The test-only delay (``make_gemm(..., delay=True)``): a spin on the SM's cycle counter.
DELAY_FUNCTION = "tl_test_delay"
DELAY_SOURCE = f"""
__device__ __forceinline__ void {DELAY_FUNCTION}(long long cycles) {{
  long long start = clock64();
  while (clock64() - start < cycles) {{ }}
}}
"""

# Warp partition of the tile among the consumer warps (T.GemmWarpPolicy).
POLICIES = {"square": "", "row": "_pr", "col": "_pc"}
# GemmConfig.multicast: the operand a two-block cluster shares ("" for none).
MULTICASTS = ("", "a", "b", "ab")
_CONFIG_ID = re.compile(
    r"b(\d+)x(\d+)x(\d+)_t(\d+)_s(\d+)(?:_w(\d+))?(_pr|_pc)?(_e)?(?:_p(\d+))?(?:_k(\d+))?(?:_sk(\d+)(f)?)?(_a)?(_pp)?(?:_m(ab|a|b))?(_x)?(_c)?(_pad)?"
)


def check_int(
    owner: str, name: str, value: Any, *, low: int = 1, high: int | None = None, multiple: int = 1
) -> None:
    where = f"{owner}.{name}={value!r}"
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{where}: must be an integer")
    if value < low:
        raise ValueError(f"{where}: must be >= {low}")
    if high is not None and value > high:
        raise ValueError(f"{where}: must be <= {high}")
    if value % multiple:
        raise ValueError(f"{where}: must be a multiple of {multiple}")


def wgmma_partitions(block_m: int, block_n: int, threads: int) -> list[tuple[int, int]]:
    """The (warpgroups along M, warpgroups along N) splits of a block_m x block_n tile
    that TileLang's wgmma lowering accepts for ``threads`` consumer threads, fewest
    warpgroups along M first; an empty list means no warp policy builds."""
    groups = threads // WARPGROUP
    return [
        (g, groups // g)
        for g in range(1, groups + 1)
        if groups % g == 0
        and block_m % (WGMMA_M * g) == 0
        and block_n % (WGMMA_N * (groups // g)) == 0
    ]


def wgmma_partition(block_m: int, block_n: int, threads: int, policy: str) -> tuple[int, int]:
    """The split TileLang 0.1.15 picks under ``policy`` (ComputeWgmmaWarpPartition):
    "row" the most warpgroups along M, "col" the fewest, "square" the split whose
    per-warp tile is closest to the tile's aspect ratio (the first one on a tie)."""
    splits = wgmma_partitions(block_m, block_n, threads)
    if not splits:
        raise ValueError(f"no wgmma split of {block_m}x{block_n} over {threads} threads")
    if policy == "row":
        return splits[-1]
    if policy == "col":
        return splits[0]
    ideal = block_m / block_n

    def score(split: tuple[int, int]) -> float:
        m_warps, n_warps = 4 * split[0], split[1]  # a warpgroup is 4 warps along M
        return abs((block_m / (m_warps * 16)) / (block_n / (n_warps * 8)) - ideal)

    return min(splits, key=score)


def register_cap(threads: int) -> int:
    """Registers a thread may use when ``threads`` consumers and one producer warpgroup
    share the register file (allocated in steps of 8), as ptxas caps the kernel."""
    return min(MAX_REGISTERS_PER_THREAD, REGISTER_FILE // (threads + WARPGROUP) // 8 * 8)


def split_load_register_cap(threads: int) -> int:
    """Registers a thread may use where TileLang's pipeline loads one operand by TMA and
    the other by threads (``check_split_loads``): its producer is then as many threads as
    the ``threads`` consumers, and twice ``threads`` share the register file."""
    return min(MAX_REGISTERS_PER_THREAD, REGISTER_FILE // (2 * threads) // 8 * 8)


@dataclass(frozen=True, slots=True)
class GemmShape:
    """Problem size, input dtype and layout of one GEMM."""

    m: int
    n: int
    k: int
    dtype: str = "float16"
    layout: str = "NN"

    def __post_init__(self) -> None:
        for name in ("m", "n", "k"):
            check_int("GemmShape", name, getattr(self, name))
        if self.dtype not in DTYPES:
            raise ValueError(f"GemmShape.dtype={self.dtype!r}: must be one of {sorted(DTYPES)}")
        if self.layout not in LAYOUTS:
            raise ValueError(f"GemmShape.layout={self.layout!r}: must be one of {list(LAYOUTS)}")

    @property
    def id(self) -> str:
        """Readable id, e.g. ``m4096_n4096_k4096_f16`` (``_nt`` appended for NT)."""
        tail = "" if self.layout == "NN" else "_" + self.layout.lower()
        return f"m{self.m}_n{self.n}_k{self.k}_{DTYPES[self.dtype]}{tail}"

    @property
    def flops(self) -> int:
        """One multiply and one add per (m, n, k) triple."""
        return 2 * self.m * self.n * self.k

    @property
    def a_shape(self) -> tuple[int, int]:
        return (self.m, self.k)

    @property
    def b_shape(self) -> tuple[int, int]:
        return (self.k, self.n) if self.layout == "NN" else (self.n, self.k)

    @property
    def c_shape(self) -> tuple[int, int]:
        return (self.m, self.n)

    @property
    def min_bytes(self) -> int:
        """Bytes moved if A and B are read once and C written once."""
        return ELEMENT_BYTES * (self.m * self.k + self.k * self.n + self.m * self.n)


@dataclass(frozen=True, slots=True)
class GemmConfig:
    """Tile sizes and schedule of the kernel. Defaults are the training-stage baseline."""

    block_m: int = 128
    block_n: int = 128
    block_k: int = 32
    threads: int = 128
    num_stages: int = 3
    # Block rasterisation panel for L2 reuse (T.use_swizzle); 0 leaves it off.
    swizzle: int = 0
    # How the consumer warps split the tile: "square", "row" (FullRow) or "col" (FullCol).
    policy: str = "square"
    # Stage C through shared memory so the write-back is one bulk (TMA) store per tile
    # instead of scattered 4-byte stores from the register fragment.
    smem_epilogue: bool = False
    # Persistent grid: this many resident blocks loop over the output tiles (T.Persistent,
    # grouped rasterisation built in; with async_mma the hand-written pipeline's own loop,
    # tiles in panels of swizzle, the next tile loaded during a write-back); 0 launches one
    # block per tile.
    persistent: int = 0
    # Split K over this many blocks per output tile; each adds its partial tile into C
    # with a TMA reduce-add (C is zeroed first; its rows must be 16-byte aligned). For
    # grids that underfill the SMs.
    split_k: int = 1
    # Hand-written producer/consumer pipeline (kernels/gemm_async.py) that keeps one wgmma
    # batch in flight across K steps, instead of TileLang's automatic warp specialisation
    # of the T.Pipelined loop, which waits for every batch.
    async_mma: bool = False
    # Stream-K: this many persistent blocks (the GPU's SM count, passed by the caller)
    # compute the whole waves of output tiles data-parallel and share the K steps of the
    # last, partial wave evenly (kernels/schedules.py); a tile split between blocks is
    # summed by atomic adds into C, zeroed first over the rows those tiles cover (with
    # async_mma: the hand-written pipeline's persistent form, smem_epilogue only). 0: off.
    stream_k: int = 0
    # Two-block clusters (async_mma only): the pair of blocks shares one operand's tile,
    # which one TMA multicast lands in both blocks' shared memory, so the L2 serves it
    # once per pair. "b": the pair is two M tiles of one N column and shares B's tile;
    # "a": two N tiles of one M row sharing A's. "" leaves clusters off. On a persistent
    # or stream-K grid (of an even number of blocks) each cluster takes a pair of tiles
    # at a time (kernels.schedules.Units). "ab": four-block clusters of two M tiles by two
    # N tiles, each A tile shared by the two blocks of its M row and each B tile by the
    # two of its N column, so the L2 serves both operands once per pair; on the plain
    # grid or a persistent one of a multiple of 4 blocks, without panels. Measured level
    # with the pairs at best on the H200 (kernels/gemm_async.py): in no search space.
    multicast: str = ""
    # Operands exchanged: the kernel computes C^T = B^T A^T, so M rides on the wgmma's N
    # side (a multiple of 8, 16 here) instead of its 64-row M side: a skinny M is not
    # padded, and a large tile steps along M by 16 rows. The tile is block_m columns of C
    # (along N) by block_n rows of C (along M). On TileLang's pipeline (plain grid) each
    # block writes its tile of C transposed, element by element (added in, under
    # split-K); on the hand-written one (async_mma; plain or persistent grid, or the plain
    # grid in pairs of N tiles sharing A's tile, multicast "a") through shared memory,
    # transposed there and stored by TMA, or element by element.
    swap_ab: bool = False
    # Ping-pong (the hand-written pipeline's persistent form, two consumer warpgroups):
    # each consumer warpgroup takes every other tile of its block and accumulates the
    # whole tile itself, so that one warpgroup's write-back runs while the other's K steps
    # do; the stages are shared, loaded tile after tile. The write-back is direct, from
    # registers. Measured slower than the persistent form on the H200 (kernels/
    # gemm_async.py): in no search space.
    pingpong: bool = False
    # Loads by cp.async from every thread, TileLang's pipeline without warp specialisation,
    # instead of TMA copies from a producer warpgroup (TileLang's per-copy disable_tma and
    # TL_DISABLE_WARP_SPECIALIZED; the wgmma stays). The plain, panelled or split grid only
    # (a split's partial tiles are added from registers, or reduce-added by TMA where C's
    # rows are aligned). Tried for operand rows that start off a 32-byte sector, where the
    # TMA-fed kernels run slow (reports/sectors_h200.jsonl), it ran slower still on the
    # H200, on and off a sector alike (reports/cp_async_h200.jsonl: on 9 mid shapes
    # 0.31-0.59x torch at best, where the best TMA-fed config ran 0.75-0.93x; 2096x2728x1304
    # NT 50.2 us against 37.4 us for the same tile by TMA): not for aligned rows. Where TMA
    # cannot take the rows it is the pick (kernels.tuned.thread_loads).
    cp_async: bool = False
    # Stream-K's partial tiles summed in the kernel (the hand-written pipeline's stream-K
    # form only; id ``_sk<blocks>f``), not added into C: a block whose range holds a
    # tile's first K steps but not its last writes its fp32 sums to a workspace slot of
    # its own and counts them in on the tile's flag; the block that holds the tile's last
    # K steps waits for that count, adds the slots into its fragment and writes the tile
    # once. Each block takes its segments last first, so the shares it hands on are
    # written before the one it sums (kernels.schedules.StreamK.fixup_unit). C is not
    # zeroed before the launch and nothing is added into it by TMA reduce-add. On the H200
    # (bench_gemm, CUPTI; reports/fixup_h200.jsonl, 12 mid shapes, three tile forms) it
    # ran slower than stream-K adding into C in 35 of 36 pairs (2824x3368x3744 fp16
    # 192x192: 113.2 us against 108.7; 3464x2488x2056 bf16 192x192: 78.2 against 67.0):
    # in no search space.
    fixup: bool = False
    # Rows padded (``_pad``): where A's or B's rows are not 16-byte aligned, the launch
    # first copies each such operand into a zero-filled buffer whose rows are (K, or N of
    # an NN B, rounded up to a multiple of 8), and the kernel is the one built for that
    # padded shape (``padded``), with TMA loads; where N is padded C is written to a
    # padded buffer and copied out. The copies are launches of their own, timed with the
    # kernel. For shapes whose rows threads would load in 2-byte steps (N or K odd):
    # ``kernels.tuned.thread_split`` picks it where it ran faster than the thread-loaded
    # split on the H200 (reports/two_byte_h200.jsonl); in no search space.
    pad: bool = False
    accum_dtype: str = "float32"
    smem_limit: int = field(default=SM90_SMEM_LIMIT, compare=False, repr=False)

    def __post_init__(self) -> None:
        for name in ("block_m", "block_n", "block_k"):
            check_int(
                "GemmConfig",
                name,
                getattr(self, name),
                low=MMA_ALIGN,
                high=MAX_TILE,
                multiple=MMA_ALIGN,
            )
        if self.block_m % WGMMA_M:
            raise ValueError(
                f"GemmConfig.block_m={self.block_m}: must be a multiple of {WGMMA_M} (wgmma "
                f"computes {WGMMA_M} rows per warpgroup: TileLang builds block_m < {WGMMA_M} "
                "with mma.sync, not wgmma, and fails on the rest: 'No valid warp partition')"
            )
        check_int(
            "GemmConfig",
            "threads",
            self.threads,
            low=WARPGROUP,
            high=MAX_THREADS,
            multiple=WARPGROUP,
        )
        check_int("GemmConfig", "num_stages", self.num_stages, low=1, high=MAX_STAGES)
        check_int("GemmConfig", "swizzle", self.swizzle, low=0, high=64)
        if self.policy not in POLICIES:
            raise ValueError(f"GemmConfig.policy={self.policy!r}: must be one of {list(POLICIES)}")
        if not isinstance(self.smem_epilogue, bool):
            raise ValueError(f"GemmConfig.smem_epilogue={self.smem_epilogue!r}: must be a bool")
        check_int("GemmConfig", "persistent", self.persistent, low=0, high=4096)
        check_int("GemmConfig", "split_k", self.split_k, low=1, high=64)
        check_int("GemmConfig", "stream_k", self.stream_k, low=0, high=4096)
        if not isinstance(self.async_mma, bool):
            raise ValueError(f"GemmConfig.async_mma={self.async_mma!r}: must be a bool")
        if self.async_mma and self.num_stages < 2:
            # The consumers release a stage one K step late; with one stage the producer
            # would wait for a release that waits for its own next load.
            raise ValueError(
                f"GemmConfig.num_stages={self.num_stages}: must be >= 2 with async_mma=True"
            )
        if self.async_mma and self.split_k > 1:
            raise ValueError(
                f"GemmConfig.async_mma={self.async_mma}: needs split_k=1 (got {self.split_k})"
            )
        if self.async_mma and self.stream_k and not self.smem_epilogue:
            raise ValueError(
                f"GemmConfig.stream_k={self.stream_k}: with async_mma=True needs "
                "smem_epilogue=True (the partial tiles are reduce-added by TMA from shared "
                "memory)"
            )
        if not isinstance(self.fixup, bool):
            raise ValueError(f"GemmConfig.fixup={self.fixup!r}: must be a bool")
        if not isinstance(self.pad, bool):
            raise ValueError(f"GemmConfig.pad={self.pad!r}: must be a bool")
        if self.fixup and not (self.stream_k and self.async_mma):
            raise ValueError(
                f"GemmConfig.fixup={self.fixup}: needs stream_k > 0 and async_mma=True (got "
                f"{self.stream_k}, {self.async_mma}): it is how the hand-written pipeline's "
                "stream-K form sums a tile that several blocks share"
            )
        if self.multicast and (self.persistent % 2 or self.stream_k % 2):
            raise ValueError(
                f"GemmConfig.multicast={self.multicast!r}: needs an even persistent and "
                f"stream_k (got {self.persistent}, {self.stream_k}): a persistent grid runs "
                "in whole two-block clusters, each taking a pair of tiles at a time"
            )
        if self.multicast not in MULTICASTS:
            raise ValueError(
                f"GemmConfig.multicast={self.multicast!r}: must be one of {list(MULTICASTS)}"
            )
        if self.multicast == "ab" and (self.persistent % 4 or self.stream_k or self.swizzle):
            raise ValueError(
                f"GemmConfig.multicast='ab': needs persistent a multiple of 4, stream_k=0 and "
                f"swizzle=0 (got {self.persistent}, {self.stream_k}, {self.swizzle}): four-block "
                "clusters run on the plain grid, or a persistent one of whole clusters, in "
                "row-major order"
            )
        if self.multicast and not self.async_mma:
            raise ValueError(
                f"GemmConfig.multicast={self.multicast!r}: needs async_mma=True (the "
                "multicast loads and the pair's shared stage releases are the hand-written "
                "pipeline's)"
            )
        if self.multicast and self.swizzle % 2:
            # TileLang rasterises a clustered grid by whole pairs: panel / 2 pairs.
            raise ValueError(
                f"GemmConfig.swizzle={self.swizzle}: must be even with multicast="
                f"{self.multicast!r} (the panel holds whole two-block clusters)"
            )
        if not isinstance(self.swap_ab, bool):
            raise ValueError(f"GemmConfig.swap_ab={self.swap_ab!r}: must be a bool")
        # Exchanged pairs: on the plain grid two N tiles sharing A's tile ("a"); on a
        # persistent grid either operand's tile ("a" or "b").
        paired_swap = self.multicast == "a" or (self.multicast == "b" and self.persistent)
        if (
            self.swap_ab
            and self.async_mma
            and (self.stream_k or (self.multicast and not paired_swap) or self.pingpong)
        ):
            raise ValueError(
                "GemmConfig.swap_ab=True: with async_mma=True needs stream_k=0, multicast='' "
                "or 'a' ('b' too with persistent > 0) and pingpong=False (got "
                f"{self.stream_k}, {self.multicast!r}, {self.persistent}, {self.pingpong}): "
                "the hand-written pipeline exchanges the operands on its plain and "
                "persistent grids, one block a tile or two-block clusters sharing one "
                "operand's tile (on the plain grid only A's)"
            )
        if (
            self.swap_ab
            and not self.async_mma
            and (self.stream_k or self.persistent or self.smem_epilogue or self.policy != "square")
        ):
            raise ValueError(
                "GemmConfig.swap_ab=True: with async_mma=False needs stream_k=0, persistent=0, "
                "smem_epilogue=False and policy='square' (got "
                f"{self.stream_k}, {self.persistent}, {self.smem_epilogue}, {self.policy!r}): "
                "TileLang's pipeline writes the transposed tile back from registers, on the "
                "plain grid"
            )
        if self.stream_k and self.split_k > 1:
            raise ValueError(
                f"GemmConfig.split_k={self.split_k}: must be 1 with stream_k={self.stream_k} "
                "(stream-K splits the K steps of the last wave's tiles itself)"
            )
        if self.stream_k and self.persistent:
            raise ValueError(
                f"GemmConfig.persistent={self.persistent}: must be 0 with stream_k="
                f"{self.stream_k} (the stream-K grid is persistent already: stream_k blocks)"
            )
        if self.split_k > 1 and self.swizzle:
            raise ValueError(
                f"GemmConfig.swizzle={self.swizzle}: must be 0 with split_k={self.split_k} "
                "(the rasterisation remaps a 2-D grid; split-K adds a third dimension)"
            )
        if self.split_k > 1 and self.persistent:
            raise ValueError(
                f"GemmConfig.split_k={self.split_k}: must be 1 with persistent={self.persistent}"
            )
        if self.persistent and self.swizzle and not self.async_mma:
            raise ValueError(
                f"GemmConfig.swizzle={self.swizzle}: must be 0 with persistent={self.persistent} "
                "and async_mma=False (T.Persistent rasterises the tiles itself; the "
                "hand-written pipeline's persistent loop takes them in panels of swizzle)"
            )
        if not isinstance(self.pingpong, bool):
            raise ValueError(f"GemmConfig.pingpong={self.pingpong!r}: must be a bool")
        if self.pingpong and (
            not self.async_mma
            or not self.persistent
            or self.smem_epilogue
            or self.multicast
            or self.threads != 2 * WARPGROUP
            or self.policy != "square"
            or self.num_stages < 3
        ):
            raise ValueError(
                "GemmConfig.pingpong=True: needs async_mma=True, persistent > 0, "
                f"smem_epilogue=False, multicast='', threads={2 * WARPGROUP}, policy='square' "
                f"and num_stages >= 3 (got {self.async_mma}, {self.persistent}, "
                f"{self.smem_epilogue}, {self.multicast!r}, {self.threads}, {self.policy!r}, "
                f"{self.num_stages}): two consumer warpgroups of one tile each, on the "
                "persistent loop, writing back from registers"
            )
        if not isinstance(self.cp_async, bool):
            raise ValueError(f"GemmConfig.cp_async={self.cp_async!r}: must be a bool")
        if self.cp_async and (self.async_mma or self.persistent or self.stream_k or self.swap_ab):
            raise ValueError(
                "GemmConfig.cp_async=True: needs async_mma=False, persistent=0, stream_k=0 "
                f"and swap_ab=False (got {self.async_mma}, {self.persistent}, "
                f"{self.stream_k}, {self.swap_ab}): the plain, panelled or split grid of "
                "TileLang's pipeline, whose copies alone it turns from TMA"
            )
        if self.accum_dtype not in ACCUM_DTYPES:
            raise ValueError(
                f"GemmConfig.accum_dtype={self.accum_dtype!r}: must be one of {list(ACCUM_DTYPES)}"
            )
        per_thread = self.block_m * self.block_n // self.tile_threads
        cap = PINGPONG_MAX_ACCUM if self.holds_large_tile else MAX_ACCUM_PER_THREAD
        if per_thread > cap:
            raise ValueError(
                f"GemmConfig.threads={self.threads}: block_m*block_n/{self.tile_threads} = "
                f"{per_thread} fp32 accumulators per thread, must be <= {cap} (raise threads "
                "or shrink the tile)"
            )
        # The warpgroups that split one tile: all the consumers, or one under ping-pong.
        mma = self.tile_threads
        if not wgmma_partitions(self.block_m, self.block_n, mma):
            fits = [
                t
                for t in range(WARPGROUP, MAX_THREADS + 1, WARPGROUP)
                if wgmma_partitions(self.block_m, self.block_n, t)
            ]
            raise ValueError(
                f"GemmConfig.threads={self.threads}: {mma // WARPGROUP} warpgroups "
                f"cannot split the {self.block_m}x{self.block_n} tile for wgmma (g warpgroups "
                f"along M and the rest along N need block_m % (64 g) == 0 and block_n % "
                f"(8 * rest) == 0 for some g); threads that fit this tile: {fits}"
            )
        _, n_groups = wgmma_partition(self.block_m, self.block_n, mma, self.policy)
        slice_n = self.block_n // n_groups
        split = f"policy={self.policy!r} over threads={mma} makes slices of {slice_n} "
        if slice_n % WGMMA_SLICE_N:
            raise ValueError(
                f"GemmConfig.block_n={self.block_n}: {split}columns per warpgroup, must be a "
                f"multiple of {WGMMA_SLICE_N} (TileLang lays B out for a narrower wgmma without "
                "the swizzle wgmma needs, and cannot build NN)"
            )
        registers = slice_n // 2 + WGMMA_WORK_REGISTERS
        if registers > register_cap(self.threads):
            raise ValueError(
                f"GemmConfig.block_n={self.block_n}: {split}columns per warpgroup; one wgmma "
                f"over them needs {slice_n // 2} accumulator + {WGMMA_WORK_REGISTERS} registers "
                f"= {registers}, must be <= {register_cap(self.threads)}, a thread's share in a "
                f"block of {self.threads} + {WARPGROUP} producer threads (ptxas: Insufficient "
                "registers)"
            )
        if self.smem_bytes > self.smem_limit:
            raise ValueError(
                f"GemmConfig.num_stages={self.num_stages}: needs {self.smem_bytes} bytes of shared "
                f"memory ((block_m + block_n) * block_k * 2 B * stages; a shared-memory "
                "epilogue's block_m * block_n * 2 B reuse them, or come on top under a "
                "persistent or stream-K grid, in row halves on the hand-written pipeline "
                f"where the whole tile does not fit: c_parts={self.c_parts}), must be <= "
                f"{self.smem_limit}"
            )

    @property
    def id(self) -> str:
        """Readable id, e.g. ``b128x256x64_t256_s3``. Options append, in this order:
        ``_w10`` swizzle panel 10, ``_pr``/``_pc`` row/col warp policy, ``_e`` shared-memory
        epilogue, ``_p16`` persistent grid of 16 blocks, ``_k4`` K split over 4 blocks,
        ``_sk16`` stream-K over 16 blocks (``_sk16f`` summing shared tiles in the kernel,
        ``fixup``), ``_a`` the hand-written asynchronous
        pipeline, ``_mb``/``_ma`` two-block clusters sharing B's/A's tile by multicast
        (``_mab`` four-block clusters sharing both),
        ``_x`` the operands exchanged (``swap_ab``), ``_c`` loads by cp.async, ``_pad``
        rows padded to 16 bytes (``pad``); ``_pp`` after ``_a``: ping-pong."""
        tail = f"_w{self.swizzle}" if self.swizzle else ""
        tail += POLICIES[self.policy]
        tail += "_e" if self.smem_epilogue else ""
        tail += f"_p{self.persistent}" if self.persistent else ""
        tail += f"_k{self.split_k}" if self.split_k > 1 else ""
        tail += f"_sk{self.stream_k}" + "f" * self.fixup if self.stream_k else ""
        tail += "_a" if self.async_mma else ""
        tail += "_pp" if self.pingpong else ""
        tail += f"_m{self.multicast}" if self.multicast else ""
        tail += "_x" if self.swap_ab else ""
        tail += "_c" if self.cp_async else ""
        tail += "_pad" if self.pad else ""
        return (
            f"b{self.block_m}x{self.block_n}x{self.block_k}_t{self.threads}_s{self.num_stages}"
            f"{tail}"
        )

    @classmethod
    def from_id(cls, text: str) -> "GemmConfig":
        """Inverse of ``id``: ``b128x256x64_t256_s3``, ``b128x256x64_t256_s3_w10_pc_e``..."""
        found = _CONFIG_ID.fullmatch(text)
        if found is None:
            raise ValueError(
                f"GemmConfig id {text!r}: must look like b128x256x64_t256_s3, optionally "
                "followed by _w<panel>, _pr or _pc, _e, _p<blocks>, _k<splits>, _sk<blocks> "
                "(or _sk<blocks>f), _a, _pp, _ma, _mb or _mab, _x, _c, _pad in that order"
            )
        bm, bn, bk, th, st, sw, pol, ep, pers, split, sk, fix, asy, pp, mc, swap, cp, pad = (
            found.groups()
        )
        policy = {v: k for k, v in POLICIES.items()}[pol or ""]
        return cls(
            int(bm),
            int(bn),
            int(bk),
            int(th),
            int(st),
            int(sw or 0),
            policy=policy,
            smem_epilogue=bool(ep),
            persistent=int(pers or 0),
            split_k=int(split or 1),
            stream_k=int(sk or 0),
            fixup=bool(fix),
            async_mma=bool(asy),
            multicast=mc or "",
            swap_ab=bool(swap),
            pingpong=bool(pp),
            cp_async=bool(cp),
            pad=bool(pad),
        )

    @property
    def holds_large_tile(self) -> bool:
        """Whether a consumer thread may hold up to ``PINGPONG_MAX_ACCUM`` accumulators:
        under ping-pong, and on the hand-written pipeline's persistent and stream-K forms
        with two consumer warpgroups, whose consumers take 240 registers (``setmaxnreg``)
        and write their tiles back inside their own branch. Elsewhere the write-back runs
        at the block's even share of the register file, where a larger fragment spills
        (sm_90a, 192x192x64 over two warpgroups in pairs, plain grid: 768 bytes; none in
        its persistent and stream-K forms)."""
        return self.pingpong or (
            self.async_mma
            and self.threads == 2 * WARPGROUP
            and bool(self.persistent or self.stream_k)
        )

    @property
    def tile_threads(self) -> int:
        """Consumer threads that hold one tile's accumulators: all of them, or one
        warpgroup under ``pingpong``."""
        return WARPGROUP if self.pingpong else self.threads

    @property
    def smem_bytes(self) -> int:
        """Dynamic shared memory of the kernel: the A and B stages, and the C tile where
        the epilogue (or split-K's reduce-add) stages it. TileLang's planner puts the C
        tile in the stages' memory, dead once the K loop is done (the hand-written
        pipeline writes back after its branches for that reason); under a persistent or
        stream-K grid the loop over tiles keeps the stages live through every write-back,
        so there it comes on top (checked against the compiled kernels for sm_90a)."""
        stages = self._stage_bytes
        if not (self.smem_epilogue or self.split_k > 1):
            return stages
        c_tile = self.block_m * self.block_n * ELEMENT_BYTES
        if self.persistent or self.stream_k:
            return stages + c_tile // self.c_parts
        return max(stages, c_tile)

    @property
    def _stage_bytes(self) -> int:
        return (self.block_m + self.block_n) * self.block_k * ELEMENT_BYTES * self.num_stages

    @property
    def c_parts(self) -> int:
        """Pieces the shared-memory epilogue stages a C tile in, one after the other: 1,
        or 2 (halves of block_m's rows) on the hand-written pipeline's persistent and
        stream-K forms where the whole tile does not fit on top of the stages and half of
        it does, for a 128-row tile whose consumer warpgroups split it by columns (each
        warpgroup then holds a share of either half) or a 256-row one (halves of 128,
        which any split shares out). So 128x256x64 runs those forms in 4 stages. With the
        operands exchanged (``swap_ab``) block_m runs along N: the halves are column
        halves of C."""
        c_tile = self.block_m * self.block_n * ELEMENT_BYTES
        halves = (
            self.async_mma
            and self.smem_epilogue
            and bool(self.persistent or self.stream_k)
            and (
                (self.block_m == 2 * WGMMA_M and self.policy != "row")
                or self.block_m == 4 * WGMMA_M
            )
            and self._stage_bytes + c_tile > self.smem_limit
        )
        return 2 if halves else 1


def check_split_loads(rows: dict[str, int], config: GemmConfig) -> None:
    """The register rule where TMA takes one operand's rows and not the other's: ``rows``
    maps "A" and "B" to their row lengths in elements, as the kernel loads them. Raises
    ValueError naming ``GemmConfig.threads`` where the tile's accumulators do not fit.
    Any kernel on TileLang's pipeline lowers its loads this way, a family's too."""
    unaligned = {name: n for name, n in rows.items() if (n * ELEMENT_BYTES) % TMA_ALIGN}
    if len(unaligned) != 1 or config.cp_async or config.async_mma:
        return
    # TileLang 0.1.15 warp-specialises the loads: the operand whose rows TMA cannot
    # take gets a producer of as many threads as the consumers, and nothing hands the
    # consumers more registers. Built for sm_90a on 4000x3002x3000 and 4000x3000x3002
    # NN fp16 (ptxas, CUDA 13.0): 128x192 over 256 threads (96 accumulators a thread,
    # 128 registers) kept them in registers, 128x208 and 128x224 failed ("Insufficient
    # registers"), 128x256 and 256x128 spilled 0.7-1.4 KB a thread inside the K loop;
    # over 384 threads (80 registers) 192x96 built with 74, 192x128 to 192x192 failed.
    # Not modelled: where N is odd the 256-thread tiles that pass spilled 0.2-1 KB
    # anyway (4000x3001x3000: 128x144 to 128x192), outside the consumers' wgmma loop
    # (SASS); 128x128 over 128 threads none.
    (name, n), aligned = next(iter(unaligned.items())), (set(rows) - set(unaligned)).pop()
    cap = split_load_register_cap(config.threads)
    per_thread = config.block_m * config.block_n // config.tile_threads
    if per_thread + WGMMA_WORK_REGISTERS > cap:
        raise ValueError(
            f"GemmConfig.threads={config.threads}: with {name} rows of {n} elements (not "
            f"16-byte aligned) and {aligned}'s aligned, TileLang loads {name} by a second set "
            f"of as many threads, so each of {2 * config.threads} gets {cap} registers; "
            f"block_m*block_n/{config.tile_threads} = {per_thread} accumulators + "
            f"{WGMMA_WORK_REGISTERS} working registers = {per_thread + WGMMA_WORK_REGISTERS}, "
            f"must be <= {cap} (a smaller tile; the dense GEMM also takes cp_async=True, "
            "which loads both operands by threads)"
        )


def padded(shape: GemmShape) -> GemmShape:
    """``shape`` with A's and B's rows 16-byte aligned: K, and N where B is [K, N] (NN),
    rounded up to a multiple of 8 elements (``GemmConfig.pad``'s kernel shape)."""
    step = TMA_ALIGN // ELEMENT_BYTES
    k = -(-shape.k // step) * step
    n = -(-shape.n // step) * step if shape.layout == "NN" else shape.n
    return GemmShape(shape.m, n, k, shape.dtype, shape.layout)


def kernel_shape(shape: GemmShape, config: GemmConfig) -> GemmShape:
    """The shape the kernel of ``config`` is built for: ``padded(shape)`` under
    ``GemmConfig.pad``, else ``shape``."""
    return padded(shape) if config.pad else shape


def check_combination(shape: GemmShape, config: GemmConfig) -> None:
    """The rules that tie a config to a shape (each valid alone): the copies that only TMA
    makes need 16-byte aligned rows. Raises ValueError naming the config field."""
    if config.pad:
        if padded(shape) == shape:
            raise ValueError(
                f"GemmConfig.pad=True: the rows of A and B of {shape.id} are 16-byte aligned "
                "already (K, and N in NN, multiples of 8); pad=False"
            )
        check_combination(padded(shape), replace(config, pad=False))
        return
    if (
        config.split_k > 1
        and config.smem_epilogue
        and not config.swap_ab
        and (shape.n * ELEMENT_BYTES) % TMA_ALIGN
    ):
        # Through shared memory the partial tiles are reduce-added by TMA, which needs
        # 16-byte aligned rows of C (exchanged tiles are added from registers).
        raise ValueError(
            f"GemmConfig.split_k={config.split_k}: with smem_epilogue=True needs N * 2 bytes "
            f"to be a multiple of 16 (N a multiple of 8), got N={shape.n}; smem_epilogue=False "
            "adds the partial tiles from registers where C's rows are not"
        )
    if config.stream_k and config.smem_epilogue and (shape.n * ELEMENT_BYTES) % TMA_ALIGN:
        # Through shared memory, stream-K's partial tiles are reduce-added by TMA too.
        raise ValueError(
            f"GemmConfig.stream_k={config.stream_k}: with smem_epilogue=True needs N * 2 bytes "
            f"to be a multiple of 16 (N a multiple of 8), got N={shape.n}; smem_epilogue=False "
            "adds the partial tiles from registers"
        )
    if (
        config.async_mma
        and config.persistent
        and config.smem_epilogue
        and (shape.n * ELEMENT_BYTES) % TMA_ALIGN
    ):
        # The hand-written pipeline's persistent form stores each staged tile by TMA.
        raise ValueError(
            f"GemmConfig.persistent={config.persistent}: with async_mma=True and "
            "smem_epilogue=True needs N * 2 bytes to be a multiple of 16 (N a multiple of 8), "
            f"got N={shape.n}; the tiles are stored from shared memory by TMA"
        )
    rows = {"A": shape.k, "B": shape.k if shape.layout == "NT" else shape.n}
    unaligned = {name: n for name, n in rows.items() if (n * ELEMENT_BYTES) % TMA_ALIGN}
    got = ", ".join(f"{name} rows of {n} elements" for name, n in unaligned.items())
    if config.async_mma and unaligned:
        # Every load of the asynchronous pipeline is an explicit TMA copy.
        raise ValueError(
            "GemmConfig.async_mma=True: needs the rows of A and B 16-byte aligned (a "
            f"multiple of 8 elements), got {got}"
        )
    check_split_loads(rows, config)
    if config.stream_k and len(unaligned) == len(rows):
        # Without a TMA load TileLang 0.1.15 pipelines the K loop with cp.async alone,
        # whose waits need a loop of fixed length (codegen: "Downcast from tirx.Sub to
        # ir.IntImm failed"); a stream-K segment's length is the block's.
        raise ValueError(
            f"GemmConfig.stream_k={config.stream_k}: needs the rows of A or of B 16-byte "
            f"aligned (a multiple of 8 elements), got {got}"
        )


def make_gemm(shape: GemmShape, config: GemmConfig, delay: bool = False):
    """Return the TileLang program for ``shape`` under ``config``. Pure: compiles nothing.

    ``delay`` (test-only, never part of a config's identity): the kernel takes a fourth
    argument, ``delay_cycles``, and every thread of every block spins that many SM clock
    cycles once the block's barriers are set up, before its pipeline starts. The gate's
    self-test slows a kernel this way, with no second launch."""
    check_combination(shape, config)
    if config.pad:
        return make_gemm(padded(shape), replace(config, pad=False), delay)
    if config.async_mma:
        from kernels.gemm_async import make_gemm_async

        return make_gemm_async(shape, config, delay)
    # No ``from __future__ import annotations`` in this module: TileLang evaluates the
    # T.Tensor annotations below against this closure.
    import tilelang.cuda.language as TC
    import tilelang.language as T

    M, N, K = shape.m, shape.n, shape.k
    block_M, block_N, block_K = config.block_m, config.block_n, config.block_k
    dtype, accum_dtype = shape.dtype, config.accum_dtype
    trans_B = shape.layout == "NT"
    b_tile = (block_N, block_K) if trans_B else (block_K, block_N)
    policy = warp_policy(config)
    tiles_m, tiles_n = T.ceildiv(M, block_M), T.ceildiv(N, block_N)

    # ``cp_async``: the operand loads and the shared-memory store of C by threads, not TMA.
    copy = functools.partial(TC.copy, disable_tma=True) if config.cp_async else T.copy

    # K steps per block: all of them, or one split's share (the last split may run past K;
    # TMA fills out-of-range tiles with zeros, which add nothing).
    k_steps = T.ceildiv(K, block_K * config.split_k)
    # A split's partial tile is reduce-added into C by TMA from shared memory where C's
    # rows are 16-byte aligned (TMA's rule), else atomically from registers (an element
    # at a time, two where N is even), as stream-K's are.
    split_by_tma = config.split_k > 1 and (N * ELEMENT_BYTES) % TMA_ALIGN == 0

    @T.macro
    def tile(A, B, C, A_shared, B_shared, C_local, C_shared, tm, tn, k_first, k_count, partial):
        """K steps [k_first, k_first + k_count) of one output tile: global -> shared
        (pipelined) -> tensor cores -> fragment -> C, added into C where ``partial``."""
        # The fragment lives in registers that hold garbage at launch (and the previous
        # tile's sums in a persistent block); every K step accumulates into it, so it
        # must start at zero.
        T.clear(C_local)
        for ko in T.Pipelined(k_count, num_stages=config.num_stages):
            kk = k_first + ko
            copy(A[tm * block_M, kk * block_K], A_shared)
            if trans_B:
                copy(B[tn * block_N, kk * block_K], B_shared)
            else:
                copy(B[kk * block_K, tn * block_N], B_shared)
            T.gemm(A_shared, B_shared, C_local, transpose_B=trans_B, policy=policy)
        if split_by_tma:
            T.copy(C_local, C_shared)
            TC.atomic_add(C[tm * block_M, tn * block_N], C_shared, use_tma=True)
        elif config.split_k > 1:
            T.atomic_add(C[tm * block_M, tn * block_N], C_local)
        elif config.stream_k and config.smem_epilogue:
            T.copy(C_local, C_shared)
            if partial:
                TC.atomic_add(C[tm * block_M, tn * block_N], C_shared, use_tma=True)
            else:
                T.copy(C_shared, C[tm * block_M, tn * block_N])
        elif config.stream_k:
            if partial:
                T.atomic_add(C[tm * block_M, tn * block_N], C_local)
            else:
                T.copy(C_local, C[tm * block_M, tn * block_N])
        elif config.smem_epilogue:
            T.copy(C_local, C_shared)
            copy(C_shared, C[tm * block_M, tn * block_N])
        else:
            T.copy(C_local, C[tm * block_M, tn * block_N])

    swap = config.swap_ab
    # With the operands exchanged the first operand's tile is B's block_m rows of op(B)
    # (B^T's, read from B [K, N] transposed under NN), the second A's block_n rows.
    x_tile = (block_M, block_K) if trans_B else (block_K, block_M)

    @T.macro
    def swapped_tile(
        A, B, C, X_shared, Y_shared, C_local, C_shared, tm, tn, k_first, k_count, partial
    ):
        """K steps [k_first, k_first + k_count) of one output tile with the operands
        exchanged: rows ``tm`` * block_m of C^T (columns of C) by rows ``tn`` * block_n of
        C, computed as op(B) A^T and written back transposed, added into C where
        ``partial``."""
        T.clear(C_local)
        for ko in T.Pipelined(k_count, num_stages=config.num_stages):
            kk = k_first + ko
            if trans_B:
                T.copy(B[tm * block_M, kk * block_K], X_shared)
            else:
                T.copy(B[kk * block_K, tm * block_M], X_shared)
            T.copy(A[tn * block_N, kk * block_K], Y_shared)
            T.gemm(X_shared, Y_shared, C_local, transpose_A=not trans_B, transpose_B=True)
        if split_by_tma:
            # A split's partial tile, transposed into shared memory and reduce-added by
            # TMA, which clips the rows and columns past C (element by element from
            # registers it ran 0.13x on 96x7168x2048; see ``kernels.tuned``).
            for i, j in T.Parallel(block_M, block_N):
                C_shared[j, i] = C_local[i, j]
            TC.atomic_add(C[tn * block_N, tm * block_M], C_shared, use_tma=True)
        else:
            for i, j in T.Parallel(block_M, block_N):
                if tn * block_N + j < M and tm * block_M + i < N:
                    if partial:
                        T.atomic_add(C[tn * block_N + j, tm * block_M + i], C_local[i, j])
                    else:
                        C[tn * block_N + j, tm * block_M + i] = C_local[i, j]

    plan = StreamK.plan(shape, config) if config.stream_k else None
    blocks = config.persistent or config.stream_k  # a persistent grid's size, else 0
    ops = Ops(min=T.min, max=T.max, select=T.if_then_else)
    # The epilogue buffer is only allocated when used; a 1-element stand-in otherwise.
    staged_c = config.smem_epilogue or split_by_tma
    # One block per output tile (and K split): x over N's tiles and y over M's, or the
    # other way round with the operands exchanged.
    grid_x, grid_y = (T.ceildiv(M, block_N), T.ceildiv(N, block_M)) if swap else (tiles_n, tiles_m)
    # Exchanged, the tile is staged as C's: block_n rows by block_m columns.
    c_tile = ((block_N, block_M) if swap else (block_M, block_N)) if staged_c else (1, 1)

    @T.macro
    def launch(A, B, C, delay):
        """The grid, its buffers and its tiles; ``delay`` (None: none) is the test-only
        spin every thread of a block runs once its barriers are set up."""
        if blocks:
            with T.Kernel(blocks, threads=config.threads) as block_id:
                A_shared = T.alloc_shared((block_M, block_K), dtype)
                B_shared = T.alloc_shared(b_tile, dtype)
                C_local = T.alloc_fragment((block_M, block_N), accum_dtype)
                C_shared = T.alloc_shared(c_tile, dtype)
                if delay is not None:
                    T.import_source(DELAY_SOURCE)
                    T.call_extern("handle", DELAY_FUNCTION, delay)
                buffers = (A_shared, B_shared, C_local, C_shared)
                if config.persistent:
                    for tm, tn in T.Persistent([tiles_m, tiles_n], blocks, block_id):
                        tile(A, B, C, *buffers, tm, tn, 0, k_steps, False)
                else:
                    # The block's whole tiles, then its stream-K segments (kernels/schedules.py).
                    for u in T.serial(plan.units):
                        t, k_first, k_count = plan.unit(block_id, u, ops)
                        tm, tn = tile_coords(t, plan.tiles_m, plan.tiles_n, plan.panel, ops)
                        if k_count > 0:
                            partial = k_count < plan.k_steps
                            tile(A, B, C, *buffers, tm, tn, k_first, k_count, partial)
        else:
            with T.Kernel(grid_x, grid_y, config.split_k, threads=config.threads) as (bx, by, bz):
                A_shared = T.alloc_shared(x_tile if swap else (block_M, block_K), dtype)
                B_shared = T.alloc_shared((block_N, block_K) if swap else b_tile, dtype)
                C_local = T.alloc_fragment((block_M, block_N), accum_dtype)
                C_shared = T.alloc_shared(c_tile, dtype)
                if config.swizzle:
                    T.use_swizzle(panel_size=config.swizzle)
                if delay is not None:
                    T.import_source(DELAY_SOURCE)
                    T.call_extern("handle", DELAY_FUNCTION, delay)
                buffers = (A_shared, B_shared, C_local, C_shared)
                split = config.split_k > 1
                if swap:
                    swapped_tile(A, B, C, *buffers, by, bx, bz * k_steps, k_steps, split)
                else:
                    tile(A, B, C, *buffers, by, bx, bz * k_steps, k_steps, split)

    return entry_point(shape, launch, delay)


def warp_policy(config: GemmConfig):
    """TileLang's warp policy for ``config.policy``: how the consumer warpgroups split
    the tile for wgmma (``wgmma_partition``), in either pipeline."""
    import tilelang.language as T

    return {
        "square": T.GemmWarpPolicy.Square,
        "row": T.GemmWarpPolicy.FullRow,
        "col": T.GemmWarpPolicy.FullCol,
    }[config.policy]


def entry_point(shape: GemmShape, launch, delay: bool, fixup: tuple | None = None):
    """The kernel's signature around ``launch`` (a ``T.macro`` taking A, B, C and the
    test-only delay's cycles, None without it): A, B and C of ``shape``, and with
    ``delay`` a fourth argument, ``delay_cycles``. Both pipelines share it. With
    ``fixup`` (``kernels.schedules.fixup_buffers``: slots, rows, columns, flags) the
    stream-K workspace and flags follow C, and ``launch`` takes them after the delay."""
    import tilelang.language as T

    M, N, K, dtype, b_shape = shape.m, shape.n, shape.k, shape.dtype, shape.b_shape
    if fixup is not None:
        if delay:
            raise ValueError("delay: the test-only delay is not built into GemmConfig.fixup")
        slots, rows, cols, flags = fixup

        @T.prim_func
        def gemm(
            A: T.Tensor((M, K), dtype),
            B: T.Tensor(b_shape, dtype),
            C: T.Tensor((M, N), dtype),
            W: T.Tensor((slots, rows, cols), "float32"),
            F: T.Tensor((flags,), "int32"),
        ):
            launch(A, B, C, None, W, F)

        return gemm
    if delay:

        @T.prim_func
        def gemm(
            A: T.Tensor((M, K), dtype),
            B: T.Tensor(b_shape, dtype),
            C: T.Tensor((M, N), dtype),
            delay_cycles: T.int64,
        ):
            launch(A, B, C, delay_cycles)

    else:

        @T.prim_func
        def gemm(
            A: T.Tensor((M, K), dtype),
            B: T.Tensor(b_shape, dtype),
            C: T.Tensor((M, N), dtype),
        ):
            launch(A, B, C, None)

    return gemm


def check_device_smem(config: GemmConfig) -> None:
    """The visible GPU's opt-in shared memory per block can be below sm_90's 227 KiB."""
    import torch

    if not torch.cuda.is_available():
        return
    props = torch.cuda.get_device_properties(torch.cuda.current_device())
    limit = getattr(props, "shared_memory_per_block_optin", SM90_SMEM_LIMIT)
    if config.smem_bytes > limit:
        raise ValueError(
            f"GemmConfig.num_stages={config.num_stages}: needs {config.smem_bytes} bytes of "
            f"shared memory, must be <= {limit} on {props.name}"
        )


def compile_target(arch: str | None) -> Any:
    # None lets TileLang detect the visible GPU; an arch such as "sm_90a" cross-compiles.
    return "cuda" if arch is None else {"kind": "cuda", "arch": arch}


@functools.cache
def _compile_gemm(
    shape: GemmShape, config: GemmConfig, arch: str | None = None, delay: bool = False
):
    """Compile entry point: lower and build one (shape, config, arch, delay), memoised."""
    import tilelang

    return tilelang.compile(
        make_gemm(shape, config, delay),
        target=compile_target(arch),
        pass_configs=pass_configs(config),
    )


def pass_configs(config: GemmConfig) -> dict[str, bool]:
    """TileLang's pass options for ``config``: none, or, under ``GemmConfig.cp_async``,
    the one that keeps warp specialisation off, so that every thread issues the copies
    ``make_gemm`` marks ``disable_tma``. With no TMA copy left TileLang 0.1.15 does not
    specialise anyway (the same sm_90a source either way); the option pins it."""
    if not config.cp_async:
        return {}
    from tilelang.transform import PassConfigKey

    return {PassConfigKey.TL_DISABLE_WARP_SPECIALIZED: True}


def compile_gemm(
    shape: GemmShape, config: GemmConfig, arch: str | None = None, *, delay: bool = False
) -> "GemmKernel":
    """Compiled kernel for ``shape`` under ``config``, wrapped with argument checks.
    ``delay=True`` builds the test-only variant (``make_gemm``); set the wrapper's
    ``delay_cycles`` to slow it."""
    if arch is None:
        check_device_smem(config)
    return GemmKernel(shape, config, _compile_gemm(shape, config, arch, delay), delay)


class GemmKernel:
    """A compiled GEMM that checks its tensors before launching.

    ``kernel(a, b)`` returns a new C; ``kernel(a, b, out)`` writes into ``out``. A kernel
    built with the test-only delay spins ``delay_cycles`` per block (0: no spin). Under
    ``GemmConfig.fixup`` it holds a workspace and flags per device, allocated (zeroed) at
    its first launch there, which every launch leaves at zero again: one launch of it
    at a time per device (its launches on one stream run one after another). Under
    ``GemmConfig.pad`` it holds the padded operands per device the same way.
    """

    __slots__ = (
        "shape", "config", "jit_kernel", "delay", "delay_cycles", "added_from", "buffers",
        "pads", "built",
    )  # fmt: skip

    def __init__(
        self, shape: GemmShape, config: GemmConfig, jit_kernel: Any, delay: bool = False
    ) -> None:
        self.shape = shape
        self.config = config
        self.jit_kernel = jit_kernel
        self.delay = delay
        self.delay_cycles = 0
        self.built = kernel_shape(shape, config)  # the shape the kernel was built for
        self.added_from = added_rows(self.built, config)
        self.buffers: dict = {}  # device -> (workspace, flags), under GemmConfig.fixup
        self.pads: dict = {}  # device -> (A, B, C) padded or None, under GemmConfig.pad

    def padded_buffers(self, device) -> tuple:
        """Under ``GemmConfig.pad``, the zero-filled operands of the kernel's shape on
        ``device`` (None for an operand whose rows need no padding), allocated at the
        first launch there: only their leading rows and columns are ever written, so
        the padding stays zero."""
        if device not in self.pads:
            import torch

            dtype = getattr(torch, self.shape.dtype)
            pairs = [
                (self.shape.a_shape, self.built.a_shape),
                (self.shape.b_shape, self.built.b_shape),
                (self.shape.c_shape, self.built.c_shape),
            ]
            self.pads[device] = tuple(
                None if small == want else torch.zeros(want, dtype=dtype, device=device)
                for small, want in pairs
            )
        return self.pads[device]

    def fixup_buffers(self, device) -> tuple:
        """The workspace and flags of ``fixup_buffers`` on ``device``, zeroed at first."""
        if device not in self.buffers:
            import torch

            slots, rows, cols, flags = fixup_buffers(self.built, self.config)
            self.buffers[device] = (
                torch.empty((slots, rows, cols), dtype=torch.float32, device=device),
                torch.zeros((flags,), dtype=torch.int32, device=device),
            )
        return self.buffers[device]

    @property
    def blocks(self) -> int:
        """Blocks in one launch's grid."""
        return grid_blocks(self.built, self.config)

    @property
    def source(self) -> str:
        """Generated CUDA source."""
        return self.jit_kernel.get_kernel_source()

    def check_args(self, a, b, out) -> None:
        import torch

        want_dtype = getattr(torch, self.shape.dtype)
        expected = (
            ("a", a, self.shape.a_shape),
            ("b", b, self.shape.b_shape),
            ("out", out, self.shape.c_shape),
        )
        for name, t, _ in expected:
            if not isinstance(t, torch.Tensor):
                raise TypeError(f"{name}: expected a torch.Tensor, got {type(t).__name__}")
        # Shapes first: a transposed or swapped operand is the likeliest mistake.
        for name, t, want_shape in expected:
            if tuple(t.shape) != want_shape:
                raise ValueError(
                    f"{name}.shape={tuple(t.shape)}: must be {want_shape} for {self.shape.id}"
                )
        for name, t, _ in expected:
            if t.dtype != want_dtype:
                raise ValueError(f"{name}.dtype={t.dtype}: must be {want_dtype}")
        # Memory layout before the device: it is the same rule on any device, and a CPU
        # test can reach it.
        for name, t, _ in expected:
            if not t.is_contiguous():
                raise ValueError(
                    f"{name}: must be row-major contiguous (strides {t.stride()}); "
                    "call .contiguous() or use the NT layout for a transposed B"
                )
        for name, t, _ in expected:
            # A view at an odd element offset passes every check above and then fails
            # inside TileLang ("Invalid TMA descriptor arguments"): a TMA descriptor needs
            # a 16-byte aligned global address. Its other rule, row strides of a multiple
            # of 16 bytes, is the compiled shape's: contiguity makes the stride the row
            # length, and TileLang uses TMA only for rows of a multiple of 16 bytes.
            misaligned = t.data_ptr() % TMA_ALIGN
            if misaligned:
                raise ValueError(
                    f"{name} ({OPERANDS[name]}): data pointer {t.data_ptr():#x} must be "
                    f"{TMA_ALIGN}-byte aligned for TMA, is {misaligned} bytes past a boundary "
                    f"(storage offset {t.storage_offset()} elements); pass a fresh tensor or "
                    ".clone() the view"
                )
        for name, t, _ in expected:
            if t.device.type != "cuda":
                raise ValueError(f"{name}.device={t.device}: must be a CUDA device")
            if t.device != a.device:
                raise ValueError(f"{name}.device={t.device}: must match a.device={a.device}")

    def __call__(self, a, b, out=None):
        if out is None:
            import torch

            if not isinstance(a, torch.Tensor):
                raise TypeError(f"a: expected a torch.Tensor, got {type(a).__name__}")
            out = torch.empty(self.shape.c_shape, dtype=a.dtype, device=a.device)
        self.check_args(a, b, out)
        c = out
        if self.config.pad:
            a, b, c = self.pad_operands(a, b, out)
        if self.added_from is not None:
            c[self.added_from :].zero_()  # partial tiles are added into these rows
        if self.delay:
            self.jit_kernel(a, b, c, self.delay_cycles)
        elif self.config.fixup:
            self.jit_kernel(a, b, c, *self.fixup_buffers(a.device))
        else:
            self.jit_kernel(a, b, c)
        if c is not out:
            out.copy_(c[:, : self.shape.n])  # C's padded buffer (``GemmConfig.pad``)
        return out

    def pad_operands(self, a, b, out) -> tuple:
        """``GemmConfig.pad``: A and B copied into their padded buffers where their rows
        need it; the buffer C is written to (``out``, or its padded buffer where N is)."""
        a_pad, b_pad, c_pad = self.padded_buffers(a.device)
        if a_pad is not None:
            a_pad[:, : a.shape[1]].copy_(a)
        if b_pad is not None:
            b_pad[: b.shape[0], : b.shape[1]].copy_(b)
        return (
            a if a_pad is None else a_pad,
            b if b_pad is None else b_pad,
            out if c_pad is None else c_pad,
        )
