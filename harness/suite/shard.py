"""Plan the asv suite over the GPUs of one host: which combinations run on which GPU,
pinned with ``CUDA_VISIBLE_DEVICES``, each GPU under its own asv machine name
(``h200-gpu0``, ...). ``harness.suite.run`` carries the plan out, one ``asv run`` per batch.

    nox -s bench -- --gpus all        # or --gpus 0,1

A piece is a family's combinations in one lane: a family (benchmark class) whole, or one
of its balanced groups of combinations (``gemm.Tuned[1/2]``). A batch is the pieces one
``asv run`` measures: a lane's pieces are packed into batches of at most ``RUN_BUDGET_S``
predicted seconds each (``pack``), so most lanes pay asv's start-up once or twice instead
of once per family; each family's process measures its piece's combinations only (the
runner lists the batch's combinations in ``discovery.COMBINATIONS_ENV``, every name
carrying its family). Weights are seconds of the recorded cost model
(``harness.suite.weights``): a batch costs ``Calibration.piece`` (an ``asv run``'s
start-up) plus its combinations' seconds. ``plan_suite`` looks for the split whose
busiest lane, in batches, is least (``partition``), cutting a family only where that
lowers it (``balance``). The CPU-only classes (``static``)
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

from harness.revisions.placement import rank

# Host cores per CPU lane. A CPU lane's compiles use half of its cores
# (``discovery.CPU_WORKERS_ENV``); the other half serve the GPU lanes (each timing loop
# needs a free core). The H200 runner hosts have 16 per GPU: one CPU lane per GPU.
CORES_PER_CPU_LANE = 16
# Candidate plans ``balance`` compares are exact partitions within this many search steps
# (then the best found): a fixed budget, so the plan depends on names and weights alone.
SEARCH_STEPS = 20_000
# Durability: asv 0.6.6 saves a commit's results only when every benchmark of an ``asv
# run`` has finished, so an interrupted run (Ctrl-C, a crash, a preempted runner) loses
# all of it and the next run measures it again. A batch holds at most this many predicted
# seconds (its start-up and its combinations): an interruption loses at most that much
# measuring, about the largest family's (gemm.Tuned, 33 s on the H200) plus a few small
# ones. A piece larger than this runs alone, as every family did before batches.
RUN_BUDGET_S = 45.0


@dataclass(frozen=True, slots=True)
class Piece:
    """Combinations of one unit that one ``asv run`` measures in one lane: the whole unit
    (``key`` is its name) or one of its balanced groups (``gemm.Tuned[2/3]``)."""

    unit: str
    key: str
    combos: tuple[str, ...]
    weight: float  # seconds: its combinations' (the batch that holds it pays the start-up)


@dataclass(frozen=True, slots=True)
class Batch:
    """Pieces of one lane that one ``asv run`` measures, in the lane's order."""

    pieces: tuple[Piece, ...]

    @property
    def key(self) -> str:
        """``gemm.Stage+gemm.Tiles[1/2]``: its pieces' keys (one word, for timing lines)."""
        return "+".join(p.key for p in self.pieces)

    @property
    def weight(self) -> float:
        """Its combinations' seconds; with one ``asv run``'s start-up, its cost."""
        return sum(p.weight for p in self.pieces)

    @property
    def combos(self) -> tuple[str, ...]:
        return tuple(c for p in self.pieces for c in p.combos)

    def alone(self, solo: set[str]) -> bool:
        """Whether it is a ``solo`` unit's batch (it holds nothing else)."""
        return any(p.unit in solo for p in self.pieces)


def pack(
    pieces: list[Piece], run: float, alone: set[str] = frozenset(), budget: float = RUN_BUDGET_S
) -> list[Batch]:
    """``pieces`` (one lane's, in its order) packed into batches first-fit: each piece joins
    the first batch whose cost (``run`` plus its weight) stays within ``budget`` with it,
    else opens a new one. A piece of a unit in ``alone`` gets a batch of its own. The
    batches keep the order of their first pieces; the result depends on the order,
    weights and ``budget`` alone."""
    out: list[list[Piece]] = []
    fills: list[float | None] = []  # None: a batch that takes nothing more
    for p in pieces:
        if p.unit not in alone:
            for i, fill in enumerate(fills):
                if fill is not None and run + fill + p.weight <= budget:
                    out[i].append(p)
                    fills[i] = fill + p.weight
                    break
            else:
                out.append([p])
                fills.append(p.weight)
            continue
        out.append([p])
        fills.append(None)
    return [Batch(tuple(ps)) for ps in out]


def cost(batches: list[Batch], run: float) -> float:
    """Seconds of a lane's batches: one ``run`` each plus their combinations'."""
    return sum(run + b.weight for b in batches)


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


