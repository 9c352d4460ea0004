"""How the dense GEMM's output tiles and K steps are shared out over its blocks: the
grid's size, the rows of C that blocks add into (zeroed before each launch), and the
stream-K schedule (``GemmConfig.stream_k``): which block computes which K steps of which
output tile.

Plain, swizzled and split-K grids launch one block per output tile (per tile and K
split); a persistent grid (``GemmConfig.persistent``) loops its blocks over the tiles with
``T.Persistent``, or, on the hand-written pipeline, takes them in turn in the order of
``tile_coords`` (panels of ``config.swizzle``). Under stream-K, ``stream_k`` persistent
blocks (the caller passes the GPU's SM count) take the output tiles in the order
``T.use_swizzle(config.swizzle)`` launches them (panels of ``swizzle`` tile rows walked
column by column, every other panel backwards; row-major for 0), in two parts (the
data-parallel + stream-K hybrid of Osama et al., "Stream-K: Work-centric Parallel
Decomposition for Dense Matrix-Matrix Multiplication on the GPU", PPoPP 2023):

- data-parallel: the first ``waves * blocks`` tiles, whole, block ``b`` taking tiles
  ``b``, ``b + blocks``, ... and writing each once, as the plain kernel does;
- stream-K: the rest (the last, partial wave of tiles; plus one full wave where that
  remainder would give each block less than ``MIN_SHARE`` of a tile's K steps and the
  partial tiles are added from registers: the "two-tile" variant), whose K steps, laid
  end to end tile after tile, are cut into ``blocks`` equal ranges (the first ones a step
  longer where they do not divide). A block's range crosses one to a few tiles; where it
  covers a whole tile it writes it, otherwise it adds its partial sum into C, zeroed over
  the stream-K tiles' rows before launch.

``shape`` and ``config`` below are a ``GemmShape`` and a ``GemmConfig`` (kernels/gemm.py
imports this module). The stream-K schedule is integer arithmetic written once: the
kernel evaluates it on TileLang expressions (``Ops`` of ``T.min``, ``T.max``,
``T.if_then_else``), the tests on Python ints (``INT_OPS``).
"""

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

# Least share of one tile's K steps that a block's stream-K range gets where the partial
# tiles are added into C from registers (element atomics); under it one more wave of
# tiles is moved from the data-parallel part into the stream-K part, so that the blocks
# that share a tile finish it at different times. A TMA reduce-add (the shared-memory
# epilogue) takes a whole tile's sums in the L2 at once, and there the small remainder
# is shared out as it is. On the H200 (fp16, 256x128x64 tiles, 3 stages, a block per SM,
# CUPTI, against torch.matmul): 2500x1800x4000 (18 tiles left over) ran 0.825x with the
# remainder alone against 0.749x two-tile, and 3000x2000x4096 (60 left over) 0.840x
# against 0.771x; with register atomics the remainder alone ran 0.148x and 0.312x,
# against 0.675x and 0.700x two-tile. Where the shares are summed in the kernel
# (``GemmConfig.fixup``) the wave joins too: each block's range is then a whole tile's
# K steps or more, so no tile has more than two sharers to wait for and add up.
MIN_SHARE = 0.5


@dataclass(frozen=True, slots=True)
class Ops:
    """The operations the schedule needs beyond + - * // %: on Python ints here, on
    TileLang expressions in the kernel (``T.min``, ``T.max``, ``T.if_then_else``)."""

    min: Callable[[Any, Any], Any]
    max: Callable[[Any, Any], Any]
    select: Callable[[Any, Any, Any], Any]


INT_OPS = Ops(min=min, max=max, select=lambda cond, a, b: a if cond else b)


def tile_coords(t: Any, tiles_m: int, tiles_n: int, panel: int, ops: Any = INT_OPS) -> tuple:
    """(tile row, tile column) of the ``t``-th tile in the order ``T.use_swizzle(panel)``
    launches a grid of ``tiles_n`` x ``tiles_m`` blocks (TileLang's rasterization2DRow):
    panels of ``panel`` tile rows (fewer in the last), each walked column by column with
    the rows inner, odd panels from the right; ``panel`` 0 is row-major order."""
    if panel == 0:
        return t // tiles_n, t % tiles_n
    p = t // (panel * tiles_n)
    offset = t % (panel * tiles_n)
    rows = ops.min(panel, tiles_m - p * panel)  # rows in this panel
    col = offset // rows
    col = col + (p % 2) * (tiles_n - 1 - 2 * col)  # odd panels run right to left
    return p * panel + offset % rows, col


