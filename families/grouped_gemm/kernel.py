"""Grouped TileLang GEMM for mixture-of-experts layers: G experts, expert g multiplies its
own M_g rows of A by its own weight B[g].

    A: [sum M_g, K]   rows of expert 0, then expert 1, ... (an expert may have no rows)
    B: [G, K, N]      one K x N weight per expert
    C: [sum M_g, N]   C[rows of g] = A[rows of g] @ B[g]

One launch covers every expert: the grid is (N tiles, M tiles of all experts), where an
expert's rows are cut into ceil(M_g / block_M) tiles of its own, so no tile straddles two
experts and an expert with no rows has no tile. Each block reads its expert, first row
and row count from three small int32 tables (``tile_table``), stages A and B[g] tiles
through shared memory in a ``T.Pipelined`` K loop, multiplies on the tensor cores into an
fp32 fragment and writes back only the rows of its own expert (and columns inside N): a
tile's last rows may lie in the next expert, or past the end of A.

The config is a ``GemmConfig`` (block sizes, threads, stages, warp policy); the options
that reshape the grid or the epilogue of the dense GEMM are refused by name.

Test-only, for the gate self-test: ``compile_grouped_gemm(..., delay=True)`` builds the
kernel with one more argument, last: cycles that every thread of every block spins on
the SM clock before its K loop (the dense GEMM's ``DELAY_SOURCE``); the wrapper's
``delay_cycles`` sets it. No tracked benchmark builds it.

    from families.grouped_gemm.kernel import GroupedGemmShape, compile_grouped_gemm
    kernel = compile_grouped_gemm(GroupedGemmShape((128, 0, 300), 4096, 4096), GemmConfig())
    kernel(a, b, out)
"""

import functools
import itertools
from dataclasses import dataclass
from typing import Any

from kernels.gemm import (
    DELAY_FUNCTION,
    DELAY_SOURCE,
    DTYPES,
    ELEMENT_BYTES,
    GemmConfig,
    check_device_smem,
    check_int,
    check_split_loads,
    compile_target,
)

# GemmConfig fields the grouped kernel does not implement, each with the value it needs.
UNSUPPORTED = {
    "swizzle": 0,
    "smem_epilogue": False,
    "persistent": 0,
    "split_k": 1,
    "async_mma": False,
    "multicast": "",
    "pingpong": False,
    "stream_k": 0,
    "swap_ab": False,
    "cp_async": False,
}


