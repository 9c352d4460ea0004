"""Compile many (shape, config) pairs in parallel into TileLang's disk cache.

One compile takes 3-5 s on one core; a grid of a hundred kernels is minutes in series
and seconds over a many-core runner. Later processes (pytest, each asv benchmark) then
load the kernels from the cache instead of compiling them.

    python -m harness.suite.precompile                 # every valid combination of the suite
    python -m harness.suite.precompile --bench Tiles   # the combinations a regex matches

The command keeps a stamp in TileLang's cache folder ($TILELANG_CACHE_DIR) of what it
compiled there, keyed by the kernel source and the TileLang version: a second run over
the same grid starts no compile workers (``--force`` ignores the stamp). Wiping the cache
wipes the stamp; a kernel missing from the cache anyway is only compiled later, in the
process that needs it.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.metadata
import json
import os
import sys
import time
from collections.abc import Iterable
from concurrent.futures import ProcessPoolExecutor, as_completed
from multiprocessing import get_context
from pathlib import Path

from harness.cli import positive_int, regex
from harness.suite import discovery
from kernels import GemmConfig, GemmShape
from kernels.gemm import _compile_gemm

ROOT = Path(__file__).resolve().parent.parent.parent


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


def stamp_path() -> Path:
    root = Path(os.environ.get("TILELANG_CACHE_DIR", "~/.tilelang/cache")).expanduser()
    return root / "tilelang-gemm-perf-precompiled.json"


def fingerprint() -> str:
    """What a compiled kernel depends on besides its shape and config: the source of the
    kernel package (every module that builds a program) and the TileLang version."""
    import kernels

    try:
        version = importlib.metadata.version("tilelang")
    except importlib.metadata.PackageNotFoundError:
        version = "unknown"
    digest = hashlib.sha256(version.encode())
    for path in sorted(Path(kernels.__file__).parent.glob("*.py")):
        digest.update(path.name.encode() + path.read_bytes())
    return digest.hexdigest()[:16]


def stamp_key(shape: GemmShape, config: GemmConfig, arch: str | None) -> str:
    return f"{shape.id}/{config.id}/{arch or 'native'}"


def load_stamp(path: Path, current: str) -> set[str]:
    """Keys compiled into this cache for the ``current`` fingerprint (else none)."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return set()
    return set(data.get("done", [])) if data.get("fingerprint") == current else set()


def save_stamp(path: Path, current: str, done: set[str]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".{os.getpid()}.tmp")
    tmp.write_text(json.dumps({"fingerprint": current, "done": sorted(done)}))
    os.replace(tmp, path)


def suite_pairs(root: Path = ROOT, bench: str | None = None) -> list[tuple[GemmShape, GemmConfig]]:
    """Every valid (shape, config) of the GPU families of the suite in ``root`` (the
    benchmark_dir of its asv.conf.json), narrowed to the combinations ``bench`` selects
    (by asv's or the gate's name)."""
    pairs = []
    for family in discovery.families(root):
        if not family.is_gpu:
            continue
        for combo in family.combinations():
            if bench is not None and not discovery.selected(
                discovery.aliases(family, combo), [bench]
            ):
                continue
            try:
                shape, config = family.cls().case(*combo)
            except (ValueError, NotImplementedError):
                continue
            if config is not None:  # None: no TileLang kernel (e.g. torch.matmul's launch)
                pairs.append((shape, config))
    return pairs


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m harness.suite.precompile",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--bench",
        type=regex,
        default=None,
        help="regex on asv or gate names (gemm.Stage(4096x4096x4096, 128, 3, f16)); default all",
    )
    parser.add_argument(
        "--arch",
        default=None,
        help="cross-compile for this arch (e.g. sm_90a); default: the visible GPU",
    )
    parser.add_argument(
        "--workers", type=positive_int, default=None, help="processes (default: cores - 1)"
    )
    parser.add_argument(
        "--force", action="store_true", help="compile everything, ignoring the stamp"
    )
    args = parser.parse_args(argv)
    pairs = list(dict.fromkeys(suite_pairs(ROOT, args.bench)))
    stamp, current = stamp_path(), fingerprint()
    done = set() if args.force else load_stamp(stamp, current)
    todo = [(s, c) for s, c in pairs if stamp_key(s, c, args.arch) not in done]
    if not todo:
        print(f"all {len(pairs)} kernels already compiled into this TileLang cache ({stamp})")
        return 0
    if len(todo) < len(pairs):
        print(f"{len(pairs) - len(todo)} of {len(pairs)} kernels already compiled ({stamp})")
    failed = precompile(todo, arch=args.arch, workers=args.workers)
    done |= {stamp_key(s, c, args.arch) for s, c in todo if (s, c) not in failed}
    save_stamp(stamp, current, done)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
