"""Plan the asv suite over the GPUs of one host: which combinations run on which GPU,
pinned with ``CUDA_VISIBLE_DEVICES``, each GPU under its own asv machine name
(``h200-gpu0``, ...). ``harness.suite.run`` carries the plan out, one ``asv run`` per piece.

    nox -s bench -- --gpus all        # or --gpus 0,1

A piece is a family's combinations in one lane: a family (benchmark class) whole, or one
of its balanced groups of combinations (``gemm.Tuned[1/2]``). Each piece is one ``asv
run``, whose family process measures the piece's combinations only (the runner lists them
in ``discovery.COMBINATIONS_ENV``). Weights are seconds of the recorded cost model
(``harness.suite.weights``): a piece costs ``Calibration.piece`` (asv's start-up and the
family's process) plus its combinations' seconds. ``plan_suite`` looks for the split
whose busiest GPU is least (``partition``), cutting a family only where that lowers it
more than the cut costs (``balance``). The CPU-only classes (``static``)
need no GPU and run in CPU lanes of their own beside the GPUs, cut over up to one lane per
``CORES_PER_CPU_LANE`` cores only where one lane would end after the busiest GPU.

The plan is stable: a combination lands on the same lane index run after run for a given
GPU count and host. It depends on the GPU count, the host's cores and on the whole suite's
combination names and weights, never on ``-b`` or on what is stored: the runner plans the
whole suite and then narrows each piece to the selection. Each GPU lane goes to the free
GPU its heaviest piece's key ranks highest (rendezvous hashing). A ``solo`` family
(``gemm.Launch``, which times the host's launch path) is never cut and runs first in its
GPU's lane while the other GPUs start their own work; the runner holds the CPU lanes until
it ends (``harness.suite.run``), so no compile runs while it measures.
``harness.suite.cost`` predicts the wall time of the plan per GPU count.
``harness.revisions.placement.plan`` (the gate's placement of single combinations) keeps a
hashed home per name within a slack.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass

from harness.measure.gpu_state import visible_entry
from harness.revisions.placement import parse_gpus, rank

# Host cores per CPU lane. A CPU lane's compiles use half of its cores
# (``discovery.CPU_WORKERS_ENV``); the other half serve the GPU lanes (each timing loop
# needs a free core). The H200 runner hosts have 16 per GPU: one CPU lane per GPU.
CORES_PER_CPU_LANE = 16
# Candidate plans ``balance`` compares are exact partitions within this many search steps
# (then the best found): a fixed budget, so the plan depends on names and weights alone.
SEARCH_STEPS = 20_000


@dataclass(frozen=True, slots=True)
class Piece:
    """Combinations of one unit that one ``asv run`` measures in one lane: the whole unit
    (``key`` is its name) or one of its balanced groups (``gemm.Tuned[2/3]``)."""

    unit: str
    key: str
    combos: tuple[str, ...]
    weight: float  # seconds: its combinations' plus one piece's (``Calibration.piece``)


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


def _check(units: Mapping[str, Mapping[str, float]], piece: float) -> None:
    bad = {f"{u}/{c}": w for u, cs in units.items() for c, w in cs.items() if not 0 <= w < math.inf}
    if not 0 <= piece < math.inf:
        bad["piece"] = piece
    if bad:
        raise ValueError(f"weights={bad}: must be finite and >= 0")


def cut(units: Mapping[str, Mapping[str, float]], parts: Mapping[str, int], piece: float):
    """The pieces of ``units`` (``{unit: {combination: seconds}}``), each unit in
    ``parts[unit]`` balanced groups (``split``; 1 when absent), every group paying
    ``piece``."""
    _check(units, piece)
    out = []
    for unit in sorted(units):
        combos = units[unit]
        groups = split(combos, parts.get(unit, 1)) if combos else [()]
        for i, group in enumerate(groups, 1):
            key = unit if len(groups) == 1 else f"{unit}[{i}/{len(groups)}]"
            out.append(Piece(unit, key, group, piece + sum(combos[c] for c in group)))
    return out


def partition(pieces: list[Piece], bins: int) -> list[list[Piece]]:
    """``pieces`` in ``bins`` lists whose largest sum of weights is the least found: the
    exact minimum within ``SEARCH_STEPS`` steps of a depth-first search (heaviest first,
    ties by key; a bin as heavy as an earlier one is not tried again), else the best found,
    starting from the greedy plan (each piece to the lightest bin). Lists in a fixed order
    (heaviest first, ties by first key), each heaviest piece first: the result depends on
    keys and weights alone."""
    if bins < 1:
        raise ValueError(f"bins={bins}: need at least one")
    order = sorted(pieces, key=lambda p: (-p.weight, p.key))
    best = [0] * len(order)
    load = [0.0] * bins
    for i, p in enumerate(order):
        best[i] = min(range(bins), key=lambda b: (load[b], b))
        load[best[i]] += p.weight
    best_max = max(load)
    floor = max(sum(p.weight for p in order) / bins, order[0].weight if order else 0.0)
    tol = 1e-9 * max(1.0, best_max)
    where = [0] * len(order)
    load = [0.0] * bins
    steps = 0

    def search(i: int) -> bool:
        """True when the floor is reached (nothing can be better) or the budget is spent."""
        nonlocal best_max, best, steps
        if i == len(order):
            if max(load) < best_max - tol:
                best_max, best = max(load), list(where)
            return best_max <= floor + tol
        tried = set()
        for b in range(bins):
            if load[b] in tried or load[b] + order[i].weight >= best_max - tol:
                continue
            tried.add(load[b])
            steps += 1
            if steps > SEARCH_STEPS:
                return True
            where[i] = b
            load[b] += order[i].weight
            done = search(i + 1)
            load[b] -= order[i].weight
            if done:
                return True
        return False

    if best_max > floor + tol:
        search(0)
    out: list[list[Piece]] = [[] for _ in range(bins)]
    for p, b in zip(order, best, strict=True):
        out[b].append(p)
    weight = [sum(p.weight for p in ps) for ps in out]
    ranked = sorted(range(bins), key=lambda b: (-weight[b], out[b][0].key if out[b] else ""))
    return [out[b] for b in ranked]


def balance(
    units: Mapping[str, Mapping[str, float]],
    bins: int,
    piece: float,
    whole: set[str] = frozenset(),
    enough: float = 0.0,
) -> list[list[Piece]]:
    """``units`` cut and ``partition``ed into ``bins`` lanes, cut only where it pays:
    from every unit whole, the unit (not in ``whole``) whose cut into more groups lowers
    the busiest lane most is cut so, again, until no cut lowers it by more than a second's
    hundredth or it is at most ``enough`` (a lane that bounds nothing needs no more cuts).
    Every group pays ``piece``, so a cut that adds more than it balances is never made."""
    _check(units, piece)
    parts = dict.fromkeys(units, 1)

    def busiest(lanes):
        return max((sum(p.weight for p in ps) for ps in lanes), default=0.0)

    lanes = partition(cut(units, parts, piece), bins)
    while busiest(lanes) > enough:
        tries = []
        for unit in sorted(units):
            if unit in whole:
                continue
            for n in range(parts[unit] + 1, min(bins, len(units[unit])) + 1):
                trial = partition(cut(units, {**parts, unit: n}, piece), bins)
                tries.append((busiest(trial), n, unit, trial))
        if not tries:
            break
        least, n, unit, trial = min(tries, key=lambda t: t[:3])
        if least > busiest(lanes) - 0.01:
            break
        parts[unit], lanes = n, trial
    return lanes


@dataclass(frozen=True, slots=True)
class Plan:
    """Each lane's pieces in the order it runs them: ``gpu`` by GPU index (a solo piece
    first), ``cpu`` by CPU lane index (the CPU lanes start when the solo piece ends)."""

    gpu: dict[int, list[Piece]]
    cpu: list[list[Piece]]


def cpu_lanes(cores: int) -> int:
    """How many CPU lanes a host of ``cores`` cores runs at once (``CORES_PER_CPU_LANE``)."""
    return max(1, cores // CORES_PER_CPU_LANE)


def plan_suite(
    units: Mapping[str, Mapping[str, float]],
    gpus: list[int],
    piece: float,
    solo: set[str] = frozenset(),
    cpu: set[str] = frozenset(),
    lanes_cpu: int = 1,
) -> Plan:
    """The whole suite's plan: the GPU units (``units`` not in ``cpu``) ``balance``d over
    ``gpus``, a ``solo`` unit never cut; each lane of pieces to the free GPU its heaviest
    piece's key ranks highest (rendezvous), so a plan that does not change keeps its GPUs.
    The ``cpu`` units over at most ``lanes_cpu`` CPU lanes, cut only while the CPU lanes,
    which start when the solo piece ends, would end after the busiest GPU."""
    if not gpus:
        raise ValueError("gpus: need at least one GPU index")
    if len(set(gpus)) != len(gpus):
        raise ValueError(f"gpus={gpus}: indices must be distinct")
    if lanes_cpu < 1:
        raise ValueError(f"lanes_cpu={lanes_cpu}: must be >= 1")
    on_gpu = {u: cs for u, cs in units.items() if u not in cpu}
    lanes = balance(on_gpu, len(gpus), piece, set(solo))
    placed: dict[int, list[Piece]] = {}
    free = list(gpus)
    for ps in lanes:
        if not ps:
            continue
        gpu = max(free, key=lambda g: rank(ps[0].key, g))
        free.remove(gpu)
        placed[gpu] = sorted(ps, key=lambda p: (p.unit not in solo, -p.weight, p.key))
    shards = {g: placed.get(g, []) for g in gpus}
    busiest = max((sum(p.weight for p in ps) for ps in lanes), default=0.0)
    start = max((p.weight for ps in lanes for p in ps if p.unit in solo), default=0.0)
    on_cpu = {u: cs for u, cs in units.items() if u in cpu}
    cpu_plan = balance(on_cpu, lanes_cpu, piece, enough=busiest - start) if on_cpu else []
    return Plan(shards, [ps for ps in cpu_plan if ps])


def asv_regex(family: str) -> str:
    """asv ``-b`` pattern for every track of one unit: a class (``gemm.Stage``, not
    ``gemm.Stage128``) or a module (``static``)."""
    return f"^{re.escape(family)}\\."


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
