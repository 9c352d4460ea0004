"""The GEMM with a hand-written producer/consumer pipeline (``GemmConfig.async_mma``).

Same tiles, data flow and result as ``make_gemm``: A and B tiles go global -> shared by
TMA, the tensor cores accumulate into a cleared fp32 fragment, and the tile is written
back once. What differs is who schedules the K loop. TileLang's automatic warp
specialisation of ``T.Pipelined`` waits for each K step's wgmma batch to finish before it
releases that step's shared-memory stage (TileLang 0.1.15 declines delayed waits). Here
the block is split by hand:

- one producer warpgroup (threads ``config.threads`` and up): for each K step it waits
  until the stage is free (``empty``), then one elected thread issues the TMA loads of
  the A and B tiles, which complete on the stage's ``full`` barrier;
- ``config.threads`` consumer threads (one or more warpgroups): for each K step they wait
  on ``full``, issue the step's wgmma batch without waiting for it (``T.wgmma_gemm``), then
  wait until at most one batch is outstanding (``T.wait_wgmma(1)``): the previous step's
  batch has finished reading its stage, which they release on ``empty``. So one batch
  runs on the tensor cores while the next is issued.

The consumer warpgroups split the tile as the config's warp policy says
(``kernels.gemm.warp_policy``), as TileLang's own pipeline does: under the row policy each
of two takes 64 rows of a 128x192 tile, one wgmma of 192 columns, not 128x96 in two (on the
H200, 2000x3000x3000 fp16 in pairs: 0.0591 ms against 0.0947 ms for the square policy
unpaired, the row policy unpaired 0.0722).

The producer gives up registers (``setmaxnreg`` 24) and the consumers take them (240 for
one or two consumer warpgroups, less for more: the block shares one register file).
The consumers release a stage one step late, so the pipeline needs two stages or more,
and it holds one stage fewer ahead than TileLang's own (the tuning log's 4096^3:
128x256x64 at 3 stages 629 TFLOP/s, at 4 stages 678).

The write-back comes after the two branches, not inside the consumers' one: TileLang's
shared-memory planner then sees the stages dead before the C tile is written and puts the
tile in their memory, as it does for its own pipeline (``GemmConfig.smem_bytes``), so
that 128x256x64 fits 4 stages and the shared-memory epilogue in 192 KiB. Both roles
meet there at one register count (``epilogue_registers``), so ptxas keeps the
accumulators in registers through the write-back.

With ``config.persistent`` (its persistent form) that many blocks, one per SM, take the
output tiles in turn, in the order of ``kernels.schedules.tile_coords`` (panels of
``config.swizzle`` tile rows). The stages count K steps over a block's tiles end to end,
and the consumers free a tile's last stage before they write the tile back, inside their
branch, so the producer loads the next tile meanwhile; TileLang's ``T.Persistent`` runs a
block's tiles back to back. The C tile then cannot reuse the stages (``smem_bytes`` puts
it on top); where the whole tile does not fit beside them and half of it does
(``GemmConfig.c_parts``), each row half accumulates in its own fragment (a K step is two
wgmma batches) and the halves are staged and stored one after the other through one
buffer, so 128x256x64 takes 4 stages and keeps one step's batches in flight (on the H200,
4096^3 fp16: 0.1772 ms against 0.1781 in 3 stages; 8192^3 1.414 ms against 1.439 for the
data-parallel form). With fewer than 4 stages the consumers wait for each batch and free
its stage at once, since one batch in flight would keep the producer only one stage ahead
(4096^3 fp16 in 3 stages: 0.180 ms against 0.198 ms). A tile's TMA store is not waited
for where it is issued: TMA reads the staging buffer out while the consumers go on to the
next tile's K steps, and the next write into the buffer first waits for that read (the
block waits for its last store before it exits). Where a tile is few K steps and its
write-back weighs, that is the gain: attn_qk_t (4096x4096x128 NT, two K steps a tile) in
13.1 us against 14.7 us, both dtypes; on the squares and mlp_up 0.1-0.3%.

With ``config.stream_k`` (and the shared-memory epilogue) the persistent form follows
``kernels.schedules.StreamK``: each block's whole tiles as above, then its stream-K
segments, shares of a tile's K steps whose sums a TMA reduce-add adds into C (zeroed over
those tiles' rows before the launch); ``StreamK.steps_before`` keeps the stage count going
across them. With ``config.fixup`` nothing is added into C: a block takes its segments
last first (``StreamK.fixup_unit``); a share that stops short of its tile's last K step
goes, in fp32, to the block's slot of a workspace, and one consumer thread counts it in
on the tile's flag by a release once every consumer has written (their named barrier);
the block holding the tile's last K steps waits (acquire) until the blocks before it
(``StreamK.sharers``) have counted in, sets the flag back to zero, adds their slots into
its fragment and writes the tile once, by TMA. The wrapper keeps the workspace and flags
(``kernels.gemm.GemmKernel``), and C is not zeroed. Over the H200's records the
reduce-add form ran a median 9.34 us slower than its even share of the persistent
form's time (188 pairs, reports/offtable_fixup_shapes.json says how they were read):
this is its alternative, not yet timed.

With ``config.pingpong`` the persistent form has two consumer warpgroups of a whole tile
each (accumulators of 128 x block_N a thread's share of one warpgroup), the block's even
trips to the first and its odd ones to the second, which take turns at their K steps
(an ``order`` barrier each) so that one writes back from registers while the other
computes. On the H200 it ran behind the persistent form it was meant to improve
(bench_gemm, CUPTI, against torch.matmul in one run; reports/pingpong_h200.jsonl): at
best 0.611x against 0.729x on 2096x2728x1304 NT fp16, 0.715x against 0.867x on
3464x2352x1680 NT bf16, 0.808x against 0.903x on 2632x3136x2912 NT fp16, 0.842x against
0.841x on 2232x3384x2048 NT bf16; so no search space has it yet.

With ``config.multicast`` the blocks run in clusters of two that share one operand's tile
(two M tiles of one N column share B's, two N tiles of one M row share A's): the pair's
first block issues that tile's TMA load once, multicast into both blocks' stage, and each
block's ``full`` barrier counts its bytes; each block still loads its own other operand.
A stage is refilled only once both blocks' consumers are done with it, so one thread of
every consumer warp releases it on its own block's ``empty`` barrier and on its
partner's, and a block waits for its partner (a cluster barrier) before it exits, so
that no release lands on a block that has gone. The L2 then serves the shared tile once
per pair: what shapes whose rows of B start off a 32-byte sector are short of
(``kernels.tuned.pair_fits``). On the persistent and stream-K forms the clusters are the
workers: each takes a pair of tiles per trip (``kernels.schedules.Units``), its two
blocks one tile each, so both walk the same trips and K steps in step; on the H200 that
ran 2232x3384x2048 NT bf16 in 128x256 tiles at 0.936x torch against 0.848x for the
unclustered grids beside it (reports/clusters_h200.jsonl), and lost on other shapes.

With ``config.multicast`` "ab" the clusters are four blocks, two M tiles by two N tiles
(2 x 2 on the plain grid, 4 along x on the persistent one, rank = M bit + 2 N bit): each
A tile is multicast to the two blocks of its M row and each B tile to the two of its N
column, by the lower rank of each, so every operand tile is read from the L2 once per
pair; every consumer warp releases a stage on all four blocks. Meant for rows that start
off a 32-byte sector, where a pair sharing one operand ran faster: on the H200 it ran
level with the pair at best (bench_gemm, CUPTI, reports/quad_clusters_h200.jsonl, ten
shapes with A's or both operands' rows off a sector: on the plain grid 0.98-1.02x the
pair's pace in 192x192 tiles where the rounding to even tile counts added no blocks, 0.54x
on the two where it did (1888x2496x3144 NT fp16, 3456x1160x2952 NT bf16), 0.97-1.02x in
128x256 tiles; 128x192 persistent, without the pair's panels, 0.58-1.04x), so the L2's
reads are not what such rows cost, and no search space has it. A cluster's blocks run
on one GPC at once, so fewer four-block clusters than a quarter of the SMs fit a wave:
on an H100 grids of up to 120 blocks (30 clusters) ran in one wave and none of 128 or
more did (on the H200 alike), which a persistent grid of a block per SM passes too.
Within that bound, on plain grids under a wave in NT, they ran faster than the pair
(``kernels.tuned.nt_quads``).

With ``config.swap_ab`` the operands are exchanged: the kernel computes C^T = op(B)^T
A^T, the wgmma's first operand B's tile (block_M columns of C, read transposed from
shared memory under NN) and its second A's (block_N rows of C, K-major), so the tile's
rows of C step by 16 rather than 64. Each tile (or half, ``c_parts``) is written into
the staging buffer transposed, element by element from the fragment, and stored by TMA;
without the staging buffer, into C element by element. On the plain and persistent
grids, and in two-block clusters: on the plain grid of two N tiles (``multicast`` "a",
x over N's tiles), whose first block multicasts A's tile, which for a skinny M is all of
M, where every block otherwise reads it from the L2 on its own (cuBLAS runs 88x7928x4136
in 64x88 tiles, 2x1 clusters: reports/profile_random4_h200.md); on a persistent grid of
two N tiles sharing A's ("a") or two M tiles sharing B's ("b"), the pairs of ``Units``
over C^T. On the H200 (bench_gemm, CUPTI, reports/exchanged_forms_h200.
jsonl) 256 columns by 144-192 rows, persistent in 3 stages, ran 1.02-1.30x faster than
the picks it replaces where its tiles make whole or nearly whole waves
(``kernels.tuned.exchanged``: 2096x2728x1304 NT fp16 26.2 us against 34.0); 128 columns
by 160-208 rows ran slower than the 256-column tile on 17 of 20 shapes. The consumers
wait for all the last K step's batches inside their K loop: where that wait came after
the loop, ptxas read the accumulators for the transposed write-back before it (wrong
tiles on the H200).

With two consumer warpgroups the persistent and stream-K forms may hold up to
``PINGPONG_MAX_ACCUM`` accumulators a thread (``GemmConfig.holds_large_tile``): the
consumers take 240 registers and write their tiles back inside their branch, so 192x192
over 256 consumers (144 each, as cuBLAS runs its large shapes) builds without spills. On
the H200 (bench_gemm, CUPTI, reports/large_pairs_h200.jsonl, nine shapes where the
heuristic picks 192x192 stream-K over three warpgroups on TileLang's pipeline) it ran
behind that pick: in stream-K pairs faster on two (6288x8440x5192 NT fp16 1.050x), median
0.984x; in stream-K alone median 0.982x; persistent 0.913x; so no search space has it yet.
"""

