"""The ``asv run``s one run of the suite makes: the selection (``-b``: asv's names or the
gate's), the plan of each lane's batches of pieces (``harness.suite.shard``, by the
recorded cost model; each unit whole in a run of its own for another revision's suite
measured without ``--gpus``), and each batch narrowed to what is selected and not stored
yet for the commit on that lane's machine. ``harness.suite.run`` carries the jobs out.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from harness.suite import discovery, result_files, shard
from harness.suite.target import CPU_LANE, ROOT, Lane, Target, suite_listing
from harness.suite.weights import combination_weights, recorded_calibration


def select(listed: Mapping[str, dict], user: list[str]) -> dict[str, list[str]]:
    """``{unit: asv names selected}`` for every unit with at least one; all of a unit's
    names without ``user`` regexes. A regex may match asv's name or the gate's
    (``discovery.selected``)."""
    out = {}
    for unit, entry in listed.items():
        chosen = [name for name, aka in entry["names"].items() if discovery.selected(aka, user)]
        if chosen:
            out[unit] = chosen
    return out


def selectors(unit: str, chosen: list[str], every: int) -> list[str]:
    """asv ``-b`` arguments that run exactly ``chosen`` of a unit holding ``every`` names:
    the unit's prefix when all are chosen, else each name anchored."""
    if len(chosen) == every:
        return ["-b", shard.asv_regex(unit)]
    return [arg for name in chosen for arg in ("-b", f"^{re.escape(name)}$")]


@dataclass(frozen=True, slots=True)
class Job:
    """One ``asv run``: a batch of pieces, narrowed to the pieces with something selected
    and not stored, and their combinations to those."""

    batch: shard.Batch
    bench: tuple[str, ...]  # its -b arguments: exactly its pieces' selected, missing names
    combos: tuple[str, ...]  # the combinations its families' processes measure
    solo: bool = False

    @property
    def key(self) -> str:
        return self.batch.key


def lane_batches(
    listed: Mapping[str, dict],
    gpus: list[int] | None,
    weights: Mapping[str, Mapping],
    run: float = 0.0,
    cpu_lanes: int = 1,
    process: float = 0.0,
) -> dict[Lane, list[shard.Batch]]:
    """Each lane's batches in the order it runs them. With ``weights``
    (``combination_weights``, seconds; ``run`` the seconds of one ``asv run``'s
    start-up): ``shard.plan_suite`` of the whole suite, so a combination's lane and batch
    do not depend on the selection; the GPU units over ``gpus`` (without: the visible
    device, planned as one GPU), the CPU-only units over at most ``cpu_lanes`` CPU lanes.
    Without weights (another revision's suite, whose kernels this process does not
    import): each unit whole in a batch of its own, the GPU units on the visible device,
    a solo unit first, and the CPU-only units in one CPU lane."""

    def whole(unit: str) -> shard.Batch:
        combos = tuple(sorted({aliases[1] for aliases in listed[unit]["names"].values()}))
        return shard.Batch((shard.Piece(unit, unit, combos, 0.0),))

    solo = {u for u, entry in listed.items() if entry["solo"]}
    cpu_units = [u for u, entry in listed.items() if not entry.get("gpu", True) and u not in solo]
    gpu_units = [u for u in listed if u not in cpu_units]
    out: dict[Lane, list[shard.Batch]] = {}
    if weights:
        units = {u: weights[u] for u in listed}
        planned = shard.plan_suite(
            units, gpus or [0], run, solo, set(cpu_units), cpu_lanes, process=process
        )
        out = {Lane(g if gpus else None): bs for g, bs in planned.gpu.items() if bs}
        out.update({Lane(cpu=True, slot=i): bs for i, bs in enumerate(planned.cpu)})
        return out
    if gpu_units:
        out[Lane()] = [whole(u) for u in sorted(gpu_units, key=lambda u: u not in solo)]
    if cpu_units:
        out[CPU_LANE] = [whole(u) for u in cpu_units]
    return out


def narrow(
    batch: shard.Batch,
    listed: Mapping[str, dict],
    chosen: Mapping[str, list[str]],
    done: set[str],
) -> Job | None:
    """``batch`` as one ``asv run`` of its selected names not in ``done``: its pieces with
    any, their families' ``-b`` selectors (``selectors``, per unit) and combinations;
    None when nothing is left."""
    pieces, todo_by_unit, combos = [], {}, set()
    for piece in batch.pieces:
        aliases = listed[piece.unit]["names"]
        mine = [n for n in chosen.get(piece.unit, []) if aliases[n][1] in piece.combos]
        todo = [n for n in mine if n not in done]
        if todo:
            pieces.append(piece)
            todo_by_unit.setdefault(piece.unit, []).extend(todo)
            combos.update(aliases[n][1] for n in todo)
    if not pieces:
        return None
    bench = [
        arg
        for unit, todo in todo_by_unit.items()
        for arg in selectors(unit, sorted(set(todo)), len(listed[unit]["names"]))
    ]
    solo = any(listed[p.unit]["solo"] for p in pieces)
    return Job(shard.Batch(tuple(pieces)), tuple(bench), tuple(sorted(combos)), solo)


def plan_weights(target: Target, gpus: list[int] | None) -> tuple[dict[str, dict], float, float]:
    """The plan's ``(combination weights, seconds of one asv run, seconds of one family
    process's start)`` by the recorded cost model, for this checkout's suite, or with
    ``gpus`` for any (the runner measures other revisions' trees without them);
    ``({}, 0.0, 0.0)`` when there are none."""
    if gpus is None and target.tree.resolve() != ROOT:
        return {}, 0.0, 0.0
    cal = recorded_calibration(target.tree)
    return combination_weights(target.tree, cal), cal.piece, cal.process


def plan_units(
    target: Target, user: list[str], gpus: list[int] | None, log: Callable[[str], None] = print
) -> tuple[dict[Lane, list[Job]], int]:
    """Each lane's jobs (``lane_batches``, each batch ``narrow``ed to the selection minus
    the combinations stored for this commit on that lane's machine) and how many batches
    hold a selected benchmark. A damaged results file of the commit is set aside first
    (``result_files.sweep``), so its combinations count as not stored."""
    listed = suite_listing(target)
    chosen = select(listed, user)
    weights, run, process = plan_weights(target, gpus)
    results_dir = target.results_dir()
    done_by_machine: dict[str, set[str]] = {}
    lanes: dict[Lane, list[Job]] = {}
    selected = 0
    cpu_lanes = shard.cpu_lanes(os.cpu_count() or 1)
    for lane, batches in lane_batches(listed, gpus, weights, run, cpu_lanes, process).items():
        machine = lane.machine(target.machine)
        if machine not in done_by_machine:
            result_files.sweep(results_dir, machine, target.sha, lambda s: log(f"run: {s}"))
            done_by_machine[machine] = result_files.stored(results_dir, machine, target.sha)
        for batch in batches:
            selected += narrow(batch, listed, chosen, set()) is not None
            job = narrow(batch, listed, chosen, done_by_machine[machine])
            if job:
                lanes.setdefault(lane, []).append(job)
    return lanes, selected
