"""Plan the asv suite over the GPUs of one host: which combinations run on which GPU,
pinned with ``CUDA_VISIBLE_DEVICES``, each GPU under its own asv machine name
(``h200-gpu0``, ...). ``harness.suite.run`` carries the plan out, one ``asv run`` per piece.

    nox -s bench -- --gpus all        # or --gpus 0,1

A piece is a family's combinations on one GPU: a family (benchmark class) stays whole
where it fits in a GPU's share, and one that would not (``gemm.Tuned`` is a third of the
work) is cut into balanced groups of combinations, as few as fit (``pieces``). Each piece is
one ``asv run``, whose family process measures the piece's combinations only (the runner
lists them in ``discovery.COMBINATIONS_ENV``). A piece costs its combinations' weights
(``combination_weight``: a fixed cost plus a share proportional to the flops) plus
``PIECE_WEIGHT``, asv's start-up and the family's process, so a family is cut only when
the balance gains more than the cut costs. The CPU-only classes (``static``) need no GPU
and run in a lane of their own beside the GPUs (``harness.suite.run``).

The plan is stable: a combination lands on the same GPU index run after run for a given
GPU count. It depends on the GPU count and on the whole suite's combination names and
weights (they set the share, the cuts and the placement), never on ``-b`` or on what is
stored: the runner plans the whole suite and then narrows each piece to the selection.
A piece goes to the GPU its key hashes to unless that GPU would pass its share (adding a
family moves few others). A ``solo`` family (``gemm.Launch``, which times the host's
launch path) is never cut and runs first in its GPU's lane while the other GPUs start
their own work; the runner holds the CPU lane until it ends (``harness.suite.run``).
``harness.suite.cost`` predicts the wall time of the plan per GPU count.
"""

from __future__ import annotations

import hashlib
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
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
# One asv run of a family, whatever it measures: asv's start-up and discovery, the family's
# process (torch, TileLang, the CUDA context). The cost model fits 7.5 s of it on an H200
# host (``reports/cost_h200.json``), about five units of 1.4 s.
PIECE_WEIGHT = 5.0


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


def combination_flops(root: Path = ROOT) -> dict[str, dict[str, int | None]]:
    """``{GPU unit: {combination name: flops}}`` of the suite in ``root``, by the gate's
    names (``gemm.Stage(4096x4096x4096, 128, 3, f16)``), from the shapes each family's
    ``case`` maps them to (no GPU needed); None for an invalid combination. The CPU units
    are left out: they run in their own lane."""
    out: dict[str, dict[str, int | None]] = {}
    for unit, families in suite_units(root).items():
        if not all(f.is_gpu for f in families):
            continue
        combos = out.setdefault(unit, {})
        for family in families:
            bench = family.cls()
            for combo in family.combinations():
                try:
                    shape, _ = bench.case(*combo)
                except ValueError:
                    flops = None
                else:
                    flops = shape.flops
                combos[family.combination_name(combo)] = flops
    return out


def combination_weights(root: Path = ROOT) -> dict[str, dict[str, float]]:
    """``{GPU unit: {combination name: combination_weight}}`` (``combination_flops``)."""
    return {
        unit: {c: combination_weight(f) for c, f in combos.items()}
        for unit, combos in combination_flops(root).items()
    }


@dataclass(frozen=True, slots=True)
class Piece:
    """Combinations of one unit that one ``asv run`` measures on one GPU: the whole unit
    (``key`` is its name) or one of its balanced groups (``gemm.Tuned[2/3]``)."""

    unit: str
    key: str
    combos: tuple[str, ...]
    weight: float  # its combinations' weights plus PIECE_WEIGHT


def split(combos: Mapping[str, float], parts: int) -> list[tuple[str, ...]]:
    """``combos`` cut into ``parts`` groups of near-equal weight: heaviest first (ties by
    name), each to the lightest group so far (ties: the first). A fixed order whatever the
    input order, so the groups depend on names and weights alone. Groups keep the names
    sorted; an empty group is dropped."""
    if parts < 1:
        raise ValueError(f"parts={parts}: must be >= 1")
    groups: list[list[str]] = [[] for _ in range(parts)]
    load = [0.0] * parts
    for name in sorted(combos, key=lambda n: (-combos[n], n)):
        i = min(range(parts), key=lambda j: (load[j], j))
        groups[i].append(name)
        load[i] += combos[name]
    return [tuple(sorted(g)) for g in groups if g]


def pieces(
    units: Mapping[str, Mapping[str, float]], gpus: int, whole: set[str] = frozenset()
) -> list[Piece]:
    """The pieces of ``units`` (``{unit: {combination: weight}}``) for ``gpus`` GPUs: a unit
    stays whole while it fits in a GPU's share (the total weight over the GPUs, one
    ``PIECE_WEIGHT`` per unit, plus ``SLACK``); a larger one is cut into the fewest balanced
    groups (``split``) each of which fits, every group paying its own ``PIECE_WEIGHT``.
    A unit in ``whole`` is never cut."""
    if gpus < 1:
        raise ValueError(f"gpus={gpus}: need at least one GPU")
    bad = {f"{u}/{c}": w for u, cs in units.items() for c, w in cs.items() if not 0 <= w < math.inf}
    if bad:
        raise ValueError(f"weights={bad}: must be finite and >= 0")
    total = sum(PIECE_WEIGHT + sum(cs.values()) for cs in units.values())
    room = total / gpus * (1 + SLACK)
    out = []
    for unit in sorted(units):
        combos = units[unit]
        work = sum(combos.values())
        parts = 1
        if unit not in whole:
            while parts < len(combos) and PIECE_WEIGHT + work / parts > room:
                parts += 1
        groups = split(combos, parts) if combos else [()]
        for i, group in enumerate(groups, 1):
            key = unit if len(groups) == 1 else f"{unit}[{i}/{len(groups)}]"
            weight = PIECE_WEIGHT + sum(combos[c] for c in group)
            out.append(Piece(unit, key, group, weight))
    return out


def plan_pieces(
    units: Mapping[str, Mapping[str, float]], gpus: list[int], solo: set[str] = frozenset()
) -> dict[int, list[Piece]]:
    """``pieces`` placed on ``gpus`` by ``plan`` (on their keys and weights), each GPU's
    list in the order it runs: a ``solo`` unit (never cut) first, then heaviest first."""
    cut = {p.key: p for p in pieces(units, len(gpus), set(solo))}
    placed = plan({k: p.weight for k, p in cut.items()}, gpus)
    return {
        g: sorted((cut[k] for k in keys), key=lambda p: (p.unit not in solo, -p.weight, p.key))
        for g, keys in placed.items()
    }


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
