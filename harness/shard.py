"""Spread the asv suite over the GPUs of one host: one ``asv run`` per GPU, pinned with
``CUDA_VISIBLE_DEVICES``, each under its own asv machine name (``h200-gpu0``, ...).

    nox -s bench -- --gpus all        # or --gpus 0,1
    python -m harness.shard --gpus all -- <asv run args>

The unit is the benchmark class (``gemm.Stage``): asv measures a class as a whole in its
``setup_cache``, so a class split over two GPUs would be measured on both. Every class of
the suite is placed, the CPU-only ones of ``static`` too, so ``--gpus`` runs the same grid
as one ``asv run``. Each class is weighted by the estimated cost of measuring it
(``family_weights``: per GPU combination a fixed cost plus a share proportional to its
flops; per CPU combination a cold compile). A ``-b REGEX`` among the asv arguments narrows
every shard to the tracks it matches (asv would otherwise run them on every shard). A
class marked ``solo`` (``gemm.Launch``, which times the host's launch path) runs alone
before the shards start: on the H200 host it read 17-21 us per call while the other GPU's
shard ran, against 11-13 us alone. The plan is stable: a class goes to the GPU its name
hashes to unless that GPU would pass its share of the total weight, so it lands on the
same GPU index run after run (its history stays comparable) and adding a class moves few
others. Every unit is assigned exactly once; a GPU left without one runs nothing. A shard
that fails keeps the other shards' results.
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
from collections.abc import Mapping
from pathlib import Path

from harness.argtypes import gpu_list
from harness.gpu_state import visible_entry

ROOT = Path(__file__).resolve().parent.parent
_PROGRESS = re.compile(r"^\[\s*([\d.]+)%\]")
# Room over the even share: a little keeps a class on its own GPU when another class is
# added (fewer moves, comparable histories) at a small cost in balance.
SLACK = 0.1
# The modules whose classes make up the suite, as asv.conf.json's benchmark_dir holds them.
SUITE_MODULES = ("asv_bench.gemm", "asv_bench.static")
_BENCH_PREFIXES = ("track_", "time_", "mem_", "peakmem_", "timeraw_")
# A CPU-track combination in units of a GPU combination's fixed cost: a cold compile or a
# compiled kernel's ptxas report. Fitted on an H200 host: the 18 static combinations took
# about 98 s of a shard where a unit of GPU work took 1.4 s.
CPU_COMBINATION_WEIGHT = 3.9


def _rank(name: str, gpu: int) -> int:
    """Rendezvous score: each name ranks the GPUs in its own stable order."""
    return int.from_bytes(hashlib.sha256(f"{gpu}:{name}".encode()).digest()[:8], "big")


def plan(weights: Mapping[str, float], gpus: list[int]) -> dict[int, list[str]]:
    """Assign each unit to one GPU: its highest-ranked GPU with room for it, else the
    least-loaded GPU. Units are placed heaviest first (ties by name), a fixed order
    whatever the input order, so the plan depends on names and weights alone. A GPU has room
    while its load stays within the even share plus ``SLACK`` of it, the slack never more
    than the heaviest unit: so no shard exceeds its share by more than one unit."""
    if not gpus:
        raise ValueError("gpus: need at least one GPU index")
    if len(set(gpus)) != len(gpus):
        raise ValueError(f"gpus={gpus}: indices must be distinct")
    bad = {name: w for name, w in weights.items() if not 0 <= w < math.inf}
    if bad:
        raise ValueError(f"weights={bad}: must be finite and >= 0")
    share = sum(weights.values()) / len(gpus)
    capacity = share + min(SLACK * share, max(weights.values(), default=0.0))
    shards: dict[int, list[str]] = {g: [] for g in gpus}
    load = dict.fromkeys(gpus, 0.0)
    for name in sorted(weights, key=lambda n: (-weights[n], n)):
        ranked = sorted(gpus, key=lambda g: _rank(name, g), reverse=True)
        # A relative tolerance: loads are sums of floats.
        room = [g for g in ranked if load[g] + weights[name] <= capacity * (1 + 1e-9)]
        gpu = room[0] if room else min(ranked, key=lambda g: load[g])
        shards[gpu].append(name)
        load[gpu] += weights[name]
    return shards


def combination_weight(flops: int | None) -> float:
    """Estimated cost of measuring one combination, in units of a small one's fixed cost
    (loading the kernel, the timing loops' own overhead: 1-2 s on an H200). The rest is
    proportional to the work: each combination times several hundred launches of the
    kernel and of torch.matmul, which for an 8192^3 GEMM (1.1 TFLOP) add about one unit.
    An invalid combination (``None``) is skipped at once."""
    return 0.0 if flops is None else 1.0 + flops / 1e12


def suite_units(modules: tuple[str, ...] = SUITE_MODULES) -> dict[str, list[tuple[str, type]]]:
    """The plan's units: ``{"gemm.Stage": [("gemm.Stage", class)], "static": [...]}``. A GPU
    class (one with ``case``) is a unit of its own; a module's CPU classes form one unit
    named after the module, so they run one after another on one shard: they compile with
    every core, and two of them at once would slow each other's timed compiles."""
    out: dict[str, list[tuple[str, type]]] = {}
    for module_name in modules:
        module = importlib.import_module(module_name)
        short = module_name.rsplit(".", 1)[-1]
        for cls_name, cls in vars(module).items():
            if cls_name.startswith("_") or not inspect.isclass(cls) or not hasattr(cls, "params"):
                continue
            family = f"{short}.{cls_name}"
            out.setdefault(family if hasattr(cls, "case") else short, []).append((family, cls))
    return out


def benchmark_names(family: str, cls: type) -> list[str]:
    """asv's names of one class's benchmarks, one per parameter combination, as ``-b``
    matches them: ``gemm.Stage.track_latency('4096x4096x4096', 128, 1, 'f16')``."""
    methods = sorted(n for n in dir(cls) if n.startswith(_BENCH_PREFIXES))
    combos = list(itertools.product(*cls.params)) if cls.params else [()]
    return [
        f"{family}.{m}({', '.join(repr(p) for p in c)})" if c else f"{family}.{m}"
        for m in methods
        for c in combos
    ]


def class_weight(cls: type) -> float:
    """A GPU class: the sum of ``combination_weight`` over its combinations, from the
    shapes its ``case`` maps them to (no GPU needed). A CPU class:
    ``CPU_COMBINATION_WEIGHT`` per combination."""
    combos = list(itertools.product(*cls.params))
    if not hasattr(cls, "case"):
        return CPU_COMBINATION_WEIGHT * len(combos)
    bench = cls()
    total = 0.0
    for combo in combos:
        try:
            shape, _ = bench.case(*combo)
        except ValueError:
            total += combination_weight(None)
        else:
            total += combination_weight(shape.flops)
    return total


def family_weights(module_name: str | None = None) -> dict[str, float]:
    """``{unit: weight}`` for every unit of the suite (or of one module), ``suite_units``'
    names: each is measured as a whole (a class in its ``setup_cache``), so it is what the
    plan places."""
    modules = SUITE_MODULES if module_name is None else (module_name,)
    return {
        unit: sum(class_weight(cls) for _, cls in classes)
        for unit, classes in suite_units(modules).items()
    }


def pop_bench(asv_args: list[str]) -> list[str]:
    """Remove every ``-b REGEX`` / ``--bench REGEX`` / ``--bench=REGEX`` from ``asv_args``;
    return the regexes."""
    out, rest = [], []
    it = iter(asv_args)
    for arg in it:
        if arg in ("-b", "--bench"):
            value = next(it, None)
            if value is None:
                raise ValueError(f"{arg}: needs a regex after it")
            out.append(value)
        elif arg.startswith("--bench="):
            out.append(arg.split("=", 1)[1])
        else:
            rest.append(arg)
    asv_args[:] = rest
    return out


def shard_regex(family: str, user: list[str]) -> str:
    """``-b`` pattern for one class, narrowed to the user's regexes when there are any:
    asv ORs several ``-b``, so the intersection has to be one pattern (a lookahead)."""
    own = asv_regex(family)
    if not user:
        return own
    return f"^(?=.*(?:{'|'.join(user)})){own[1:]}"


def asv_regex(family: str) -> str:
    """asv ``-b`` pattern for every track of one unit: a class (``gemm.Stage``, not
    ``gemm.Stage128``) or a module (``static``)."""
    return f"^{re.escape(family)}\\."


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


def probe_gpus(spec: str) -> str:
    """One line for a parent process that must not start CUDA itself: ``ok:`` and the
    ``CUDA_VISIBLE_DEVICES`` entries that pin a child to each GPU of ``spec``
    (comma-separated), or ``error:`` and why those GPUs cannot be used."""
    import torch

    from harness.device import no_gpu_reason

    reason = no_gpu_reason()
    if reason:
        return f"error: needs a CUDA GPU and found none: {reason}"
    try:
        gpus = parse_gpus(spec, torch.cuda.device_count())
    except ValueError as err:
        return f"error: {err}"
    return "ok:" + ",".join(visible_entry(g) for g in gpus)


def phases(weights: Mapping[str, float], gpus: list[int], solo: set[str]) -> list[dict]:
    """The order of the run: each ``solo`` unit alone on its own GPU (the one its name ranks
    highest, so it stays there), one after another; then every other unit by ``plan``, all
    GPUs at once. A solo unit times the host (the launch path), which other processes on
    the host would slow down."""
    out: list[dict[int, list[str]]] = [
        {max(gpus, key=lambda g: _rank(unit, g)): [unit]} for unit in sorted(solo)
    ]
    out.append(plan({u: w for u, w in weights.items() if u not in solo}, gpus))
    return out


def run(gpus: list[int], machine: str, sha: str, asv_args: list[str], python: str) -> int:
    """One ``asv run`` per GPU at once (after the solo units, each alone); a progress line
    per shard; the worst exit status."""
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    asv_args = list(asv_args)
    user = pop_bench(asv_args)
    units = suite_units()
    # The plan covers every unit, so a unit keeps its GPU whatever -b selects this time.
    wanted = {
        unit
        for unit, classes in units.items()
        if not user
        or any(
            re.search(shard_regex(unit, user), n)
            for family, cls in classes
            for n in benchmark_names(family, cls)
        )
    }
    solo = {u for u, classes in units.items() if any(getattr(c, "solo", False) for _, c in classes)}
    steps = []
    for step in phases(family_weights(), gpus, solo):
        step = {g: [u for u in us if u in wanted] for g, us in step.items()}
        if any(step.values()):
            steps.append({g: us for g, us in step.items() if us})
    if not steps:
        print(f"shard: no benchmark matches -b {' -b '.join(user)}")
        return 2
    busy = {g for step in steps for g in step}
    for gpu in sorted(set(gpus) - busy):
        print(f"shard gpu{gpu}: no benchmark class left for it, not run")
    (ROOT / ".asv").mkdir(exist_ok=True)
    for gpu in busy:
        (ROOT / ".asv" / f"shard-gpu{gpu}.log").write_text("")
        env = {**os.environ, "CUDA_VISIBLE_DEVICES": visible_entry(gpu)}
        subprocess.run(
            [python, "-m", "asv", "machine", "--yes", "--machine", f"{machine}-gpu{gpu}"],
            cwd=ROOT,
            env=env,
            check=True,
            capture_output=True,
        )
    codes: dict[int, int] = {}
    with Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        TextColumn("{task.percentage:>5.1f}%"),
        TimeElapsedColumn(),
    ) as progress:
        total = progress.add_task("all shards", total=100.0 * sum(len(s) for s in steps))
        tasks = []
        for step in steps:
            procs = {}
            for gpu, families in step.items():
                name = f"{machine}-gpu{gpu}"
                env = {
                    **os.environ,
                    "CUDA_VISIBLE_DEVICES": visible_entry(gpu),
                    "ASV_MACHINE": name,
                }
                # Never an empty list here: asv run without -b would run the whole suite.
                bench = [arg for f in families for arg in ("-b", shard_regex(f, user))]
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
                log = (ROOT / ".asv" / f"shard-gpu{gpu}.log").open("a")
                proc = subprocess.Popen(
                    cmd,
                    cwd=ROOT,
                    env=env,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.STDOUT,
                    text=True,
                )
                label = ", ".join(f.split(".", 1)[-1] for f in families)
                alone = " (alone)" if len(steps) > 1 and step is not steps[-1] else ""
                task = progress.add_task(f"gpu{gpu}: {label}{alone}", total=100.0)
                tasks.append(task)
                procs[gpu] = (proc, log, task)

            def follow(proc, log, task):
                for line in proc.stdout:
                    log.write(line)
                    found = _PROGRESS.match(line)
                    if found:
                        progress.update(task, completed=float(found.group(1)))
                        progress.update(
                            total, completed=sum(progress.tasks[t].completed for t in tasks)
                        )
                proc.wait()
                log.close()

            threads = [threading.Thread(target=follow, args=p) for p in procs.values()]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            for gpu, (proc, _, _) in procs.items():
                codes[gpu] = max(codes.get(gpu, 0), proc.returncode)
    for gpu, code in sorted(codes.items()):
        status = "ok" if code == 0 else f"FAILED (exit {code}), see .asv/shard-gpu{gpu}.log"
        print(f"shard gpu{gpu} ({machine}-gpu{gpu}): {status}")
    return max(codes.values())


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m harness.shard",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--gpus", required=True, type=gpu_list, help="'all' or indices like 0,1")
    p.add_argument("--machine", default=None, help="asv machine name stem (default: the GPU)")
    p.add_argument("asv_args", nargs="*", help="passed to every asv run (after --)")
    args = p.parse_args(argv)
    try:
        pop_bench(list(args.asv_args))
    except ValueError as err:
        p.error(str(err))
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
