"""The ``asv run``s one run of the suite makes: the selection (``-b``: asv's names or the
gate's), the plan of each lane's pieces (``harness.suite.shard`` under ``--gpus``, else
each unit whole), and each piece narrowed to what is selected and not stored yet for the
commit on that lane's machine. ``harness.suite.run`` carries the jobs out.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from harness.suite import discovery, result_files, shard
from harness.suite.target import CPU_LANE, Lane, Target, suite_listing
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
    """One ``asv run``: a piece of a unit, narrowed to what is selected and not stored."""

    piece: shard.Piece
    bench: tuple[str, ...]  # its -b arguments
    combos: tuple[str, ...]  # the combinations its family process measures
    solo: bool = False


def lane_pieces(
    listed: Mapping[str, dict],
    gpus: list[int] | None,
    weights: Mapping[str, Mapping],
    piece: float = 0.0,
    cpu_lanes: int = 1,
) -> dict[Lane, list[shard.Piece]]:
    """Each lane's pieces in the order it runs them. With ``gpus``: ``shard.plan_suite``
    on ``weights`` (``combination_weights``, seconds; ``piece`` the seconds of one
    ``asv run``; the whole suite, so a combination's lane does not depend on the
    selection): the GPU units over ``gpus``, the CPU-only units over at most
    ``cpu_lanes`` CPU lanes. Without: the GPU units whole on the visible device, a solo
    unit first, and the CPU-only units whole in one CPU lane."""

    def whole(unit: str) -> shard.Piece:
        combos = tuple(sorted({aliases[1] for aliases in listed[unit]["names"].values()}))
        return shard.Piece(unit, unit, combos, 0.0)

    solo = {u for u, entry in listed.items() if entry["solo"]}
    cpu_units = [u for u, entry in listed.items() if not entry.get("gpu", True) and u not in solo]
    gpu_units = [u for u in listed if u not in cpu_units]
    out: dict[Lane, list[shard.Piece]] = {}
    if gpus:
        units = {u: weights[u] for u in listed}
        planned = shard.plan_suite(units, gpus, piece, solo, set(cpu_units), cpu_lanes)
        out = {Lane(g): ps for g, ps in planned.gpu.items() if ps}
        out.update({Lane(cpu=True, slot=i): ps for i, ps in enumerate(planned.cpu)})
        return out
    if gpu_units:
        out[Lane()] = [whole(u) for u in sorted(gpu_units, key=lambda u: u not in solo)]
    if cpu_units:
        out[CPU_LANE] = [whole(u) for u in cpu_units]
    return out


def plan_units(
    target: Target, user: list[str], gpus: list[int] | None, log: Callable[[str], None] = print
) -> tuple[dict[Lane, list[Job]], int]:
    """Each lane's jobs (``lane_pieces``, each piece narrowed to the selection minus the
    combinations stored for this commit on that lane's machine) and how many pieces
    hold a selected benchmark. A damaged results file of the commit is set aside first
    (``result_files.sweep``), so its combinations count as not stored."""
    listed = suite_listing(target)
    chosen = select(listed, user)
    every = {u: len(entry["names"]) for u, entry in listed.items()}
    # weights need the kernels' shapes: this checkout's suite only
    cal = recorded_calibration(target.tree) if gpus else None
    weights = combination_weights(target.tree, cal) if cal else {}
    piece = cal.piece if cal else 0.0
    results_dir = target.results_dir()
    done_by_machine: dict[str, set[str]] = {}
    lanes: dict[Lane, list[Job]] = {}
    selected = 0
    cpu_lanes = shard.cpu_lanes(os.cpu_count() or 1)
    for lane, lane_ps in lane_pieces(listed, gpus, weights, piece, cpu_lanes).items():
        machine = lane.machine(target.machine)
        if machine not in done_by_machine:
            result_files.sweep(results_dir, machine, target.sha, lambda s: log(f"run: {s}"))
            done_by_machine[machine] = result_files.stored(results_dir, machine, target.sha)
        done = done_by_machine[machine]
        for piece in lane_ps:
            aliases = listed[piece.unit]["names"]
            mine = [n for n in chosen.get(piece.unit, []) if aliases[n][1] in piece.combos]
            selected += bool(mine)
            todo = [n for n in mine if n not in done]
            if not todo:
                continue
            combos = tuple(sorted({aliases[n][1] for n in todo}))
            bench = tuple(selectors(piece.unit, todo, every[piece.unit]))
            solo = listed[piece.unit]["solo"]
            lanes.setdefault(lane, []).append(Job(piece, bench, combos, solo))
    return lanes, selected
