"""Build every config of a covering grid for sm_90a and check each is on the Hopper path.

    python3 -m benchmarks.validate_space                 # the whole grid, one worker per core
    python3 -m benchmarks.validate_space --list          # the grid's parts and sizes, no build
    python3 -m benchmarks.validate_space --sample 40     # 40 pairs of the grid, drawn at random
    python3 -m benchmarks.validate_space --part tiles --workers 8

``GemmConfig`` refuses what TileLang cannot build as a wgmma kernel; this is the evidence
that the rest builds. Each pair of the grid is compiled for sm_90a (on the CPU: TileLang
and nvcc, no GPU) and its CUDA source must issue wgmma, never mma.sync, and, where the
rows of A, B and C are 16-byte aligned, load through TMA. The grid (``grid``) spans each
rule's boundaries rather than the whole space, which is too large to build:

- ``tiles``: every accepted (block_m, block_n, threads) with block_k 64, under each warp
  policy where the tile splits among the warpgroups in more than one way;
- ``block_k``: every block_k on three tiles, NN fp16 and NT bf16;
- ``stages``: every pipeline depth that fits, on two tiles;
- ``options``: shared-memory epilogue, swizzle, persistent grid, split-K and the
  asynchronous pipeline on five tiles, NN fp16 and NT bf16;
- ``random``: configs drawn (fixed seed) from the validator's whole range of every field,
  on aligned and ragged shapes.

Every pair prints a progress line; the summary lists the failures. Exit status 0 when
every pair builds on the Hopper path, 1 otherwise. Kernels go to TileLang's disk cache
($TILELANG_CACHE_DIR), so a second run loads them.
"""

from __future__ import annotations

import argparse
import itertools
import os
import random
import re
import sys
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import replace
from multiprocessing import get_context

from kernels import GemmConfig, GemmShape, compile_gemm
from kernels.gemm import (
    MAX_STAGES,
    MAX_THREADS,
    MAX_TILE,
    MMA_ALIGN,
    POLICIES,
    WARPGROUP,
    WGMMA_M,
    wgmma_partitions,
)

PROG = "python3 -m benchmarks.validate_space"
ARCH = "sm_90a"
SQUARE_NN = GemmShape(4096, 4096, 4096)
SQUARE_NT = GemmShape(4096, 4096, 4096, "bfloat16", "NT")
# Partial tiles along every dimension, rows still 16-byte aligned (split-K and the
# asynchronous pipeline need that; the shape checks refuse the rest).
RAGGED = GemmShape(4097, 1032, 520)
RANDOM_COUNT = 100
RANDOM_SEED = 13

Pair = tuple[GemmShape, GemmConfig]


def _accepted(**fields) -> GemmConfig | None:
    try:
        return GemmConfig(**fields)
    except ValueError:
        return None  # refused by the validator: not part of the claim


def _tiles() -> Iterable[Pair]:
    for bm, bn, th in itertools.product(
        range(WGMMA_M, MAX_TILE + 1, WGMMA_M),
        range(MMA_ALIGN, MAX_TILE + 1, MMA_ALIGN),
        range(WARPGROUP, MAX_THREADS + 1, WARPGROUP),
    ):
        # The policy only picks among the splits; with one split every policy is the same.
        several = len(wgmma_partitions(bm, bn, th)) > 1
        for policy in POLICIES if several else ("square",):
            fields = {"block_m": bm, "block_n": bn, "threads": th, "policy": policy}
            yield SQUARE_NN, _accepted(**fields, block_k=64, num_stages=2)


def _block_k() -> Iterable[Pair]:
    for (bm, bn, th), bk, shape in itertools.product(
        [(64, 64, 128), (128, 256, 256), (256, 128, 256)],
        range(MMA_ALIGN, MAX_TILE + 1, MMA_ALIGN),
        (SQUARE_NN, SQUARE_NT),
    ):
        # Two stages where they fit in shared memory, else one.
        fields = {"block_m": bm, "block_n": bn, "block_k": bk, "threads": th}
        yield shape, _accepted(**fields, num_stages=2) or _accepted(**fields, num_stages=1)