# A cluster's pair on C^T (``swap_ab``) under each ``GemmConfig.multicast``: the blocks
# that share A's tile differ along C^T's rows, as a pair sharing B's does on C.
EXCHANGED_PAIRS = {"": "", "a": "b", "b": "a", "ab": "ab"}


@dataclass(frozen=True, slots=True)
class Units:
    """What a persistent grid hands out: output tiles, or under ``GemmConfig.multicast``
    pairs of them, one per two-block cluster (two M tiles of one N column where the pair
    shares B's tile, two N tiles of one M row where it shares A's). Both blocks of a
    cluster take the same unit and each computes its own tile of it, ``rank`` (the block's
    rank in the cluster) along the pair's axis, so the two walk their units in step; a
    block whose tile lies past C, in a last pair that the rounding completes, loads zeros
    and writes nothing."""

    tiles_m: int
    tiles_n: int
    pair: str  # GemmConfig.multicast: "" (a unit is a tile), "b", "a" or "ab"
    panel: int  # the tile order's panel in tile rows (GemmConfig.swizzle)

    @classmethod
    def of(cls, shape: Any, config: Any) -> "Units":
        """The units of ``config`` over C of ``shape``. With the operands exchanged
        (``swap_ab``) the tiles cover C^T, N x M, block_m along N: a pair sharing A's tile
        is two of its tile rows (two N tiles of one M row of C), one sharing B's two of
        its tile columns."""
        m, n, pair = shape.m, shape.n, config.multicast
        if getattr(config, "swap_ab", False):
            m, n, pair = n, m, EXCHANGED_PAIRS[pair]
        return cls(-(-m // config.block_m), -(-n // config.block_n), pair, config.swizzle)

    @property
    def per_unit(self) -> int:
        """Blocks that share one unit: 2 in two-block clusters, 4 in four-block ones
        ("ab": two M tiles by two N tiles), else 1."""
        return {"": 1, "a": 2, "b": 2, "ab": 4}[self.pair]

    @property
    def units_m(self) -> int:
        return -(-self.tiles_m // 2) if "b" in self.pair else self.tiles_m

    @property
    def units_n(self) -> int:
        return -(-self.tiles_n // 2) if "a" in self.pair else self.tiles_n

    @property
    def count(self) -> int:
        return self.units_m * self.units_n

    @property
    def unit_panel(self) -> int:
        """The panel in unit rows: a pair sharing B spans two tile rows."""
        return self.panel // 2 if "b" in self.pair else self.panel

    @property
    def rows_per_unit(self) -> int:
        """Tile rows one unit spans."""
        return 2 if "b" in self.pair else 1

    def tile(self, t: Any, rank: Any = 0, ops: Any = INT_OPS) -> tuple:
        """(tile row, tile column) that the block of ``rank`` computes for unit ``t``,
        the units taken in ``tile_coords`` order of their own grid."""
        um, un = tile_coords(t, self.units_m, self.units_n, self.unit_panel, ops)
        if self.pair == "b":
            return 2 * um + rank, un
        if self.pair == "a":
            return um, 2 * un + rank
        if self.pair == "ab":
            # Rank bit 0: the M tile (the blocks sharing B), bit 1: the N tile.
            return 2 * um + rank % 2, 2 * un + rank // 2
        return um, un


@dataclass(frozen=True, slots=True)
class StreamK:
    """The split of one (shape, config) over ``blocks`` persistent blocks (under
    ``GemmConfig.multicast``, over ``blocks`` two-block clusters, its tiles the pairs of
    ``Units``)."""

    blocks: int
    tiles_m: int
    tiles_n: int
    k_steps: int  # K steps of one whole tile
    panel: int  # the tile order's panel (GemmConfig.swizzle)
    sk_tiles: int  # tiles in the stream-K part, the last ones in the tile order
    rows_per_tile: int = 1  # tile rows of C that one of these tiles spans (2: pairs on M)

    @classmethod
    def plan(cls, shape: Any, config: Any) -> "StreamK":
        """The split of ``shape`` (a GemmShape) under ``config`` (a GemmConfig with
        ``stream_k`` blocks, its ``swizzle`` the tile order's panel); in clusters, of the
        pairs over ``stream_k // 2`` clusters."""
        units = Units.of(shape, config)
        blocks = config.stream_k // units.per_unit
        tiles_m, tiles_n = units.units_m, units.units_n
        k_steps = -(-shape.k // config.block_k)
        tiles = tiles_m * tiles_n
        remainder = tiles % blocks
        if tiles <= blocks:
            sk_tiles = tiles  # under one wave: every tile's K steps are shared out
        elif remainder == 0:
            sk_tiles = 0  # whole waves: nothing to balance
        elif remainder < MIN_SHARE * blocks and (not config.smem_epilogue or config.fixup):
            sk_tiles = remainder + blocks
        else:
            sk_tiles = remainder
        return cls(
            blocks, tiles_m, tiles_n, k_steps, units.unit_panel, sk_tiles, units.rows_per_unit
        )

    @property
    def tiles(self) -> int:
        return self.tiles_m * self.tiles_n

    @property
    def dp_waves(self) -> int:
        """Whole tiles each block computes before its stream-K range."""
        return (self.tiles - self.sk_tiles) // self.blocks

    @property
    def dp_tiles(self) -> int:
        return self.dp_waves * self.blocks

    @property
    def sk_steps(self) -> int:
        """K steps in the stream-K part, over all its tiles."""
        return self.sk_tiles * self.k_steps

    @property
    def share(self) -> int:
        """The most K steps one block's stream-K range holds."""
        return -(-self.sk_steps // self.blocks)

    @property
    def segments(self) -> int:
        """The most tiles one block's stream-K range touches (each is a segment)."""
        if self.share == 0:
            return 0
        return (self.share - 1) // self.k_steps + 2 if self.share > 1 else 1

    @property
    def units(self) -> int:
        """Loop trips per block: its data-parallel tiles, then its stream-K segments."""
        return self.dp_waves + self.segments

    def sk_range(self, b: Any, ops: Any = INT_OPS) -> tuple:
        """[start, end) of block ``b``'s K steps in the stream-K part, counted from the
        first stream-K tile's first step; the first ``sk_steps % blocks`` blocks hold one
        step more."""
        base, extra = divmod(self.sk_steps, self.blocks)
        return (
            b * base + ops.min(b, extra),
            (b + 1) * base + ops.min(b + 1, extra),
        )

    def _segment(self, start: Any, u: Any, ops: Any) -> tuple:
        """(tile within the stream-K part, first K step counted from its start) of the
        ``u``-th trip of a block whose stream-K range starts at ``start``."""
        j = u - self.dp_waves  # segment index (negative on data-parallel trips)
        tile = start // self.k_steps + j
        return tile, ops.max(start, tile * self.k_steps)

    def unit(self, b: Any, u: Any, ops: Any = INT_OPS) -> tuple:
        """(tile index in the tile order, first K step, K steps) of block ``b``'s ``u``-th
        trip; K steps <= 0 means the trip has nothing to do. Trips below ``dp_waves`` are
        whole tiles; the rest are the block's stream-K segments, tile by tile."""
        start, end = self.sk_range(b, ops)
        tile, lo = self._segment(start, u, ops)
        hi = ops.min(end, (tile + 1) * self.k_steps)
        dp = u < self.dp_waves
        return (
            ops.select(dp, u * self.blocks + b, self.dp_tiles + tile),
            ops.select(dp, 0, lo - tile * self.k_steps),
            ops.select(dp, self.k_steps, hi - lo),
        )

    def steps_before(self, b: Any, u: Any, ops: Any = INT_OPS) -> Any:
        """K steps block ``b`` computes before its ``u``-th trip, over all its tiles: where
        a pipeline that counts its stages over the block's trips end to end stands (a
        trip with nothing to do is never reached after one that has)."""
        start, _ = self.sk_range(b, ops)
        _, lo = self._segment(start, u, ops)
        return ops.select(
            u < self.dp_waves, u * self.k_steps, self.dp_waves * self.k_steps + lo - start
        )

    def worker_of(self, step: Any, ops: Any = INT_OPS) -> Any:
        """The block (a cluster, in clusters) whose stream-K range holds ``step``, counted
        from the first stream-K tile's first step: ``sk_range`` inverted."""
        base, extra = divmod(self.sk_steps, self.blocks)
        longer = extra * (base + 1)  # the steps of the blocks that hold one more
        return ops.select(
            step < longer, step // (base + 1), extra + (step - longer) // max(base, 1)
        )

    def sharers(self, t: Any, ops: Any = INT_OPS) -> tuple:
        """(first, last) block whose range holds K steps of stream-K tile ``t`` (its index
        in the tile order). Under ``GemmConfig.fixup`` the blocks from ``first`` to
        ``last - 1`` each hand over one share of it, and ``last``, whose share holds the
        tile's last K step, sums them; ``first == last``: one block computes it whole."""
        i = t - self.dp_tiles
        return (
            self.worker_of(i * self.k_steps, ops),
            self.worker_of((i + 1) * self.k_steps - 1, ops),
        )

    def fixup_unit(self, b: Any, j: Any, ops: Any = INT_OPS) -> tuple:
        """Block ``b``'s ``j``-th stream-K trip under ``GemmConfig.fixup``: its segments in
        reverse order. A range's last segment holds a tile's first K steps and, short of
        the tile's end, is a share handed over (a range ends inside a tile at most once);
        its first holds a tile's last K steps, where the block sums the shares of the
        blocks before it (a range starts inside a tile at most once). So every block
        writes what it hands over before it waits for anyone else's, and none waits on a
        block that waits. (tile in the order, first K step, K steps, K steps the block
        computed before the trip over all its tiles); K steps <= 0: nothing to do."""
        t, first, steps = self.unit(b, self.dp_waves + self.segments - 1 - j, ops)
        _, end = self.sk_range(b, ops)
        last = (t - self.dp_tiles) * self.k_steps + first + steps  # one past its last step
        return t, first, steps, self.dp_waves * self.k_steps + end - last

    def zero_from_row(self, block_m: int) -> int | None:
        """The first row of C a stream-K tile covers (every row after it is zeroed before
        launch, as the partial sums are added into C); None without stream-K tiles."""
        if not self.sk_tiles:
            return None
        rows = (
            tile_coords(t, self.tiles_m, self.tiles_n, self.panel)[0]
            for t in range(self.dp_tiles, self.tiles)
        )
        return min(rows) * self.rows_per_tile * block_m


def pair_grid(shape: Any, config: Any) -> tuple[int, int]:
    """The (x, y) grid of two-block clusters (``config.multicast``), which pair blocks
    along x: x runs over the axis the pair's blocks differ on (M tiles where they share
    B's tile, N tiles where they share A's), rounded up to whole pairs, y over the other;
    without clusters x runs over N tiles and y over M tiles (with the operands exchanged,
    ``swap_ab``, x over M's block_n rows and y over N's block_m columns; in pairs sharing
    A's tile, x over N's block_m columns, rounded up, and y over M's rows): the tile grid
    of ``Units.of``, over C^T where the operands are exchanged."""
    units = Units.of(shape, config)
    rows, cols = units.tiles_m, units.tiles_n
    if units.pair == "b":
        return rows + rows % 2, cols
    if units.pair == "a":
        return cols + cols % 2, rows
    if units.pair == "ab":
        # Clusters of 2 x 2 blocks: x over M tiles, y over N tiles, both rounded up.
        return rows + rows % 2, cols + cols % 2
    return cols, rows


def grid_blocks(shape: Any, config: Any) -> int:
    """Blocks in one launch's grid (``pair_grid`` times the K splits, or the persistent
    blocks)."""
    if config.persistent or config.stream_k:
        return config.persistent or config.stream_k
    x, y = pair_grid(shape, config)
    return x * y * config.split_k


def added_rows(shape: Any, config: Any) -> int | None:
    """The first row of C from which the kernel adds partial tiles into C rather than
    writing them, so those rows must be zeroed before each launch: every row under
    split-K, the stream-K tiles' rows under stream-K; None where every tile is written
    once (stream-K with ``fixup`` sums its shared tiles before it writes them)."""
    if config.split_k > 1:
        return 0
    if config.stream_k and not config.fixup:
        return StreamK.plan(shape, config).zero_from_row(config.block_m)
    return None


def fixup_buffers(shape: Any, config: Any) -> tuple[int, int, int, int] | None:
    """The extra buffers of stream-K with ``fixup``: (workspace slots, their rows, their
    columns, flags): an fp32 tile for every block (each hands over at most one share, in
    its slot) and a flag for each stream-K tile of every cluster rank; None without
    ``fixup``. Zeroed once: each launch leaves its flags at zero."""
    if not config.fixup:
        return None
    plan = StreamK.plan(shape, config)
    per_unit = Units.of(shape, config).per_unit
    return config.stream_k, config.block_m, config.block_n, max(plan.sk_tiles, 1) * per_unit