def _check(units: Mapping[str, Mapping[str, float]], **fixed: float) -> None:
    """Every weight, and each of ``fixed`` (``piece``, ``process``) by its name, finite and
    >= 0."""
    bad = {f"{u}/{c}": w for u, cs in units.items() for c, w in cs.items() if not 0 <= w < math.inf}
    bad.update({name: v for name, v in fixed.items() if not 0 <= v < math.inf})
    if bad:
        raise ValueError(f"weights={bad}: must be finite and >= 0")


def cut(
    units: Mapping[str, Mapping[str, float]], parts: Mapping[str, int], process: float = 0.0
) -> list[Piece]:
    """The pieces of ``units`` (``{unit: {combination: seconds}}``), each unit in
    ``parts[unit]`` balanced groups (``split``; 1 when absent). Each piece weighs its
    combinations' seconds plus ``process``: a piece is one family process of its own,
    which starts CUDA before its first combination."""
    _check(units, process=process)
    out = []
    for unit in sorted(units):
        combos = units[unit]
        groups = split(combos, parts.get(unit, 1)) if combos else [()]
        for i, group in enumerate(groups, 1):
            key = unit if len(groups) == 1 else f"{unit}[{i}/{len(groups)}]"
            out.append(Piece(unit, key, group, process + sum(combos[c] for c in group)))
    return out


class _Lane:
    """A lane as ``partition`` fills it: its cost and its open batches' fills, the pieces
    added heaviest first, so the batches are ``pack``'s of the lane in that order."""

    __slots__ = ("cost", "fills")

    def __init__(self):
        self.cost = 0.0
        self.fills: list[float] = []

    def state(self) -> tuple:
        return (self.cost, tuple(self.fills))

    def restore(self, state: tuple) -> None:
        self.cost, self.fills = state[0], list(state[1])

    def add(self, p: Piece, run: float, alone: bool, budget: float) -> None:
        if not alone:
            for i, fill in enumerate(self.fills):
                if run + fill + p.weight <= budget:
                    self.fills[i] = fill + p.weight
                    self.cost += p.weight
                    return
            self.fills.append(p.weight)
        self.cost += run + p.weight


def partition(
    pieces: list[Piece],
    bins: int,
    run: float = 0.0,
    alone: set[str] = frozenset(),
    budget: float = RUN_BUDGET_S,
) -> list[list[Piece]]:
    """``pieces`` in ``bins`` lanes whose largest cost is the least found, a lane's cost
    being its ``pack``ed batches' (``run`` each, plus their weights): the exact minimum
    within ``SEARCH_STEPS`` steps of a depth-first search (heaviest first, ties by key; a
    lane in the same state as an earlier one is not tried again), else the best found,
    starting from the greedy plan (each piece to the lane it costs least). Lanes in a
    fixed order (costliest first, ties by first key), each in the search's order, heaviest
    piece first: the result depends on keys, weights, ``run`` and ``budget`` alone."""
    if bins < 1:
        raise ValueError(f"bins={bins}: need at least one")
    order = sorted(pieces, key=lambda p: (-p.weight, p.key))
    solo = [p.unit in alone for p in order]
    lanes = [_Lane() for _ in range(bins)]

    def trial(b: int, i: int) -> float:
        before = lanes[b].state()
        lanes[b].add(order[i], run, solo[i], budget)
        after = lanes[b].cost
        lanes[b].restore(before)
        return after

    best = [0] * len(order)
    for i in range(len(order)):
        best[i] = min(range(bins), key=lambda b: (trial(b, i), b))
        lanes[best[i]].add(order[i], run, solo[i], budget)
    best_max = max(lane.cost for lane in lanes)
    floor = max(
        sum(p.weight for p in order) / bins + (run if order else 0.0),
        max((run + p.weight for p in order), default=0.0),
    )
    tol = 1e-9 * max(1.0, best_max)
    where = [0] * len(order)
    lanes = [_Lane() for _ in range(bins)]
    steps = 0

    def search(i: int) -> bool:
        """True when the floor is reached (nothing can be better) or the budget is spent."""
        nonlocal best_max, best, steps
        if i == len(order):
            worst = max(lane.cost for lane in lanes)
            if worst < best_max - tol:
                best_max, best = worst, list(where)
            return best_max <= floor + tol
        tried = set()
        for b in range(bins):
            before = lanes[b].state()
            if before in tried:
                continue
            tried.add(before)
            lanes[b].add(order[i], run, solo[i], budget)
            if lanes[b].cost >= best_max - tol:
                lanes[b].restore(before)
                continue
            steps += 1
            if steps > SEARCH_STEPS:
                lanes[b].restore(before)
                return True
            where[i] = b
            done = search(i + 1)
            lanes[b].restore(before)
            if done:
                return True
        return False

    if best_max > floor + tol:
        search(0)
    out: list[list[Piece]] = [[] for _ in range(bins)]
    for p, b in zip(order, best, strict=True):
        out[b].append(p)
    weight = [lane_cost(ps, run, alone, budget) for ps in out]
    ranked = sorted(range(bins), key=lambda b: (-weight[b], out[b][0].key if out[b] else ""))
    return [out[b] for b in ranked]