def _stages() -> Iterable[Pair]:
    for (bm, bn, bk, th), st in itertools.product(
        [(128, 128, 64, 128), (64, 128, 64, 128)], range(1, MAX_STAGES + 1)
    ):
        yield SQUARE_NN, _accepted(block_m=bm, block_n=bn, block_k=bk, threads=th, num_stages=st)


ORDERS = [{}, {"swizzle": 8}, {"persistent": 132}, {"split_k": 4}]


def _options() -> Iterable[Pair]:
    tiles = [
        GemmConfig(64, 128, 64, 128, 4),
        GemmConfig(128, 256, 64, 256, 3),
        GemmConfig(256, 128, 64, 256, 3),
        GemmConfig(192, 128, 64, 384, 3),
        GemmConfig(256, 256, 64, 512, 2),
    ]
    for tile, epilogue, order, async_mma, shape in itertools.product(
        tiles, (False, True), ORDERS, (False, True), (SQUARE_NN, SQUARE_NT)
    ):
        try:
            yield shape, replace(tile, smem_epilogue=epilogue, async_mma=async_mma, **order)
        except ValueError:
            continue  # e.g. the asynchronous pipeline with a persistent grid


def _random() -> Iterable[Pair]:
    """Configs drawn over each field's whole accepted range: interactions no part above
    was written for."""
    rng = random.Random(RANDOM_SEED)
    shapes = (SQUARE_NN, SQUARE_NT, RAGGED)
    drawn = 0
    while drawn < RANDOM_COUNT:
        order = rng.choice(["plain", "swizzle", "persistent", "split_k"])
        config = _accepted(
            block_m=rng.randrange(WGMMA_M, MAX_TILE + 1, WGMMA_M),
            block_n=rng.randrange(MMA_ALIGN, MAX_TILE + 1, MMA_ALIGN),
            block_k=rng.randrange(MMA_ALIGN, MAX_TILE + 1, MMA_ALIGN),
            threads=rng.randrange(WARPGROUP, MAX_THREADS + 1, WARPGROUP),
            num_stages=rng.randint(1, MAX_STAGES),
            swizzle=rng.randint(1, 64) if order == "swizzle" else 0,
            persistent=rng.randint(1, 4096) if order == "persistent" else 0,
            split_k=rng.randint(2, 64) if order == "split_k" else 1,
            policy=rng.choice(list(POLICIES)),
            smem_epilogue=rng.random() < 0.5,
            async_mma=rng.random() < 0.3,
        )
        if config is not None:
            yield shapes[drawn % len(shapes)], config
            drawn += 1


PARTS: dict[str, Callable[[], Iterable[Pair]]] = {
    "tiles": _tiles,
    "block_k": _block_k,
    "stages": _stages,
    "options": _options,
    "random": _random,
}


def grid(parts: Iterable[str] = PARTS) -> list[Pair]:
    """The distinct accepted (shape, config) pairs of ``parts``, in order."""
    pairs = (pair for name in parts for pair in PARTS[name]())
    return list(dict.fromkeys(p for p in pairs if p[1] is not None))


def _aligned(shape: GemmShape) -> bool:
    # TMA needs 16-byte aligned rows (8 elements of 2 bytes) of every operand.
    rows = (shape.k, shape.k if shape.layout == "NT" else shape.n, shape.n)
    return all(r % 8 == 0 for r in rows)


def hopper_path_problem(shape: GemmShape, source: str) -> str | None:
    """Why the generated CUDA ``source`` is off the Hopper path, or None."""
    if "wgmma" not in source:
        return "no wgmma in the generated source"
    if "mma_sync" in source:
        return "mma.sync in the generated source"
    if _aligned(shape) and "tma_load" not in source:
        return "no TMA load although every row is 16-byte aligned"
    return None


