"""Plan the asv suite over the GPUs of one host: which unit runs on which GPU, pinned
with ``CUDA_VISIBLE_DEVICES``, each GPU under its own asv machine name (``h200-gpu0``,
...). ``harness.suite.run`` carries the plan out, one ``asv run`` per unit.

    nox -s bench -- --gpus all        # or --gpus 0,1

The unit is the benchmark class (``gemm.Stage``): asv measures a class as a whole in its
``setup_cache``, so a class split over two GPUs would be measured on both. Every GPU class
of the suite is placed; the CPU-only ones (``static``) need no GPU and run in a lane of
their own beside the shards (``harness.suite.run``). Each class is weighted by the
estimated cost of measuring it (``unit_weights``: per GPU combination a fixed cost plus a
share proportional to its flops). A
class marked ``solo`` (``gemm.Launch``, which times the host's launch path) runs alone
before the shards start: on the H200 host it read 17-21 us per call while the other GPU's
shard ran, against 11-13 us alone. The plan is stable: a class goes to the GPU its name
hashes to unless that GPU would pass its share of the total weight, so it lands on the
same GPU index run after run (its history stays comparable) and adding a class moves few
others. Every unit is assigned exactly once; a GPU left without one runs nothing. The
largest class bounds the shards' wall time: ``harness.suite.cost`` shows where that
starts to matter as GPUs are added.
"""

from __future__ import annotations

import hashlib
import math
import re
from collections.abc import Mapping
from pathlib import Path

from harness.measure.gpu_state import visible_entry
from harness.suite import discovery

ROOT = Path(__file__).resolve().parent.parent.parent
# Room over the even share: a little keeps a class on its own GPU when another class is
# added (fewer moves, comparable histories) at a small cost in balance.
SLACK = 0.1
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


def suite_units(root: Path = ROOT) -> dict[str, list[discovery.Family]]:
    """The plan's units: ``{"gemm.Stage": [Stage], "static": [...]}``. A GPU family is a
    unit of its own; a module's CPU families form one unit named after the module, so they
    run one after another on one shard: they compile with every core, and two of them at
    once would slow each other's timed compiles."""
    out: dict[str, list[discovery.Family]] = {}
    for family in discovery.families(root):
        out.setdefault(discovery.unit_of(family), []).append(family)
    return out


def family_weight(family: discovery.Family) -> float:
    """A GPU family: the sum of ``combination_weight`` over its combinations, from the
    shapes its ``case`` maps them to (no GPU needed). A CPU family:
    ``CPU_COMBINATION_WEIGHT`` per combination."""
    combos = family.combinations()
    if not family.is_gpu:
        return CPU_COMBINATION_WEIGHT * len(combos)
    bench = family.cls()
    total = 0.0
    for combo in combos:
        try:
            shape, _ = bench.case(*combo)
        except ValueError:
            total += combination_weight(None)
        else:
            total += combination_weight(shape.flops)
    return total


def family_weights(root: Path = ROOT) -> dict[str, float]:
    """``unit_weights`` of the whole suite in ``root``."""
    return unit_weights(suite_units(root))


def unit_weights(units: Mapping[str, list[discovery.Family]]) -> dict[str, float]:
    """``{unit: weight}``: each unit is measured as a whole (a class in its
    ``setup_cache``), so it is what the plan places."""
    return {unit: sum(family_weight(f) for f in families) for unit, families in units.items()}


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

    from harness.measure.device import no_gpu_reason

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
