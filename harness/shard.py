"""Spread the asv suite over the GPUs of one host: one ``asv run`` per GPU, pinned with
``CUDA_VISIBLE_DEVICES``, each under its own asv machine name (``h200-gpu0``, ...).

    nox -s bench -- --gpus all        # or --gpus 0,1
    python -m harness.shard --gpus all -- <asv run args>

The plan is stable: a benchmark combination goes to the GPU its name hashes to unless
that GPU already holds its share, so it lands on the same GPU index run after run (its
history stays comparable) and adding a benchmark moves few others. Every combination is
assigned exactly once. A shard that fails keeps the other shards' results.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib
import inspect
import itertools
import math
import os
import re
import subprocess
import sys
import threading
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
_PROGRESS = re.compile(r"^\[\s*([\d.]+)%\]")


def _rank(name: str, gpu: int) -> int:
    """Rendezvous score: each name ranks the GPUs in its own stable order."""
    return int.from_bytes(hashlib.sha256(f"{gpu}:{name}".encode()).digest()[:8], "big")


def plan(names: list[str], gpus: list[int]) -> dict[int, list[str]]:
    """Assign each name to one GPU: its highest-ranked GPU with room left, capacity
    ceil(len(names) / len(gpus)). Names are placed in a fixed (sorted) order."""
    if not gpus:
        raise ValueError("gpus: need at least one GPU index")
    if len(set(gpus)) != len(gpus):
        raise ValueError(f"gpus={gpus}: indices must be distinct")
    capacity = math.ceil(len(names) / len(gpus)) if names else 0
    shards: dict[int, list[str]] = {g: [] for g in gpus}
    for name in sorted(set(names)):
        for gpu in sorted(gpus, key=lambda g: _rank(name, g), reverse=True):
            if len(shards[gpu]) < capacity:
                shards[gpu].append(name)
                break
    return shards


def combinations(module_name: str = "asv_bench.gemm") -> list[str]:
    """``Class(param, ...)`` for every parameter combination of the module's asv classes,
    written with ``repr`` as asv writes them, so one regex selects all tracks of it."""
    module = importlib.import_module(module_name)
    short = module_name.rsplit(".", 1)[-1]
    out = []
    for cls_name, cls in vars(module).items():
        if cls_name.startswith("_") or not inspect.isclass(cls) or not hasattr(cls, "params"):
            continue
        for combo in itertools.product(*cls.params):
            out.append(f"{short}.{cls_name}({', '.join(repr(p) for p in combo)})")
    return out


def asv_regex(combo: str) -> str:
    """asv ``-b`` pattern for every track of one combination."""
    cls, params = combo.split("(", 1)
    return f"^{re.escape(cls)}\\.track_\\w+\\({re.escape(params)}$"


def parse_gpus(text: str, visible: int) -> list[int]:
    """``all`` or a comma list of indices, checked against the ``visible`` count."""
    if text == "all":
        if visible < 1:
            raise ValueError("--gpus all: no CUDA device is visible")
        return list(range(visible))
    try:
        gpus = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise ValueError(f"--gpus={text!r}: must be 'all' or indices like 0,1") from None
    bad = [g for g in gpus if not 0 <= g < visible]
    if not gpus or bad:
        raise ValueError(f"--gpus={text!r}: indices must be in 0..{visible - 1}")
    return gpus


def run(gpus: list[int], machine: str, sha: str, asv_args: list[str], python: str) -> int:
    """One ``asv run`` per GPU at once; a progress line per shard; the worst exit status."""
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    shards = plan(combinations(), gpus)
    procs = {}
    with Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        TextColumn("{task.percentage:>5.1f}%"),
        TimeElapsedColumn(),
    ) as progress:
        total = progress.add_task("all shards", total=100.0 * len(gpus))
        tasks = {}
        for gpu, combos in shards.items():
            name = f"{machine}-gpu{gpu}"
            env = {**os.environ, "CUDA_VISIBLE_DEVICES": str(gpu), "ASV_MACHINE": name}
            subprocess.run(
                [python, "-m", "asv", "machine", "--yes", "--machine", name],
                cwd=ROOT,
                env=env,
                check=True,
                capture_output=True,
            )
            bench = [arg for c in combos for arg in ("-b", asv_regex(c))]
            cmd = [
                python,
                "-m",
                "asv",
                "run",
                "-E",
                f"existing:{python}",
                "--set-commit-hash",
                sha,
                "--machine",
                name,
                "--record-samples",
                *bench,
                *asv_args,
            ]
            log = (ROOT / ".asv" / f"shard-gpu{gpu}.log").open("w")
            procs[gpu] = (
                subprocess.Popen(
                    cmd,
                    cwd=ROOT,
                    env=env,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.STDOUT,
                    text=True,
                ),
                log,
            )
            tasks[gpu] = progress.add_task(f"gpu{gpu}: {len(combos)} combinations", total=100.0)

        def follow(gpu):
            proc, log = procs[gpu]
            for line in proc.stdout:
                log.write(line)
                found = _PROGRESS.match(line)
                if found:
                    progress.update(tasks[gpu], completed=float(found.group(1)))
                    progress.update(
                        total, completed=sum(progress.tasks[t].completed for t in tasks.values())
                    )
            proc.wait()
            log.close()

        threads = [threading.Thread(target=follow, args=(g,)) for g in procs]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    codes = {gpu: proc.returncode for gpu, (proc, _) in procs.items()}
    for gpu, code in codes.items():
        status = "ok" if code == 0 else f"FAILED (exit {code}), see .asv/shard-gpu{gpu}.log"
        print(f"shard gpu{gpu} ({machine}-gpu{gpu}): {status}")
    return max(codes.values())


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m harness.shard",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--gpus", required=True, help="'all' or indices like 0,1")
    p.add_argument("--machine", default=None, help="asv machine name stem (default: the GPU)")
    p.add_argument("asv_args", nargs="*", help="passed to every asv run (after --)")
    args = p.parse_args(argv)
    import torch

    from harness import device

    try:
        gpus = parse_gpus(args.gpus, torch.cuda.device_count())
    except ValueError as err:
        p.error(str(err))
    sha = subprocess.check_output(["git", "rev-parse", "HEAD"], cwd=ROOT, text=True).strip()
    return run(gpus, args.machine or device.machine_name(), sha, args.asv_args, sys.executable)


if __name__ == "__main__":
    sys.exit(main())