def lane_cost(
    pieces: list[Piece], run: float, alone: set[str] = frozenset(), budget: float = RUN_BUDGET_S
) -> float:
    """Seconds of one lane's ``pieces`` (in its order) ``pack``ed into batches."""
    return cost(pack(pieces, run, alone, budget), run)


def balance(
    units: Mapping[str, Mapping[str, float]],
    bins: int,
    run: float,
    whole: set[str] = frozenset(),
    enough: float = 0.0,
    budget: float = RUN_BUDGET_S,
    process: float = 0.0,
) -> list[list[Piece]]:
    """``units`` cut and ``partition``ed into ``bins`` lanes, cut only where it pays:
    from every unit whole, the unit (not in ``whole``: those are never cut and run in a
    batch of their own) whose cut into more groups lowers the busiest lane most is cut
    so, again, until no cut lowers it by more than a second's hundredth or it is at most
    ``enough`` (a lane that bounds nothing needs no more cuts). A group that needs a batch
    of its own pays ``run``, and every group its own ``process`` (``cut``), so a cut that
    adds more than it balances is never made."""
    _check(units, piece=run)

    def busiest(lanes):
        return max((lane_cost(ps, run, whole, budget) for ps in lanes), default=0.0)

    def planned(parts):
        return partition(cut(units, parts, process), bins, run, whole, budget)

    parts = dict.fromkeys(units, 1)
    lanes = planned(parts)
    while busiest(lanes) > enough:
        tries = []
        for unit in sorted(units):
            if unit in whole:
                continue
            for n in range(parts[unit] + 1, min(bins, len(units[unit])) + 1):
                trial = planned({**parts, unit: n})
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
    """Each lane's batches in the order it runs them: ``gpu`` by GPU index (a solo
    piece's batch first), ``cpu`` by CPU lane index (the CPU lanes start when the solo
    batch ends)."""

    gpu: dict[int, list[Batch]]
    cpu: list[list[Batch]]


def cpu_lanes(cores: int) -> int:
    """How many CPU lanes a host of ``cores`` cores runs at once (``CORES_PER_CPU_LANE``)."""
    return max(1, cores // CORES_PER_CPU_LANE)


def plan_suite(
    units: Mapping[str, Mapping[str, float]],
    gpus: list[int],
    run: float,
    solo: set[str] = frozenset(),
    cpu: set[str] = frozenset(),
    lanes_cpu: int = 1,
    budget: float = RUN_BUDGET_S,
    process: float = 0.0,
) -> Plan:
    """The whole suite's plan: the GPU units (``units`` not in ``cpu``) ``balance``d over
    ``gpus``, a ``solo`` unit never cut and in a batch of its own, first in its lane;
    each lane of pieces to the free GPU its heaviest piece's key ranks highest
    (rendezvous), so a plan that does not change keeps its GPUs. The ``cpu`` units over
    at most ``lanes_cpu`` CPU lanes, cut only while the CPU lanes, which start when the
    solo batch ends, would end after the busiest GPU. Every lane's pieces ``pack``ed
    into batches of at most ``budget`` seconds, ``run`` seconds each; a GPU piece also
    pays ``process``, its family process's start (``cut``)."""
    if not gpus:
        raise ValueError("gpus: need at least one GPU index")
    if len(set(gpus)) != len(gpus):
        raise ValueError(f"gpus={gpus}: indices must be distinct")
    if lanes_cpu < 1:
        raise ValueError(f"lanes_cpu={lanes_cpu}: must be >= 1")
    on_gpu = {u: cs for u, cs in units.items() if u not in cpu}
    lanes = balance(on_gpu, len(gpus), run, set(solo), budget=budget, process=process)
    placed: dict[int, list[Batch]] = {}
    free = list(gpus)
    for ps in lanes:
        if not ps:
            continue
        gpu = max(free, key=lambda g: rank(ps[0].key, g))
        free.remove(gpu)
        ordered = sorted(ps, key=lambda p: (p.unit not in solo, -p.weight, p.key))
        placed[gpu] = pack(ordered, run, set(solo), budget)
    shards = {g: placed.get(g, []) for g in gpus}
    busiest = max((cost(bs, run) for bs in shards.values()), default=0.0)
    start = max((run + b.weight for bs in shards.values() for b in bs if b.alone(solo)), default=0)
    on_cpu = {u: cs for u, cs in units.items() if u in cpu}
    cpu_plan = (
        balance(on_cpu, lanes_cpu, run, enough=busiest - start, budget=budget) if on_cpu else []
    )
    return Plan(shards, [pack(ps, run, budget=budget) for ps in cpu_plan if ps])


def asv_regex(family: str) -> str:
    """asv ``-b`` pattern for every track of one unit: a class (``gemm.Stage``, not
    ``gemm.Stage128``) or a module (``static``)."""
    return f"^{re.escape(family)}\\."