from kernels.gemm import (
    DELAY_FUNCTION,
    DELAY_SOURCE,
    REGISTER_FILE,
    WARPGROUP,
    GemmConfig,
    GemmShape,
    entry_point,
    register_cap,
    warp_policy,
)
from kernels.schedules import Ops, StreamK, Units, fixup_buffers, pair_grid

PRODUCER_THREADS = 128  # one warpgroup issues the TMA loads
PRODUCER_REGISTERS = 24
MAX_REGISTERS = 240
PAIR_MASK = 0b11  # both blocks of a two-block cluster receive a multicast tile
# Four-block clusters ("ab"), rank = M tile bit + 2 * N tile bit: the blocks of one M row
# (ranks 0 and 2, or 1 and 3) share A's tile, those of one N column (0 and 1, or 2 and 3)
# B's; the lowest rank of each mask issues the multicast (``T.tma_copy``).
QUAD_A_MASKS = (0b0101, 0b1010)
QUAD_B_MASKS = (0b0011, 0b1100)
IN_FLIGHT_MIN_STAGES = 4
# The named barrier (of 16; TileLang numbers its own from 3 up) on which the consumers meet
# around a stream-K share's flag (``GemmConfig.fixup``).
FIXUP_BARRIER = 15
# A stream-K share's flag (``GemmConfig.fixup``), one thread on each side, in the PTX of
# CUTLASS's stream-K barriers: the sharer adds 1 after a GPU-scope fence once its
# consumers have met (so their workspace writes come before it); the summing block
# reads with acquire until the count is in, then sets it back to zero for the next launch
# (no one else touches it in this one). A count that never comes in traps the kernel
# after ``FIXUP_TRAP_CYCLES`` (about 8 s): an error, not a hung GPU.
FIXUP_SIGNAL, FIXUP_WAIT = "tl_fixup_signal", "tl_fixup_wait"
FIXUP_TRAP_CYCLES = 1 << 34
FIXUP_SOURCE = f"""
__device__ __forceinline__ void {FIXUP_SIGNAL}(int* flag) {{
  asm volatile("fence.acq_rel.gpu;" ::: "memory");
  asm volatile("red.relaxed.gpu.global.add.s32 [%0], 1;" :: "l"(flag) : "memory");
}}
__device__ __forceinline__ void {FIXUP_WAIT}(int* flag, int count) {{
  long long start = clock64();
  int seen;
  do {{
    asm volatile("ld.acquire.gpu.global.b32 %0, [%1];" : "=r"(seen) : "l"(flag) : "memory");
    if (clock64() - start > {FIXUP_TRAP_CYCLES}LL) {{ __trap(); }}
  }} while (seen < count);
  asm volatile("st.relaxed.gpu.global.b32 [%0], %1;" :: "l"(flag), "r"(0) : "memory");
}}
"""


