"""The GEMM's schedules (kernels/schedules.py) on the CPU: the stream-K split covers every
K step of every output tile exactly once, its tile order is the swizzled grid's, and the
rows it adds into are the rows zeroed before launch."""

import itertools
from dataclasses import replace

import pytest

from kernels import GemmConfig, GemmShape
from kernels.schedules import (
    MIN_SHARE,
    StreamK,
    Units,
    added_rows,
    grid_blocks,
    pair_grid,
    tile_coords,
)


def rasterization_2d_row(block_idx: int, grid_x: int, grid_y: int, panel_width: int):
    """TileLang 0.1.15's rasterization2DRow (tl_templates/cuda/threadblock_swizzle.h),
    line by line: the (blockIdx.x, blockIdx.y) that T.use_swizzle gives linear block
    ``block_idx`` of a grid_x x grid_y grid."""
    grid_size = grid_x * grid_y
    panel_size = panel_width * grid_x
    panel_offset = block_idx % panel_size
    panel_idx = block_idx // panel_size
    total_panel = -(-grid_size // panel_size)
    stride = (
        panel_width
        if panel_idx + 1 < total_panel
        else (grid_size - panel_idx * panel_size) // grid_x
    )
    col_idx = grid_x - 1 - panel_offset // stride if panel_idx & 1 else panel_offset // stride
    row_idx = panel_offset % stride + panel_idx * panel_width
    return col_idx, row_idx


@pytest.mark.parametrize("tiles_m, tiles_n", [(32, 16), (24, 20), (7, 3), (1, 5), (5, 1)])
@pytest.mark.parametrize("panel", [1, 4, 8, 16, 64])
def test_tile_order_is_the_swizzled_grids(tiles_m, tiles_n, panel):
    for t in range(tiles_m * tiles_n):
        col, row = rasterization_2d_row(t, tiles_n, tiles_m, panel)
        assert tile_coords(t, tiles_m, tiles_n, panel) == (row, col)


def test_tile_order_without_panels_is_row_major():
    assert [tile_coords(t, 2, 3, 0) for t in range(6)] == [
        (0, 0), (0, 1), (0, 2), (1, 0), (1, 1), (1, 2)
    ]  # fmt: skip


def _cover(plan: StreamK) -> tuple[dict, set]:
    """(tile, K step) -> how many (block, trip) compute it; and the tiles some block adds
    into (a partial range) rather than writes."""
    count: dict = {}
    added = set()
    for b, u in itertools.product(range(plan.blocks), range(plan.units)):
        t, first, steps = plan.unit(b, u)
        if steps <= 0:
            continue
        assert 0 <= t < plan.tiles and 0 <= first and first + steps <= plan.k_steps
        if steps < plan.k_steps:
            added.add(t)
        for k in range(first, first + steps):
            count[t, k] = count.get((t, k), 0) + 1
    return count, added


SPLITS = [
    # 4096^3 in 128x256 tiles on 132 SMs: 512 tiles, the last wave's 116 shared out
    # (7424 K steps over 132 blocks: 32 blocks take 57, the rest 56).
    ((4096, 4096, 4096), (128, 256, 64), 132, 0, 116),
    # 8192^3: 2048 tiles, 68 left over; in panels of 8 tile rows.
    ((8192, 8192, 8192), (256, 128, 64), 132, 8, 68),
    # 1000^3 in 128x128 tiles on 7 blocks: 64 tiles, 1 left over, under MIN_SHARE of a
    # wave, so a full wave joins it (two-tile stream-K).
    ((1000, 1000, 1000), (128, 128, 64), 7, 4, 8),
    # Fewer tiles than blocks: every tile is shared out; some blocks get no K step.
    ((256, 512, 128), (128, 128, 64), 132, 0, 8),
    ((16, 1024, 2048), (64, 128, 64), 132, 0, 8),
    # Odd sizes, edges of partial tiles; 165 tiles on 132 blocks: 33 + 132.
    ((4097, 1031, 515), (128, 256, 64), 132, 0, 165),
    ((3000, 5000, 7000), (128, 256, 64), 132, 8, 84),
    # Whole waves: nothing to balance, every tile data-parallel.
    ((4096, 4096, 4096), (128, 256, 64), 128, 0, 0),
]


@pytest.mark.parametrize("size, tile, blocks, panel, sk_tiles", SPLITS)
def test_stream_k_computes_every_k_step_of_every_tile_once(size, tile, blocks, panel, sk_tiles):
    shape = GemmShape(*size)
    threads = 256 if tile[0] * tile[1] > 128 * 128 else 128
    config = GemmConfig(*tile, threads, 3, swizzle=panel, stream_k=blocks)
    plan = StreamK.plan(shape, config)
    assert plan.sk_tiles == sk_tiles
    assert plan.dp_tiles + plan.sk_tiles == plan.tiles and plan.dp_tiles % blocks == 0
    count, added = _cover(plan)
    assert len(count) == plan.tiles * plan.k_steps
    assert set(count.values()) == {1}
    # Only stream-K tiles are added into, and they lie in the rows zeroed before launch.
    assert all(t >= plan.dp_tiles for t in added)
    rows = {tile_coords(t, plan.tiles_m, plan.tiles_n, panel)[0] for t in added}
    zero_from = added_rows(shape, config)
    if added:
        assert min(rows) * config.block_m >= zero_from
    else:
        assert zero_from is None and sk_tiles == 0


@pytest.mark.parametrize("size, tile, blocks, panel, sk_tiles", SPLITS)
def test_a_blocks_trips_count_its_k_steps_end_to_end(size, tile, blocks, panel, sk_tiles):
    """``steps_before``: where a pipeline whose stages count on across a block's trips
    stands at each trip with work; each such trip starts where the one before ended."""
    threads = 256 if tile[0] * tile[1] > 128 * 128 else 128
    config = GemmConfig(*tile, threads, 3, swizzle=panel, stream_k=blocks)
    plan = StreamK.plan(GemmShape(*size), config)
    for b in range(blocks):
        done = 0
        for u in range(plan.units):
            _, _, steps = plan.unit(b, u)
            if steps > 0:
                assert plan.steps_before(b, u) == done
                done += steps
        start, end = plan.sk_range(b)
        assert done == plan.dp_waves * plan.k_steps + end - start


def test_the_two_tile_variant_is_for_the_register_epilogue_only():
    # 2500x1800 in 256x128 tiles: 150 tiles on 132 blocks, 18 left over (under MIN_SHARE
    # of a wave). Added from registers, a full wave joins them; through shared memory
    # (TMA reduce-add) they are shared out alone, after one data-parallel wave.
    shape = GemmShape(2500, 1800, 4000)
    registers = GemmConfig(256, 128, 64, 256, 3, stream_k=132)
    shared = GemmConfig(256, 128, 64, 256, 3, smem_epilogue=True, stream_k=132)
    assert 18 < MIN_SHARE * 132
    assert StreamK.plan(shape, registers).sk_tiles == 150
    plan = StreamK.plan(shape, shared)
    assert (plan.sk_tiles, plan.dp_waves) == (18, 1)
    count, added = _cover(plan)
    assert len(count) == plan.tiles * plan.k_steps and set(count.values()) == {1}
    assert added == set(range(132, 150))
    assert added_rows(shape, shared) == min(t // plan.tiles_n for t in added) * 256


def test_stream_k_shares_the_last_wave_evenly():
    plan = StreamK.plan(GemmShape(4096, 4096, 4096), GemmConfig(128, 256, 64, 256, 3, stream_k=132))
    lengths = [end - start for start, end in map(plan.sk_range, range(132))]
    assert sorted(set(lengths)) == [56, 57] and sum(lengths) == 116 * 64
    assert plan.dp_waves == 3 and plan.units == 3 + 2  # 57 steps cross at most 2 tiles
    assert plan.sk_tiles >= MIN_SHARE * plan.blocks


def test_stream_k_zeroes_only_the_rows_of_its_tiles():
    # 116 stream-K tiles of 16 per tile row: the last 7.25 tile rows, so from row 24.
    config = GemmConfig(128, 256, 64, 256, 3, stream_k=132)
    assert added_rows(GemmShape(4096, 4096, 4096), config) == 24 * 128
    # Split-K adds into all of C; the plain and persistent kernels write every tile once.
    assert added_rows(GemmShape(64, 64, 4096), GemmConfig(64, 64, 64, 128, 3, split_k=4)) == 0
    assert added_rows(GemmShape(4096, 4096, 4096), GemmConfig(persistent=132)) is None


def test_grid_blocks_of_each_schedule():
    shape = GemmShape(4096, 4096, 4096)
    assert grid_blocks(shape, GemmConfig(128, 256, 64, 256, 3)) == 512
    assert grid_blocks(shape, GemmConfig(128, 256, 64, 256, 3, stream_k=132)) == 132
    assert grid_blocks(shape, GemmConfig(128, 256, 64, 256, 3, persistent=66)) == 66
    assert grid_blocks(shape, GemmConfig(64, 128, 64, 128, 3, split_k=4)) == 64 * 32 * 4
    # Two-block clusters round the pair's axis up to whole pairs: 3000 / 128 = 24 M
    # tiles, 5000 / 256 = 20 N tiles; 2500 / 256 = 10 M tiles and 1800 / 128 = 15 N tiles.
    pair = GemmConfig(128, 256, 64, 256, 4, async_mma=True, multicast="b")
    assert grid_blocks(GemmShape(3000, 5000, 7000), pair) == 24 * 20
    pair = GemmConfig(256, 128, 64, 256, 4, async_mma=True, multicast="a")
    assert grid_blocks(GemmShape(2500, 1800, 4000), pair) == 10 * 16
    assert grid_blocks(GemmShape(2500, 1800, 4000), replace(pair, multicast="b")) == 10 * 15


@pytest.mark.parametrize("pair", ["b", "a"])
@pytest.mark.parametrize("size, panel", [((2096, 2728, 1304), 8), ((1152, 1408, 1024), 0)])
def test_clusters_take_every_tile_once_as_pairs(pair, size, panel):
    """``Units``: the two blocks of a cluster take one unit, each its own tile of it along
    the pair's axis; over all units every tile of C is taken once, and the blocks of an
    odd axis's last pair that lie past C are the only tiles outside it."""
    config = GemmConfig(128, 128, 64, 128, 4, swizzle=panel, async_mma=True, multicast=pair)
    units = Units.of(GemmShape(*size), config)
    tiles = [units.tile(t, rank) for t in range(units.count) for rank in (0, 1)]
    inside = [(m, n) for m, n in tiles if m < units.tiles_m and n < units.tiles_n]
    assert sorted(inside) == [(m, n) for m in range(units.tiles_m) for n in range(units.tiles_n)]
    odd = units.tiles_m % 2 if pair == "b" else units.tiles_n % 2
    across = units.tiles_n if pair == "b" else units.tiles_m
    assert len(tiles) - len(inside) == odd * across
    for t in range(units.count):  # a pair's tiles are neighbours along its axis
        (m0, n0), (m1, n1) = units.tile(t, 0), units.tile(t, 1)
        assert (m1 - m0, n1 - n0) == ((1, 0) if pair == "b" else (0, 1))


@pytest.mark.parametrize("size", [(2096, 2728, 1304), (900, 500, 1304), (1152, 1408, 1024)])
def test_four_block_clusters_take_every_tile_once(size):
    """``Units`` of ``multicast="ab"``: the four blocks of a cluster take one unit of 2 x
    2 tiles, rank bit 0 the M tile and bit 1 the N tile; every tile of C once, and the
    only tiles outside C those of an odd axis's rounding."""
    config = GemmConfig(128, 192, 64, 256, 4, policy="row", async_mma=True, multicast="ab")
    shape = GemmShape(*size)
    units = Units.of(shape, config)
    assert units.per_unit == 4
    tiles = [units.tile(t, rank) for t in range(units.count) for rank in range(4)]
    inside = [(m, n) for m, n in tiles if m < units.tiles_m and n < units.tiles_n]
    assert sorted(inside) == [(m, n) for m in range(units.tiles_m) for n in range(units.tiles_n)]
    rows, cols = units.tiles_m + units.tiles_m % 2, units.tiles_n + units.tiles_n % 2
    assert len(tiles) == rows * cols == grid_blocks(shape, config)
    for t in range(units.count):
        (m0, n0), (m1, n1), (m2, n2) = (units.tile(t, r) for r in range(3))
        assert (m1 - m0, n1 - n0, m2 - m0, n2 - n0) == (1, 0, 0, 1)


def test_stream_k_in_clusters_shares_pairs_over_half_the_blocks():
    # 2096x2728 in 192x192 tiles: 11 x 15, so 6 x 15 = 90 pairs sharing B over 66
    # clusters: 24 pairs left over after one wave, their K steps shared out; every K
    # step of every pair once, and the rows zeroed are those of the pairs' top tiles.
    shape = GemmShape(2096, 2728, 1304)
    config = GemmConfig.from_id("b192x192x64_t384_s3_w8_e_sk132_a_mb")
    plan = StreamK.plan(shape, config)
    assert (plan.blocks, plan.tiles_m, plan.tiles_n, plan.panel) == (66, 6, 15, 4)
    assert (plan.dp_waves, plan.sk_tiles) == (1, 24)
    count, added = _cover(plan)
    assert len(count) == plan.tiles * plan.k_steps and set(count.values()) == {1}
    rows = {tile_coords(t, plan.tiles_m, plan.tiles_n, plan.panel)[0] for t in added}
    assert added_rows(shape, config) == min(rows) * 2 * 192


def _fixup_run(plan: StreamK) -> tuple[dict, int]:
    """Every block's stream-K trips in the ``fixup`` order (``StreamK.fixup_unit``), timed
    in K steps: a trip that ends short of its tile's last K step writes its sums to the
    block's slot and counts in on the tile's flag; one that holds the last step of a tile
    it did not start waits until every block ``sharers`` names before it has written,
    then sums their slots. Returns, per stream-K tile, how often each of its K steps was
    summed, and the most K steps any block spent waiting."""
    k = plan.k_steps
    trips = {b: [plan.fixup_unit(b, j) for j in range(plan.segments)] for b in range(plan.blocks)}
    handed: dict = {}  # block -> (tile, its K steps, the trip that writes them)
    for b, ts in trips.items():
        for j, (t, first, steps, _) in enumerate(ts):
            if steps > 0 and first + steps < k:
                assert b not in handed, "a block hands over two shares"
                handed[b] = (t, range(first, first + steps), j)
    ends: dict = {}

    def end(b: int, j: int) -> int:
        """When trip ``j`` of block ``b`` is done (after its waits)."""
        if (b, j) not in ends:
            ends[b, j] = None  # being worked out: met again, the blocks wait in a circle
            at = plan.dp_waves * k if j == 0 else end(b, j - 1)
            t, first, steps, _ = trips[b][j]
            at += max(steps, 0)
            if steps > 0 and 0 < first and first + steps == k:
                lo, hi = plan.sharers(t)
                at = max([at] + [end(w, handed[w][2]) for w in range(lo, hi)])
            ends[b, j] = at
        assert ends[b, j] is not None, f"blocks wait in a circle at block {b}"
        return ends[b, j]

    summed: dict = {}
    waited = 0
    for b, ts in trips.items():
        done = plan.dp_waves * k
        for t, first, steps, before in ts:
            if steps <= 0:
                continue
            assert before == done  # the pipeline's stages count on across trips
            done += steps
            lo, hi = plan.sharers(t)
            own = list(range(first, first + steps))
            if first + steps < k:
                continue  # handed over: summed where the tile ends
            if first > 0:
                assert hi == b and lo < b
                for w in range(lo, hi):
                    assert handed[w][0] == t
                    own += handed[w][1]
            else:
                assert lo == hi == b and steps == k  # a whole tile
            for step in own:
                summed.setdefault(t, {}).setdefault(step, 0)
                summed[t][step] += 1
        if plan.segments:
            waited = max(waited, end(b, plan.segments - 1) - done)
    return summed, waited


FIXUP_SPLITS = [
    # 3896x2392 in 128x256 tiles in pairs sharing B: 160 pairs on 66 clusters, 28 left
    # over, under MIN_SHARE of a wave: a wave joins them.
    ((3896, 2392, 1184), (128, 256, 64), 132, 16, "b"),
    # Under a wave: 60 pairs on 66 clusters, every tile shared by two or three.
    ((1432, 1888, 2568), (128, 192, 64), 132, 8, "b"),
    ((1056, 1280, 3384), (128, 256, 64), 132, 16, ""),
    # Large: 1760 tiles on 132 blocks, 13 waves and 44 tiles, which a wave joins.
    ((8296, 7520, 2264), (192, 192, 64), 132, 8, ""),
    ((4096, 4096, 4096), (128, 256, 64), 132, 0, ""),
    # Few K steps a tile, many blocks: some ranges inside one tile.
    ((512, 512, 4096), (128, 128, 64), 132, 0, ""),
    ((300, 700, 200), (128, 128, 64), 7, 4, ""),
]


@pytest.mark.parametrize("size, tile, blocks, panel, pair", FIXUP_SPLITS)
def test_fixup_sums_every_k_step_of_every_stream_k_tile_once(size, tile, blocks, panel, pair):
    config = GemmConfig(
        *tile, 256, 3, swizzle=panel, policy="row", smem_epilogue=True, stream_k=blocks,
        async_mma=True, multicast=pair, fixup=True,
    )  # fmt: skip
    plan = StreamK.plan(GemmShape(*size), config)
    summed, waited = _fixup_run(plan)
    assert sorted(summed) == list(range(plan.dp_tiles, plan.tiles))
    # A block waits at most the one K step by which an earlier block's range is longer.
    assert waited <= 1
    for t, steps in summed.items():
        assert steps == dict.fromkeys(range(plan.k_steps), 1), f"tile {t}"
    # Nothing is added into C, so nothing is zeroed before the launch.
    assert added_rows(GemmShape(*size), config) is None


def test_fixup_takes_a_wave_into_stream_k_where_the_remainder_is_small():
    """Shared out alone, the 28 pairs left over give each of 66 clusters 8 of a tile's 19
    K steps: a tile summed from up to three blocks' shares. With a wave joined, each range
    holds a whole tile's steps or more, so no tile has more than two sharers."""
    shape = GemmShape(3896, 2392, 1184, "bfloat16")
    reduce_add = GemmConfig(
        128, 256, 64, 256, 4, swizzle=16, smem_epilogue=True, stream_k=132, async_mma=True,
        multicast="b",
    )  # fmt: skip
    summing = replace(reduce_add, fixup=True)
    assert StreamK.plan(shape, reduce_add).sk_tiles == 28
    plan = StreamK.plan(shape, summing)
    assert (plan.sk_tiles, plan.dp_waves) == (28 + 66, 1)
    widths = {t: plan.sharers(t) for t in range(plan.dp_tiles, plan.tiles)}
    assert max(hi - lo for lo, hi in widths.values()) == 1


def test_worker_of_inverts_the_ranges():
    for sk_tiles, k_steps, blocks in ((116, 64, 132), (3, 5, 132), (14, 19, 66), (9, 7, 9)):
        plan = StreamK(blocks, 1, sk_tiles, k_steps, 0, sk_tiles)
        for b in range(blocks):
            start, end = plan.sk_range(b)
            assert all(plan.worker_of(s) == b for s in range(start, end))


def test_exchanged_pairs_run_x_over_n_tiles():
    """With the operands exchanged, a pair sharing A's tile is two N tiles (block_m wide)
    of one M row (block_n tall): x runs over N's tiles, rounded up to whole pairs, y over
    M's; unpaired, x runs over M's tiles."""
    pair = GemmConfig(64, 80, 64, 128, 8, async_mma=True, multicast="a", swap_ab=True)
    assert pair_grid(GemmShape(300, 904, 1304), pair) == (16, 4)  # 15 N tiles, 4 M tiles
    assert grid_blocks(GemmShape(300, 904, 1304), pair) == 64
    alone = replace(pair, multicast="")
    assert pair_grid(GemmShape(300, 904, 1304), alone) == (4, 15)


@pytest.mark.parametrize("pair", ["a", "b"])
@pytest.mark.parametrize("size", [(4080, 1224, 3640), (2800, 1984, 1840), (1000, 700, 512)])
def test_exchanged_persistent_pairs_cover_c_once_sharing_their_operand(pair, size):
    """On a persistent grid with the operands exchanged, ``Units`` pairs the tiles of C^T:
    every tile of C once (tile (bm, bn) of C^T is C's rows bn * block_n, columns bm *
    block_m), and the two blocks of a unit share A's tile (C's rows) under "a", B's tile
    (C's columns) under "b"."""
    config = GemmConfig(
        256,
        160,
        64,
        256,
        3,
        policy="row",
        smem_epilogue=True,
        persistent=132,
        async_mma=True,
        swap_ab=True,
        multicast=pair,
    )
    shape = GemmShape(*size)
    units = Units.of(shape, config)
    rows_of_c, cols_of_c = -(-shape.m // 160), -(-shape.n // 256)
    assert (units.tiles_m, units.tiles_n) == (cols_of_c, rows_of_c)
    covered = []
    for t in range(units.count):
        (bm0, bn0), (bm1, bn1) = units.tile(t, 0), units.tile(t, 1)
        assert (bn0 == bn1) if pair == "a" else (bm0 == bm1)
        covered += [(bn, bm) for bm, bn in ((bm0, bn0), (bm1, bn1))]
    inside = sorted((r, c) for r, c in covered if r < rows_of_c and c < cols_of_c)
    assert inside == [(r, c) for r in range(rows_of_c) for c in range(cols_of_c)]
