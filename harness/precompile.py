"""Compile many (shape, config) pairs in parallel into TileLang's disk cache.

One compile takes 3-5 s on one core; a grid of a hundred kernels is minutes in series
and seconds over a many-core runner. Later processes (pytest, each asv benchmark) then
load the kernels from the cache instead of compiling them.

    python -m harness.precompile asv_bench.gemm        # every valid combination of the suite
"""

from __future__ import annotations

import argparse
import importlib
import inspect
import itertools
import os
import sys
import time
from collections.abc import Iterable
from concurrent.futures import ProcessPoolExecutor, as_completed
from multiprocessing import get_context

from harness.argtypes import positive_int
from kernels import GemmConfig, GemmShape
from kernels.gemm import _compile_gemm


def _build(shape: GemmShape, config: GemmConfig, arch: str | None) -> str | None:
    try:
        _compile_gemm(shape, config, arch)
    except Exception as err:  # reported, not raised: the caller's own run shows it in context
        return f"{type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}"
    return None


def precompile(
    pairs: Iterable[tuple[GemmShape, GemmConfig]],
    arch: str | None = None,
    workers: int | None = None,
    log=print,
) -> dict[tuple[GemmShape, GemmConfig], str]:
    """Compile every distinct pair; returns the pairs that failed and why."""
    todo = list(dict.fromkeys(pairs))
    workers = workers or max(1, min(len(todo), (os.cpu_count() or 2) - 1))
    failed: dict = {}
    start = time.perf_counter()
    # spawn: children must not inherit a CUDA context from the parent.
    with ProcessPoolExecutor(workers, mp_context=get_context("spawn")) as pool:
        futures = {pool.submit(_build, s, c, arch): (s, c) for s, c in todo}
        for done, fut in enumerate(as_completed(futures), 1):
            shape, config = futures[fut]
            error = fut.result()
            if error:
                failed[(shape, config)] = error
            log(
                f"[{done}/{len(todo)}] {shape.id} {config.id}"
                + (f" FAILED {error}" if error else "")
            )
    elapsed = time.perf_counter() - start
    log(
        f"compiled {len(todo) - len(failed)}/{len(todo)} kernels "
        f"in {elapsed:.0f} s on {workers} workers"
    )
    return failed


def suite_pairs(module_name: str) -> list[tuple[GemmShape, GemmConfig]]:
    """Every valid (shape, config) of the asv classes in ``module_name`` that map their
    params through a ``case`` method; ``module:NAME`` takes the module's list NAME of
    (shape, config) pairs instead (e.g. ``tests.test_gemm:PRECOMPILE``)."""
    module_name, _, attr = module_name.partition(":")
    module = importlib.import_module(module_name)
    if attr:
        return list(getattr(module, attr))
    pairs = []
    for name, cls in vars(module).items():
        if name.startswith("_") or not inspect.isclass(cls) or not hasattr(cls, "params"):
            continue
        case = getattr(cls, "case", None)
        if case is None:
            continue
        for combo in itertools.product(*cls.params):
            try:
                shape, config = case(cls(), *combo)
            except (ValueError, NotImplementedError):
                continue
            if config is not None:  # None: no TileLang kernel (e.g. torch.matmul's launch)
                pairs.append((shape, config))
    return pairs


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m harness.precompile",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "modules",
        nargs="+",
        help="asv benchmark modules (asv_bench.gemm) or module:LIST of pairs",
    )
    parser.add_argument(
        "--arch",
        default=None,
        help="cross-compile for this arch (e.g. sm_90a); default: the visible GPU",
    )
    parser.add_argument(
        "--workers", type=positive_int, default=None, help="processes (default: cores - 1)"
    )
    args = parser.parse_args(argv)
    pairs = [p for m in args.modules for p in suite_pairs(m)]
    failed = precompile(pairs, arch=args.arch, workers=args.workers)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