def consumer_registers(consumers: int) -> int:
    """Registers a consumer thread can take (``setmaxnreg``, a multiple of 8) once the
    producer has given its own back: all of the register file, shared by the block."""
    share = (REGISTER_FILE - PRODUCER_THREADS * PRODUCER_REGISTERS) // consumers
    return min(MAX_REGISTERS, share // 8 * 8)


def epilogue_registers(consumers: int) -> int:
    """Registers every thread holds for the write-back after the two branches: the
    producer raises its count to this and the consumers lower theirs, so that ptxas sees
    one count where the branches meet. It is the block's even share of the register
    file (``register_cap``, what the kernel launches with), never above what the
    consumers hold: the producer's raise waits for registers that the consumers' lowering
    frees, and asks no more than the launch gave. Without it ptxas spilled the
    accumulators around the write-back (sm_90a, 128x256x64 over 256 consumers: 2,784
    bytes of spill stores; none with it)."""
    return min(consumer_registers(consumers), register_cap(consumers) // 8 * 8)


def _masks(m_bit: int, n_bit: int) -> tuple[int, int]:
    """The multicast masks of A's and B's tiles for the block of a four-block cluster
    whose rank has ``m_bit`` (its M tile) and ``n_bit`` (its N tile)."""
    return QUAD_A_MASKS[m_bit], QUAD_B_MASKS[n_bit]


def make_gemm_async(shape: GemmShape, config: GemmConfig, delay: bool = False):
    """The TileLang program for ``shape`` under ``config`` (``config.async_mma``); the
    caller, ``make_gemm``, has checked the rows it loads by TMA (``check_combination``).
    ``delay`` (test-only, as ``make_gemm``'s): a fourth argument, ``delay_cycles``, that
    every thread spins once the barriers are set up, before the roles split. Under
    ``config.fixup`` the kernel takes two more, the workspace and the flags
    (``kernels.schedules.fixup_buffers``)."""
    # TileLang evaluates the T.Tensor annotations against this closure (no postponed
    # annotations in this module).
    import tilelang.cuda.language as TC
    import tilelang.language as T

    K = shape.k
    block_M, block_N, block_K = config.block_m, config.block_n, config.block_k
    stages, consumers = config.num_stages, config.threads
    dtype, accum_dtype = shape.dtype, config.accum_dtype
    trans_B = shape.layout == "NT"
    policy = warp_policy(config)  # how the consumer warpgroups split the tile
    # With the operands exchanged (``config.swap_ab``) the kernel computes C^T = op(B)^T
    # A^T: the wgmma's first operand (``A_shared``) holds B's block_M rows of N (read
    # from B [K, N] as its transpose under NN), its second (``B_shared``) A's block_N rows
    # of M, and the tiles cover C^T, a problem of N x M (``Units.of``); each tile is
    # written into C transposed.
    swap = config.swap_ab
    if swap:
        a_tile = (block_M, block_K) if trans_B else (block_K, block_M)
        b_tile = (block_N, block_K)
        transpose_A, transpose_B = not trans_B, True
    else:
        a_tile = (block_M, block_K)
        b_tile = (block_N, block_K) if trans_B else (block_K, block_N)
        transpose_A, transpose_B = False, trans_B
    k_steps = T.ceildiv(K, block_K)
    # The persistent forms may stage C in row halves (``GemmConfig.c_parts``), each half
    # of the tile then accumulated in its own fragment.
    parts = config.c_parts
    part_m = block_M // parts
    c_tile = (part_m, block_N) if config.smem_epilogue else (1, 1)
    if swap and config.smem_epilogue:
        c_tile = (block_N, part_m)  # rows of C (along M) by columns (along N)
    # The persistent form's consumers keep one K step's batches in flight where there are
    # ``IN_FLIGHT_MIN_STAGES`` stages or more, which leave the producer two steps ahead or
    # more; with fewer they wait for each batch and free its stage at once, which keeps
    # the producer as far ahead as TileLang's own pipeline.
    in_flight = 1 if stages >= IN_FLIGHT_MIN_STAGES else 0
    pair = config.multicast
    paired = bool(pair)
    quad = pair == "ab"
    # A cluster pairs two blocks along the grid's x, which TileLang's cluster-aware
    # rasterisation keeps together (``pair_grid``); a block past the matrix, in a last
    # pair that the rounding completes, loads zeros and writes nothing.
    grid = pair_grid(shape, config)
    # A persistent grid (``config.persistent`` blocks, or ``config.stream_k``): its units
    # of work, tiles or, in clusters, pairs of them (``Units``), one per cluster.
    blocks = config.persistent or config.stream_k
    plan = StreamK.plan(shape, config) if config.stream_k else None
    units = Units.of(shape, config)
    workers = blocks // units.per_unit  # blocks, or clusters
    tiles = units.count
    ops = Ops(min=T.min, max=T.max, select=T.if_then_else)
    # A four-block cluster is 2 x 2 on the plain grid (x over M tiles, y over N tiles)
    # and 4 along x on a persistent one; its rank is x + 2 y either way.
    cluster_blocks = units.per_unit
    if quad and not blocks:
        cluster = {"cluster_dims": (2, 2, 1)}
    else:
        cluster = {"cluster_dims": (cluster_blocks, 1, 1)} if paired else {}
    # With a pair, both blocks' consumers must release a stage before either producer
    # refills it (the multicast writes into both): one elected thread of every consumer
    # warp arrives on its own block's barrier and on its partner's; in four-block
    # clusters on all four blocks' (each block's stage takes A from one partner and B
    # from another).
    releases = cluster_blocks * consumers // 32 if paired else consumers
    a_mask = PAIR_MASK if pair == "a" else None
    b_mask = PAIR_MASK if pair == "b" else None

    def rank():
        """The block's rank in its cluster (0 without clusters)."""
        return TC.block_rank_in_cluster() if paired else 0

    @T.macro
    def release(empty, stage, tx):
        if quad:
            if tx % 32 == 0:
                T.mbarrier_arrive(empty[stage])
                T.mbarrier_arrive(empty[stage], TC.block_rank_in_cluster() ^ 1)
                T.mbarrier_arrive(empty[stage], TC.block_rank_in_cluster() ^ 2)
                T.mbarrier_arrive(empty[stage], TC.block_rank_in_cluster() ^ 3)
        elif paired:
            if tx % 32 == 0:
                T.mbarrier_arrive(empty[stage])
                T.mbarrier_arrive(empty[stage], 1 - TC.block_rank_in_cluster())
        else:
            T.barrier_arrive(empty[stage])

    @T.macro
    def load_own(A, B, A_shared, B_shared, full, stage, bm, bn, k0, a_mask, b_mask):
        """``load_operands`` in the operands' own order."""
        T.tma_copy(
            A[bm * block_M : (bm + 1) * block_M, k0 : k0 + block_K],
            A_shared[stage, :, :],
            barrier=full[stage],
            cluster_mask=a_mask,
        )
        if trans_B:
            T.tma_copy(
                B[bn * block_N : (bn + 1) * block_N, k0 : k0 + block_K],
                B_shared[stage, :, :],
                barrier=full[stage],
                cluster_mask=b_mask,
            )
        else:
            T.tma_copy(
                B[k0 : k0 + block_K, bn * block_N : (bn + 1) * block_N],
                B_shared[stage, :, :],
                barrier=full[stage],
                cluster_mask=b_mask,
            )

    @T.macro
    def load_operands(A, B, A_shared, B_shared, full, stage, bm, bn, k0, a_mask, b_mask):
        """The A and B tiles of one K step into ``stage``, each multicast to the blocks
        of its mask (None: a load of the block's own); with the operands exchanged B's
        tile into ``A_shared`` and A's into ``B_shared`` (``bm`` then counts N's tiles,
        ``bn`` M's), A's multicast to a pair of N tiles (``multicast`` "a"), B's to a pair
        of M tiles ("b", persistent grids only)."""
        if swap:
            if trans_B:
                T.tma_copy(
                    B[bm * block_M : (bm + 1) * block_M, k0 : k0 + block_K],
                    A_shared[stage, :, :],
                    barrier=full[stage],
                    cluster_mask=b_mask,
                )
            else:
                T.tma_copy(
                    B[k0 : k0 + block_K, bm * block_M : (bm + 1) * block_M],
                    A_shared[stage, :, :],
                    barrier=full[stage],
                    cluster_mask=b_mask,
                )
            T.tma_copy(
                A[bn * block_N : (bn + 1) * block_N, k0 : k0 + block_K],
                B_shared[stage, :, :],
                barrier=full[stage],
                cluster_mask=a_mask,
            )
        else:
            load_own(A, B, A_shared, B_shared, full, stage, bm, bn, k0, a_mask, b_mask)

    @T.macro
    def load_quad(A, B, A_shared, B_shared, full, stage, bm, bn, k0):
        """A four-block cluster's loads: each operand multicast to the two blocks that
        share it, chosen by the block's rank (the masks must be constants)."""
        r = TC.block_rank_in_cluster()
        if r % 2 == 0:
            if r < 2:
                load_operands(A, B, A_shared, B_shared, full, stage, bm, bn, k0, *_masks(0, 0))
            else:
                load_operands(A, B, A_shared, B_shared, full, stage, bm, bn, k0, *_masks(0, 1))
        else:
            if r < 2:
                load_operands(A, B, A_shared, B_shared, full, stage, bm, bn, k0, *_masks(1, 0))
            else:
                load_operands(A, B, A_shared, B_shared, full, stage, bm, bn, k0, *_masks(1, 1))

    @T.macro
    def load_stage(A, B, A_shared, B_shared, full, stage, bm, bn, ko):
        """The producer's K step ``ko`` of tile (bm, bn) into ``stage``, landing on its
        ``full`` barrier. The whole warpgroup reaches the copies and TileLang elects one
        thread to issue them (it must: a branch that leaves one thread alive deadlocks the
        warp-wide election). That thread posts the bytes to expect before its own
        arrival, and the stage is full once all producer threads have arrived and the
        bytes have landed. A shared tile is issued by the pair's first block into both
        blocks' stage (in four-block clusters by the lower rank of the two that share
        it), and lands on each block's own barrier."""
        k0 = ko * block_K
        if quad:
            load_quad(A, B, A_shared, B_shared, full, stage, bm, bn, k0)
        else:
            load_operands(A, B, A_shared, B_shared, full, stage, bm, bn, k0, a_mask, b_mask)
        T.barrier_arrive(full[stage])

    @T.macro
    def products(A_shared, B_shared, C_local, stage, first_row, rows):
        """One K step's wgmma batch on ``stage`` for the tile's ``rows`` rows from
        ``first_row`` (all ``block_M``, unless the halves accumulate apart), split over the
        consumer warpgroups by the config's warp policy, issued and not waited for. With
        the operands exchanged under NN the first operand's rows are ``A_shared``'s
        columns (B's tile read transposed)."""
        if transpose_A:
            TC.wgmma_gemm(
                A_shared[stage, :, first_row : first_row + rows],
                B_shared[stage, :, :],
                C_local,
                transpose_A=True,
                transpose_B=True,
                policy=policy,
            )
        else:
            TC.wgmma_gemm(
                A_shared[stage, first_row : first_row + rows, :],
                B_shared[stage, :, :],
                C_local,
                transpose_B=transpose_B,
                policy=policy,
            )

    @T.macro
    def settle(ko, k_count):
        """The in-flight wait of K step ``ko`` of ``k_count`` with the operands exchanged,
        the last step's for all its batches: ptxas scheduled the transposed write-back's
        reads of the accumulators above a wait for the last batch that came after the K
        loop (sm_90a, 128x208 exchanged in 4 stages: ``F2FP`` before ``WARPGROUP.DEPBAR.LE
        gsb0, 0x0``, wrong tiles on the H200); a wait inside the loop keeps them below it."""
        if ko == k_count - 1:
            T.wait_wgmma(0)
        else:
            T.wait_wgmma(parts)

    @T.macro
    def stage_c(acc, C_shared):
        """A part of the tile from its fragment into the staging buffer, transposed
        where the operands are exchanged (the buffer holds C's rows)."""
        if swap:
            for i, j in T.Parallel(part_m, block_N):
                C_shared[j, i] = acc[i, j]
        else:
            T.copy(acc, C_shared)

    @T.macro
    def store_direct(C, acc, row, col):
        """A part of the tile from its fragment into C at (row, col), element by element
        and transposed where the operands are exchanged (rows past C left out)."""
        if swap:
            for i, j in T.Parallel(part_m, block_N):
                if row + j < shape.m and col + i < shape.n:
                    C[row + j, col + i] = acc[i, j]
        else:
            T.copy(acc, C[row, col])

    def origin(bm, bn, part):
        """(row, column) of C where part ``part`` of tile (bm, bn) starts."""
        if swap:
            return bn * block_N, bm * block_M + part * part_m
        return bm * block_M + part * part_m, bn * block_N

    @T.macro
    def spin(delay):
        """The test-only delay (None: none): every thread spins once the barriers are set."""
        if delay is not None:
            T.import_source(DELAY_SOURCE)
            T.call_extern("handle", DELAY_FUNCTION, delay)

    @T.macro
    def launch(A, B, C, delay):
        with T.Kernel(*grid, threads=consumers + PRODUCER_THREADS, **cluster) as (gx, gy):
            if pair in ("b", "ab") or (swap and paired):
                bm, bn = gx, gy  # x runs over the pair's axis (``pair_grid``)
            else:
                bm, bn = gy, gx
            A_shared = T.alloc_shared((stages, *a_tile), dtype)
            B_shared = T.alloc_shared((stages, *b_tile), dtype)
            C_local = T.alloc_fragment((block_M, block_N), accum_dtype)
            C_shared = T.alloc_shared(c_tile, dtype)
            full = T.alloc_barrier([PRODUCER_THREADS] * stages)  # every producer thread
            if paired:
                empty = T.alloc_cluster_barrier([releases] * stages)
            else:
                empty = T.alloc_barrier([releases] * stages)  # every consumer thread
            if config.swizzle:
                T.use_swizzle(panel_size=config.swizzle)
            spin(delay)
            tx = T.get_thread_binding()
            if tx >= consumers:
                T.dec_max_nreg(PRODUCER_REGISTERS)
                for ko in T.serial(k_steps):
                    stage = ko % stages
                    # A fresh barrier passes the wait on parity 1: the first lap is free.
                    T.mbarrier_wait_parity(empty[stage], ((ko // stages) & 1) ^ 1)
                    load_stage(A, B, A_shared, B_shared, full, stage, bm, bn, ko)
                T.inc_max_nreg(epilogue_registers(consumers))
            else:
                T.inc_max_nreg(consumer_registers(consumers))
                # Registers hold garbage at launch and every K step accumulates.
                T.clear(C_local)
                for ko in T.serial(k_steps):
                    stage = ko % stages
                    T.mbarrier_wait_parity(full[stage], (ko // stages) & 1)
                    products(A_shared, B_shared, C_local, stage, 0, block_M)
                    # The previous step's batch is done: its stage may be refilled.
                    if swap:
                        settle(ko, k_steps)
                    else:
                        T.wait_wgmma(1)
                    if ko > 0:
                        release(empty, (ko + stages - 1) % stages, tx)
                T.wait_wgmma(0)
                if epilogue_registers(consumers) < consumer_registers(consumers):
                    T.dec_max_nreg(epilogue_registers(consumers))
            # The write-back, after the branches: every load has landed and every product
            # has read its stage by now, and out here TileLang's shared-memory planner
            # sees that, so the C tile reuses the stages' memory.
            if tx < consumers:
                row, col = origin(bm, bn, 0)
                if config.smem_epilogue:
                    stage_c(C_local, C_shared)
                    T.copy(C_shared, C[row, col])
                else:
                    store_direct(C, C_local, row, col)
            if paired:
                # A block leaves only once its partner has made its last release on it.
                TC.cluster_sync()

    # Whole-tile trips of a block (every ``blocks``-th tile), then, under stream-K, its
    # segments (``StreamK.unit``: a share of a tile's K steps, added into C; under
    # ``fixup`` last first, handed over or summed in the kernel).
    whole_trips = plan.dp_waves if plan else -(-tiles // workers) if blocks else 0
    segments = plan.segments if plan else 0
    fixup = config.fixup

    def segment(worker, j):
        """(tile, first K step, K steps, K steps before) of the worker's ``j``-th stream-K
        trip."""
        if fixup:
            return plan.fixup_unit(worker, j, ops)
        u = whole_trips + j
        t, k_first, k_count = plan.unit(worker, u, ops)
        return t, k_first, k_count, plan.steps_before(worker, u, ops)

    @T.macro
    def produce(A, B, A_shared, B_shared, full, empty, t, k_first, k_count, before):
        """The producer's K steps [k_first, k_first + k_count) of tile ``t``; ``before``:
        the K steps the block loaded before them (its stages count on across tiles)."""
        bm, bn = units.tile(t, rank(), ops)
        for ko in T.serial(k_count):
            step = before + ko  # the block's K steps, tile after tile
            stage = step % stages
            T.mbarrier_wait_parity(empty[stage], ((step // stages) & 1) ^ 1)
            load_stage(A, B, A_shared, B_shared, full, stage, bm, bn, k_first + ko)

    @T.macro
    def produce_trips(A, B, loads, worker):
        """The producer's whole-tile trips of ``worker`` (a block, or a cluster): every
        ``workers``-th unit, all its K steps (``loads``: the stages and their barriers)."""
        for u in T.serial(whole_trips):
            if u * workers + worker < tiles:
                produce(A, B, *loads, u * workers + worker, 0, k_steps, u * k_steps)

    @T.macro
    def write_back(C, acc, C_shared, row, col, added):
        """One part of the tile (``acc``, its rows from ``row``) into C: through shared
        memory, added in where ``added`` (a stream-K share), else directly."""
        if config.smem_epilogue:
            # The last part's store has read the staging buffer (its store is not waited
            # for where it is issued, so it runs on under the next tile's K steps).
            T.tma_store_wait(0)
            stage_c(acc, C_shared)
            if added:
                # A stream-K share of the tile: added into C, zeroed before the launch.
                TC.atomic_add(C[row, col], C_shared, use_tma=True)
            else:
                T.tma_copy(C_shared, C[row, col])
        else:
            store_direct(C, acc, row, col)

    @T.macro
    def write_tile(C, C_local, C_bottom, C_shared, bm, bn, added):
        """``write_back`` of the whole tile: its top half, then (``parts`` 2) its bottom
        half, which reuses the staging buffer once TMA has read the first."""
        write_back(C, C_local, C_shared, *origin(bm, bn, 0), added)
        if parts > 1:
            write_back(C, C_bottom, C_shared, *origin(bm, bn, 1), added)

    @T.macro
    def hand_over(W, F, C_local, C_bottom, block_id, flag, tx):
        """Under ``fixup``, a share of a tile short of its last K step: the fp32 sums into
        the block's workspace slot, then, once every consumer has written (their barrier),
        one release that counts them in on the tile's flag (``FIXUP_SIGNAL``)."""
        for i, j in T.Parallel(part_m, block_N):
            W[block_id, i, j] = C_local[i, j]
        if parts > 1:
            for i, j in T.Parallel(part_m, block_N):
                W[block_id, part_m + i, j] = C_bottom[i, j]
        T.sync_threads(FIXUP_BARRIER, consumers)
        if tx == 0:
            T.import_source(FIXUP_SOURCE)
            T.call_extern("handle", FIXUP_SIGNAL, T.address_of(F[flag]))

    @T.macro
    def gather(W, F, C_local, C_bottom, first, last, rank_of, flag, tx):
        """Under ``fixup``, the tile's last K steps: one thread waits (``FIXUP_WAIT``:
        acquire) until the blocks ``first`` to ``last - 1`` have counted in on the flag,
        and sets it back to zero; past the barrier every consumer adds their slots into
        its fragment."""
        if tx == 0:
            T.import_source(FIXUP_SOURCE)
            T.call_extern("handle", FIXUP_WAIT, T.address_of(F[flag]), last - first)
        T.sync_threads(FIXUP_BARRIER, consumers)
        for w in T.serial(first, last):
            slot = w * units.per_unit + rank_of
            for i, j in T.Parallel(part_m, block_N):
                C_local[i, j] += W[slot, i, j]
            if parts > 1:
                for i, j in T.Parallel(part_m, block_N):
                    C_bottom[i, j] += W[slot, part_m + i, j]

    @T.macro
    def consume(
        C,
        A_shared,
        B_shared,
        C_local,
        C_bottom,
        C_shared,
        full,
        empty,
        t,
        k_count,
        before,
        turn,
        share=None,
    ):
        """The consumers' side of ``produce``: the products, then the tile written back,
        or added into C where it is a share of the tile's K steps. With ``parts`` 2,
        ``C_local`` holds the tile's top half and ``C_bottom`` its bottom half. ``turn``
        (ping-pong): the barrier and parity to wait on before the K steps, and the
        barrier to arrive on after them. ``share`` (a stream-K trip under ``fixup``):
        (first K step, workspace, flags, block id), the trip handed over or summed
        (``hand_over``, ``gather``) rather than added into C."""
        tx = T.get_thread_binding()
        bm, bn = units.tile(t, rank(), ops)
        T.clear(C_local)
        if parts > 1:
            T.clear(C_bottom)
        if turn is not None:
            T.mbarrier_wait_parity(turn[0], turn[1])
        for ko in T.serial(k_count):
            step = before + ko
            stage = step % stages
            T.mbarrier_wait_parity(full[stage], (step // stages) & 1)
            if parts > 1:
                products(A_shared, B_shared, C_local, stage, 0, part_m)
                products(A_shared, B_shared, C_bottom, stage, part_m, part_m)
            else:
                products(A_shared, B_shared, C_local, stage, 0, block_M)
            # A K step is ``parts`` batches: wait until at most one step's are pending.
            if swap and in_flight:
                settle(ko, k_count)
            else:
                T.wait_wgmma(in_flight * parts)
            if in_flight == 0:
                release(empty, stage, tx)
            elif ko > 0:
                release(empty, (step + stages - 1) % stages, tx)
        if turn is not None:
            T.barrier_arrive(turn[2])
        # The tile's last batch done, its stage is free: the producer may already be
        # loading the next tile while this one is written.
        if in_flight:
            T.wait_wgmma(0)
            release(empty, (before + k_count - 1) % stages, tx)
        if share is None:
            write_tile(C, C_local, C_bottom, C_shared, bm, bn, segments and k_count < k_steps)
        else:
            k_first, W, F, block_id = share
            rank_of = block_id % units.per_unit
            flag = (t - plan.dp_tiles) * units.per_unit + rank_of
            if k_first + k_count < k_steps:
                hand_over(W, F, C_local, C_bottom, block_id, flag, tx)
            else:
                if k_first > 0:
                    first, last = plan.sharers(t, ops)
                    gather(W, F, C_local, C_bottom, first, last, rank_of, flag, tx)
                write_tile(C, C_local, C_bottom, C_shared, bm, bn, False)

    @T.macro
    def launch_persistent(A, B, C, delay, W=None, F=None):
        """``blocks`` blocks, each taking every ``blocks``-th tile in the order of
        ``tile_coords`` (panels of ``config.swizzle`` tile rows), then under stream-K its
        segments (under ``fixup`` last first, ``StreamK.fixup_unit``; ``W`` and ``F`` the
        workspace and flags). The producer runs on into the next trip's K steps while the
        consumers write the last one back: the stages count K steps over the block's trips
        end to end."""
        with T.Kernel(blocks, threads=consumers + PRODUCER_THREADS, **cluster) as block_id:
            A_shared = T.alloc_shared((stages, *a_tile), dtype)
            B_shared = T.alloc_shared((stages, *b_tile), dtype)
            C_local = T.alloc_fragment((part_m, block_N), accum_dtype)
            C_bottom = T.alloc_fragment((part_m, block_N), accum_dtype) if parts > 1 else None
            C_shared = T.alloc_shared(c_tile, dtype)
            full = T.alloc_barrier([PRODUCER_THREADS] * stages)
            if paired:
                empty = T.alloc_cluster_barrier([releases] * stages)
            else:
                empty = T.alloc_barrier([releases] * stages)
            spin(delay)
            loads = (A_shared, B_shared, full, empty)
            # The blocks of a cluster are consecutive along x: they take their units
            # together, as one worker.
            worker = block_id // units.per_unit
            tx = T.get_thread_binding()
            if tx >= consumers:
                T.dec_max_nreg(PRODUCER_REGISTERS)
                produce_trips(A, B, loads, worker)
                if segments:
                    for j in T.serial(segments):
                        t, k_first, k_count, before = segment(worker, j)
                        if k_count > 0:
                            produce(A, B, *loads, t, k_first, k_count, before)
            else:
                T.inc_max_nreg(consumer_registers(consumers))
                tile_buffers = (A_shared, B_shared, C_local, C_bottom, C_shared, full, empty)
                for u in T.serial(whole_trips):
                    if u * workers + worker < tiles:
                        consume(C, *tile_buffers, u * workers + worker, k_steps, u * k_steps, None)
                if segments:
                    for j in T.serial(segments):
                        t, k_first, k_count, before = segment(worker, j)
                        if k_count > 0:
                            share = (k_first, W, F, block_id) if fixup else None
                            consume(C, *tile_buffers, t, k_count, before, None, share)
                if config.smem_epilogue:
                    # The block's last store reads shared memory, which lives as long as
                    # the block.
                    T.tma_store_wait(0)
            if paired:
                # A block leaves only once its partner has made its last release on it.
                TC.cluster_sync()

    @T.macro
    def launch_pingpong(A, B, C, delay):
        """``config.pingpong``: the persistent loop with two consumer warpgroups, each a
        tile of its own, the even trips of the block to the first and the odd ones to the
        second. The producer loads the trips in turn into the shared stages, and the two
        take turns at their K steps (``order``: each waits until the other has issued
        its last tile's, and a stage's ``full`` barrier is then within one lap of the step
        awaited, where its parity tells them apart), so each one's write-back (direct,
        from registers) runs under the other's K steps; a stage is freed by the one
        warpgroup that used it."""
        with T.Kernel(blocks, threads=consumers + PRODUCER_THREADS) as block_id:
            A_shared = T.alloc_shared((stages, block_M, block_K), dtype)
            B_shared = T.alloc_shared((stages, *b_tile), dtype)
            C_even = T.alloc_fragment((block_M, block_N), accum_dtype)
            C_odd = T.alloc_fragment((block_M, block_N), accum_dtype)
            full = T.alloc_barrier([PRODUCER_THREADS] * stages)
            empty = T.alloc_barrier([WARPGROUP] * stages)  # the consuming warpgroup's
            order = T.alloc_barrier([WARPGROUP, WARPGROUP])  # K steps done: even, odd
            spin(delay)
            loads = (A_shared, B_shared, full, empty)
            tx = T.get_thread_binding()
            if tx >= consumers:
                T.dec_max_nreg(PRODUCER_REGISTERS)
                produce_trips(A, B, loads, block_id)
            elif tx < WARPGROUP:
                T.inc_max_nreg(consumer_registers(consumers))
                even = (A_shared, B_shared, C_even, None, None, full, empty)
                for v in T.serial(-(-whole_trips // 2)):
                    trip = 2 * v
                    if trip * blocks + block_id < tiles:
                        # A fresh barrier passes the wait on parity 1: the first turn is free.
                        turn = (order[1], (v + 1) & 1, order[0])
                        consume(C, *even, trip * blocks + block_id, k_steps, trip * k_steps, turn)
            else:
                T.inc_max_nreg(consumer_registers(consumers))
                odd = (A_shared, B_shared, C_odd, None, None, full, empty)
                for v in T.serial(whole_trips // 2):
                    trip = 2 * v + 1
                    if trip * blocks + block_id < tiles:
                        turn = (order[0], v & 1, order[1])
                        consume(C, *odd, trip * blocks + block_id, k_steps, trip * k_steps, turn)

    if config.pingpong:
        return entry_point(shape, launch_pingpong, delay)
    fixed = fixup_buffers(shape, config)
    return entry_point(shape, launch_persistent if blocks else launch, delay, fixed)
