"""Compile many (shape, config) pairs in parallel into TileLang's disk cache.

One compile takes 3-5 s on one core; a grid of a hundred kernels is minutes in series
and seconds over a many-core runner. Later processes (pytest, each asv benchmark) then
load the kernels from the cache instead of compiling them.

    python -m harness.suite.precompile                 # every valid combination of the suite
    python -m harness.suite.precompile --bench Tiles   # the combinations a regex matches
    python -m harness.suite.precompile --arch sm_90a --gpu "NVIDIA H200"   # on a CPU host

Every kernel is built through discovery's one walk (``discovery.combination`` and
``discovery.build``), for the visible GPU, or with ``--arch`` for a device that is not
here (``CompileTarget``): the SM count, which sizes a tuned config, is the visible GPU's,
else the one the tuned table records for ``--gpu``.

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
from harness.measure.device import DeviceSpec, gpu_name, no_gpu_reason
from harness.ops.contract import CompileTarget, arch_of
from harness.suite import discovery
from harness.suite.discovery import Combination
from kernels.tuned import TUNED_FILE, load, recorded_sms

ROOT = Path(__file__).resolve().parent.parent.parent


def _build(combo: Combination, device) -> str | None:
    try:
        discovery.build(combo, device)
    except Exception as err:  # reported, not raised: the caller's own run shows it in context
        return f"{type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}"
    return None


def _key(combo: Combination) -> tuple:
    """What makes two combinations one kernel: families share kernels."""
    return (combo.operator, combo.shape, combo.config)


def precompile(
    combos: Iterable[Combination],
    device=None,
    workers: int | None = None,
    log=print,
) -> dict[tuple, str]:
    """Compile every distinct kernel of ``combos`` for ``device`` (None: the visible GPU;
    a ``CompileTarget``: cross-compile); returns the (operator, shape, config) that
    failed and why."""
    todo = list({_key(c): c for c in combos}.values())
    workers = workers or max(1, min(len(todo), (os.cpu_count() or 2) - 1))
    failed: dict = {}
    start = time.perf_counter()
    # spawn: children must not inherit a CUDA context from the parent.
    with ProcessPoolExecutor(workers, mp_context=get_context("spawn")) as pool:
        futures = {pool.submit(_build, c, device): c for c in todo}
        for done, fut in enumerate(as_completed(futures), 1):
            combo = futures[fut]
            error = fut.result()
            if error:
                failed[_key(combo)] = error
            log(
                f"[{done}/{len(todo)}] {combo.shape.id} {combo.config.id}"
                + (f" FAILED {error}" if error else "")
            )
    elapsed = time.perf_counter() - start
    log(
        f"compiled {len(todo) - len(failed)}/{len(todo)} kernels "
        f"in {elapsed:.0f} s on {workers} workers"
    )
    return failed


def compile_gemms(pairs: Iterable[tuple], progress, workers: int | None = None) -> dict:
    """``precompile`` for the dense GEMM's (shape, config) ``pairs`` (repeats compiled
    once), shown as a task of ``progress`` (a rich Progress) that is removed when done;
    the commands that time kernels call it before their first timing."""
    combos = list(dict.fromkeys(Combination(s.id, "gemm", s, c) for s, c in pairs))
    task = progress.add_task(f"compiling {len(combos)} kernels", total=len(combos))
    failed = precompile(
        combos, workers=workers, log=lambda line: line.startswith("[") and progress.advance(task)
    )
    progress.remove_task(task)
    return failed


def stamp_path() -> Path:
    root = Path(os.environ.get("TILELANG_CACHE_DIR", "~/.tilelang/cache")).expanduser()
    return root / "tilelang-gemm-perf-precompiled.json"


def fingerprint() -> str:
    """What a compiled kernel depends on besides its shape and config: the source of the
    kernel package and of every registered family package (every module that builds a
    program) and the TileLang version."""
    import kernels
    from harness.ops.registry import family_folders

    try:
        version = importlib.metadata.version("tilelang")
    except importlib.metadata.PackageNotFoundError:
        version = "unknown"
    digest = hashlib.sha256(version.encode())
    for folder in [Path(kernels.__file__).resolve().parent, *family_folders()]:
        for path in sorted(folder.glob("*.py")):
            digest.update(f"{folder.name}/{path.name}".encode() + path.read_bytes())
    return digest.hexdigest()[:16]


def stamp_key(combo: Combination, device=None) -> str:
    return f"{combo.shape.id}/{combo.config.id}/{arch_of(device) or 'native'}"


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


def suite_combinations(
    root: Path = ROOT, bench: str | None = None, device=None
) -> list[Combination]:
    """Every valid combination with a kernel of the GPU families of the suite in ``root``
    (the benchmark_dir of its asv.conf.json), narrowed to those ``bench`` selects (by
    asv's or the gate's name), as ``device`` decides them (``discovery.combination``)."""
    out = []
    for family in discovery.families(root):
        if not family.is_gpu:
            continue
        for params in family.combinations():
            if bench is not None and not discovery.selected(
                discovery.aliases(family, params), [bench]
            ):
                continue
            try:
                combo = discovery.combination(family, params, device)
            except discovery.Skipped:
                continue
            if combo.config is not None:  # None: no kernel (e.g. torch.matmul's launch)
                out.append(combo)
    return out


def target(arch: str | None, gpu: str | None, path: Path = TUNED_FILE):
    """The device the kernels are built for: None, the visible GPU (``arch`` None), or a
    ``CompileTarget`` for ``arch`` with the visible GPU's SM count, else the count the
    tuned table records for ``gpu`` (ValueError naming the option where there is none)."""
    if arch is None:
        return None
    if no_gpu_reason() is None and gpu in (None, gpu_name()):
        spec = DeviceSpec.read()
        return CompileTarget(spec.sm_count, arch, spec.compute_capability, spec.name)
    if gpu is None:
        raise ValueError(
            f"--arch {arch}: no GPU is visible, so --gpu must name the GPU whose SM count "
            f"sizes the configs (the tuned table records {sorted(load(path))})"
        )
    sms = recorded_sms(gpu, path)
    if sms is None:
        raise ValueError(
            f"--gpu {gpu!r}: the tuned table ({path.name}) records no SM count for it; "
            f"must be one of {sorted(load(path))}"
        )
    return CompileTarget(sms, arch, name=gpu)


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
        "--gpu",
        default=None,
        help="with --arch on a host without that GPU: the GPU (torch's name, as the tuned "
        "table keys it) whose SM count and tuned configs to build",
    )
    parser.add_argument(
        "--workers", type=positive_int, default=None, help="processes (default: cores - 1)"
    )
    parser.add_argument(
        "--force", action="store_true", help="compile everything, ignoring the stamp"
    )
    args = parser.parse_args(argv)
    try:
        device = target(args.arch, args.gpu)
    except ValueError as err:
        parser.error(str(err))
    combos = suite_combinations(ROOT, args.bench, device)
    combos = list({_key(c): c for c in combos}.values())
    stamp, current = stamp_path(), fingerprint()
    done = set() if args.force else load_stamp(stamp, current)
    todo = [c for c in combos if stamp_key(c, device) not in done]
    if not todo:
        print(f"all {len(combos)} kernels already compiled into this TileLang cache ({stamp})")
        return 0
    if len(todo) < len(combos):
        print(f"{len(combos) - len(todo)} of {len(combos)} kernels already compiled ({stamp})")
    failed = precompile(todo, device, workers=args.workers)
    done |= {stamp_key(c, device) for c in todo if _key(c) not in failed}
    save_stamp(stamp, current, done)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