@dataclass(frozen=True, slots=True)
class GroupedGemmShape:
    """Rows per expert, shared N and K, and the input dtype of one grouped GEMM."""

    m_sizes: tuple[int, ...]
    n: int
    k: int
    dtype: str = "float16"

    def __post_init__(self) -> None:
        if not isinstance(self.m_sizes, tuple):
            raise ValueError(
                f"GroupedGemmShape.m_sizes={self.m_sizes!r}: must be a tuple of row counts"
            )
        if not self.m_sizes:
            raise ValueError("GroupedGemmShape.m_sizes=(): must name at least one expert (G >= 1)")
        for g, rows in enumerate(self.m_sizes):
            check_int("GroupedGemmShape", f"m_sizes[{g}]", rows, low=0)
        if sum(self.m_sizes) == 0:
            raise ValueError(
                f"GroupedGemmShape.m_sizes={self.m_sizes!r}: must sum to > 0 (every expert empty)"
            )
        for name in ("n", "k"):
            check_int("GroupedGemmShape", name, getattr(self, name))
        if self.dtype not in DTYPES:
            raise ValueError(
                f"GroupedGemmShape.dtype={self.dtype!r}: must be one of {sorted(DTYPES)}"
            )

    @property
    def groups(self) -> int:
        return len(self.m_sizes)

    @property
    def total_m(self) -> int:
        return sum(self.m_sizes)

    @property
    def offsets(self) -> tuple[int, ...]:
        """First row of each expert in A and C; the last entry is the total row count."""
        out = [0]
        for rows in self.m_sizes:
            out.append(out[-1] + rows)
        return tuple(out)

    @property
    def id(self) -> str:
        """Readable id, e.g. ``g3_m128-0-300_n4096_k4096_f16``."""
        rows = "-".join(str(m) for m in self.m_sizes)
        return f"g{self.groups}_m{rows}_n{self.n}_k{self.k}_{DTYPES[self.dtype]}"

    @property
    def flops(self) -> int:
        """One multiply and one add per (row, n, k) triple, summed over the experts."""
        return 2 * self.total_m * self.n * self.k

    @property
    def a_shape(self) -> tuple[int, int]:
        return (self.total_m, self.k)

    @property
    def b_shape(self) -> tuple[int, int, int]:
        return (self.groups, self.k, self.n)

    @property
    def c_shape(self) -> tuple[int, int]:
        return (self.total_m, self.n)

    @property
    def min_bytes(self) -> int:
        """Bytes moved if A, the weights of the experts that have rows, and C are each
        touched once: an expert with no rows never has its weight read."""
        used = sum(1 for rows in self.m_sizes if rows)
        return ELEMENT_BYTES * (
            self.total_m * self.k + used * self.k * self.n + self.total_m * self.n
        )

    def tiles(self, block_m: int) -> int:
        """M tiles over all experts: each expert's rows in tiles of ``block_m`` of its own."""
        return sum(-(-rows // block_m) for rows in self.m_sizes)


def check_config(config: GemmConfig) -> None:
    """Refuse, by name, the GemmConfig options this kernel does not implement."""
    for name, needed in UNSUPPORTED.items():
        value = getattr(config, name)
        if value != needed:
            raise ValueError(
                f"GemmConfig.{name}={value!r}: must be {needed!r} for the grouped GEMM (its "
                "grid is one block per expert tile, written back row by row)"
            )


def check_shape_config(shape: GroupedGemmShape, config: GemmConfig) -> None:
    """``check_config``, then the rule that ties a config to the shape: where TMA can
    load A's rows (K elements) and not B's (N), or the other way round, the tile's
    accumulators must fit the registers left (``kernels.gemm.check_split_loads``; 128x256
    spilled 1.2 KB a thread at N or K = 1002, 64x128 none)."""
    check_config(config)
    check_split_loads({"A": shape.k, "B": shape.n}, config)


def fits(shape: GroupedGemmShape, config: GemmConfig) -> bool:
    try:
        check_shape_config(shape, config)
    except ValueError:
        return False
    return True


def candidates() -> list[GemmConfig]:
    """The config space: wgmma tiles of 64 or 128 rows (an expert's rows round up to
    whole tiles, so small experts favour 64), 128 or 256 columns, K steps of 64, one or
    two consumer warpgroups, 3 or 4 stages; combinations the validator refuses are left
    out."""
    out = []
    for block_m, block_n, threads, stages in itertools.product(
        (64, 128), (128, 256), (128, 256), (3, 4)
    ):
        try:
            out.append(GemmConfig(block_m, block_n, 64, threads, stages))
        except ValueError:
            continue  # over the register or shared-memory budget, or no wgmma split
    return out


# How many times the rows of 64-row tiles the 128-row tiles may pad to before the small
# tile is chosen. On the H200 (``cli --moe``) the 128 x 256 tile ran at 367-401 TFLOPS of
# useful work on the skewed 64-expert layouts, which it pads 1.23 times as much as 64-row
# tiles (1.45 times their rows), and 64 x 128 at 289-319 on 128-row experts it pads none.
PAD_SLACK = 1.5


def padded_rows(shape: GroupedGemmShape, block_m: int) -> int:
    """Rows the tiles of ``block_m`` rows cover: each expert's rows rounded up."""
    return sum(-(-rows // block_m) * block_m for rows in shape.m_sizes)


def heuristic(shape: GroupedGemmShape) -> GemmConfig:
    """A sound first config: the dense GEMM's large tile (128 x 256) unless rounding every
    expert's rows up to 128 covers over ``PAD_SLACK`` times the rows that 64-row tiles do
    (many experts of a few rows), or its accumulators do not fit where only one of A's
    and B's rows are 16-byte aligned (``fits``); then 64 x 128."""
    large, small = GemmConfig(128, 256, 64, 256, 3), GemmConfig(64, 128, 64, 128, 4)
    if padded_rows(shape, 128) > PAD_SLACK * padded_rows(shape, 64) or not fits(shape, large):
        return small
    return large


def tile_table(shape: GroupedGemmShape, block_m: int) -> tuple[list[int], list[int], list[int]]:
    """Per M tile: its expert, its first row in A and C, and how many of its rows belong
    to that expert (the rest of the tile is never written)."""
    groups, rows, counts = [], [], []
    for g, (start, size) in enumerate(zip(shape.offsets, shape.m_sizes, strict=False)):
        for first in range(0, size, block_m):
            groups.append(g)
            rows.append(start + first)
            counts.append(min(block_m, size - first))
    return groups, rows, counts


def make_grouped_gemm(shape: GroupedGemmShape, config: GemmConfig, delay: bool = False):
    """Return the TileLang program for ``shape`` under ``config``. Pure: compiles nothing.
    ``delay`` (test-only): the program takes ``delay_cycles`` last and spins them first."""
    check_shape_config(shape, config)
    # No ``from __future__ import annotations`` in this module: TileLang evaluates the
    # T.Tensor annotations below against this closure.
    import tilelang.language as T

    G, M, N, K = shape.groups, shape.total_m, shape.n, shape.k
    block_M, block_N, block_K = config.block_m, config.block_n, config.block_k
    dtype, accum_dtype = shape.dtype, config.accum_dtype
    tiles = shape.tiles(block_M)
    policy = {
        "square": T.GemmWarpPolicy.Square,
        "row": T.GemmWarpPolicy.FullRow,
        "col": T.GemmWarpPolicy.FullCol,
    }[config.policy]

    @T.macro
    def body(A, B, C, tile_group, tile_row, tile_rows, delay):
        with T.Kernel(T.ceildiv(N, block_N), tiles, threads=config.threads) as (bx, by):
            A_shared = T.alloc_shared((block_M, block_K), dtype)
            B_shared = T.alloc_shared((block_K, block_N), dtype)
            C_local = T.alloc_fragment((block_M, block_N), accum_dtype)
            if delay is not None:
                T.import_source(DELAY_SOURCE)
                T.call_extern("handle", DELAY_FUNCTION, delay)
            g = tile_group[by]
            m_start = tile_row[by]
            rows = tile_rows[by]
            # Registers hold garbage at launch; every K step accumulates into them.
            T.clear(C_local)
            for ko in T.Pipelined(T.ceildiv(K, block_K), num_stages=config.num_stages):
                # Rows past the expert's end are the next expert's (or, past A's end,
                # zeros): they only reach rows of C_local that are never written back.
                T.copy(A[m_start : m_start + block_M, ko * block_K : (ko + 1) * block_K], A_shared)
                T.copy(
                    B[g, ko * block_K : (ko + 1) * block_K, bx * block_N : (bx + 1) * block_N],
                    B_shared,
                )
                T.gemm(A_shared, B_shared, C_local, policy=policy)
            for i, j in T.Parallel(block_M, block_N):
                if i < rows and bx * block_N + j < N:
                    C[m_start + i, bx * block_N + j] = C_local[i, j]

    if delay:

        @T.prim_func
        def grouped_gemm(
            A: T.Tensor((M, K), dtype),
            B: T.Tensor((G, K, N), dtype),
            C: T.Tensor((M, N), dtype),
            tile_group: T.Tensor((tiles,), "int32"),
            tile_row: T.Tensor((tiles,), "int32"),
            tile_rows: T.Tensor((tiles,), "int32"),
            delay_cycles: T.int64,
        ):
            body(A, B, C, tile_group, tile_row, tile_rows, delay_cycles)

        return grouped_gemm

    @T.prim_func
    def grouped_gemm(
        A: T.Tensor((M, K), dtype),
        B: T.Tensor((G, K, N), dtype),
        C: T.Tensor((M, N), dtype),
        tile_group: T.Tensor((tiles,), "int32"),
        tile_row: T.Tensor((tiles,), "int32"),
        tile_rows: T.Tensor((tiles,), "int32"),
    ):
        body(A, B, C, tile_group, tile_row, tile_rows, None)

    return grouped_gemm


@functools.cache
def _compile_grouped_gemm(
    shape: GroupedGemmShape, config: GemmConfig, arch: str | None = None, delay: bool = False
):
    """Compile entry point: lower and build one (shape, config, arch, delay), memoised."""
    import tilelang

    program = make_grouped_gemm(shape, config, delay)
    return tilelang.compile(program, target=compile_target(arch))


def compile_grouped_gemm(
    shape: GroupedGemmShape, config: GemmConfig, arch: str | None = None, *, delay: bool = False
) -> "GroupedGemmKernel":
    """Compiled kernel for ``shape`` under ``config``, wrapped with argument checks;
    ``arch`` (e.g. "sm_90a") cross-compiles, None builds for the visible GPU. ``delay``
    (test-only) builds the variant whose ``delay_cycles`` slows every block."""
    check_shape_config(shape, config)
    if arch is None:
        check_device_smem(config)
    jit_kernel = _compile_grouped_gemm(shape, config, arch, delay)
    return GroupedGemmKernel(shape, config, jit_kernel, delay)


class GroupedGemmKernel:
    """A compiled grouped GEMM that checks its tensors before launching.

    ``kernel(a, b, out)`` writes into ``out`` and returns it. The tile tables are made on
    the first call, on ``a``'s device, and reused. One built with the test-only delay
    spins ``delay_cycles`` per block (0: no spin)."""

    __slots__ = ("shape", "config", "jit_kernel", "_tables", "delay", "delay_cycles")

    def __init__(
        self, shape: GroupedGemmShape, config: GemmConfig, jit_kernel: Any, delay: bool = False
    ) -> None:
        self.shape = shape
        self.config = config
        self.jit_kernel = jit_kernel
        self._tables: dict[Any, tuple] = {}
        self.delay = delay
        self.delay_cycles = 0

    @property
    def blocks(self) -> int:
        """Blocks in one launch's grid: N tiles times every expert's row tiles."""
        return -(-self.shape.n // self.config.block_n) * self.shape.tiles(self.config.block_m)

    @property
    def source(self) -> str:
        """Generated CUDA source."""
        return self.jit_kernel.get_kernel_source()

    def tables(self, device) -> tuple:
        if device not in self._tables:
            import torch

            self._tables[device] = tuple(
                torch.tensor(column, dtype=torch.int32, device=device)
                for column in tile_table(self.shape, self.config.block_m)
            )
        return self._tables[device]

    def check_args(self, a, b, out) -> None:
        import torch

        want_dtype = getattr(torch, self.shape.dtype)
        expected = (
            ("a", a, self.shape.a_shape),
            ("b", b, self.shape.b_shape),
            ("out", out, self.shape.c_shape),
        )
        for name, t, want_shape in expected:
            if not isinstance(t, torch.Tensor):
                raise TypeError(f"{name}: expected a torch.Tensor, got {type(t).__name__}")
            if tuple(t.shape) != want_shape:
                raise ValueError(
                    f"{name}.shape={tuple(t.shape)}: must be {want_shape} for {self.shape.id}"
                )
            if t.dtype != want_dtype:
                raise ValueError(f"{name}.dtype={t.dtype}: must be {want_dtype}")
            if not t.is_contiguous():
                raise ValueError(f"{name}: must be row-major contiguous (strides {t.stride()})")
            if t.device.type != "cuda" or t.device != a.device:
                raise ValueError(f"{name}.device={t.device}: must be a.device, a CUDA device")

    def __call__(self, a, b, out):
        self.check_args(a, b, out)
        if self.delay:
            self.jit_kernel(a, b, out, *self.tables(a.device), self.delay_cycles)
        else:
            self.jit_kernel(a, b, out, *self.tables(a.device))
        return out