def check_pair(shape: GemmShape, config: GemmConfig, arch: str = ARCH) -> str | None:
    """Build one pair; None when it builds on the Hopper path, else what went wrong."""
    try:
        source = compile_gemm(shape, config, arch=arch).source
    except Exception as err:  # any build failure is this pair's result, not the sweep's end
        lines = str(err).strip().splitlines() or [""]
        # nvcc's message ends with the command line; its ptxas line says what went wrong.
        why = next((line for line in lines if "ptxas fatal" in line), lines[-1])
        return f"{type(err).__name__}: {why.strip()}"[:400]
    return hopper_path_problem(shape, source)


def _quiet_check(shape: GemmShape, config: GemmConfig, arch: str) -> tuple[str | None, float]:
    import logging

    logging.getLogger("TileLang").setLevel(logging.WARNING)  # a line per compile otherwise
    start = time.perf_counter()
    problem = check_pair(shape, config, arch)
    return problem, time.perf_counter() - start


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=PROG, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument(
        "--part",
        nargs="+",
        choices=list(PARTS),
        default=list(PARTS),
        help="parts of the grid to build (default: all)",
    )
    p.add_argument(
        "--sample",
        type=int,
        default=0,
        metavar="N",
        help="build N pairs of the grid drawn at random (--seed); 0 builds all",
    )
    p.add_argument("--seed", type=int, default=0, help="seed of --sample")
    p.add_argument(
        "--match",
        default=None,
        metavar="REGEX",
        help="only pairs whose shape and config id ('SHAPE CONFIG') match, e.g. '_t512'",
    )
    p.add_argument(
        "--workers",
        type=int,
        default=max(1, (os.cpu_count() or 2) - 1),
        help="compile processes (1: in this process)",
    )
    p.add_argument("--arch", default=ARCH, help="CUDA arch to build for (default sm_90a)")
    p.add_argument("--list", action="store_true", help="print the parts and their sizes only")
    return p


def run(pairs: list[Pair], arch: str, workers: int, log=print) -> dict[Pair, str]:
    """Build every pair; returns the failures and why. ``workers`` 1 builds in-process."""
    failed: dict[Pair, str] = {}
    start = time.perf_counter()

    def report(done: int, pair: Pair, problem: str | None, seconds: float) -> None:
        if problem:
            failed[pair] = problem
        status = f"FAILED {problem}" if problem else "ok"
        log(f"[{done}/{len(pairs)}] {pair[0].id} {pair[1].id} {status} ({seconds:.1f} s)")

    if workers <= 1:
        for done, pair in enumerate(pairs, 1):
            report(done, pair, *_quiet_check(*pair, arch))
    else:
        # spawn: children start without the parent's TileLang and CUDA state.
        with ProcessPoolExecutor(workers, mp_context=get_context("spawn")) as pool:
            futures = {pool.submit(_quiet_check, *pair, arch): pair for pair in pairs}
            for done, fut in enumerate(as_completed(futures), 1):
                report(done, futures[fut], *fut.result())
    elapsed = time.perf_counter() - start
    log(
        f"{len(pairs) - len(failed)}/{len(pairs)} pairs built on the Hopper path for {arch} "
        f"in {elapsed:.0f} s on {max(workers, 1)} worker(s)"
    )
    for (shape, config), problem in failed.items():
        log(f"FAILED {shape.id} {config.id}: {problem}")
    return failed


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.list:
        for name in args.part:
            print(f"{name}: {len(grid([name]))} pairs")
        print(f"total (distinct): {len(grid(args.part))} pairs")
        return 0
    pairs = grid(args.part)
    if args.match:
        pairs = [(s, c) for s, c in pairs if re.search(args.match, f"{s.id} {c.id}")]
    if args.sample:
        pairs = random.Random(args.seed).sample(pairs, min(args.sample, len(pairs)))
    failed = run(pairs, args.arch, args.workers)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
