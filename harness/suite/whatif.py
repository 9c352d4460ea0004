"""What a recorded cost model says beyond its table: how close the runner's plan comes to
the best split of the suite over N GPUs, and what both would read if a family process
started faster. Nothing here is measured: it is the recorded fit, rearranged.

    python -m harness.suite.whatif reports/cost_h200.json                 # plan vs best split
    python -m harness.suite.whatif reports/cost_h200.json --process 7.75  # another start

The best split tries every cut of the GPU families into at most ``--parts`` balanced groups
(each group a family process of its own: ``shard.cut``) and, for each cut, the partition
of the pieces over the GPUs whose busiest lane is least (``shard.partition``, exact within
``shard.SEARCH_STEPS`` steps), weighed in the seconds the model predicts for them (the
ones its table adds up), where the runner's plan weighs them in its calibration; the CPU
lanes are cut as far as the host's cores allow and start when the solo family ends, as
in the table. No plan that cuts a family into at most ``--parts`` groups has a lower
wall on N GPUs than the best split, so a speedup above its column needs cheaper pieces (a
shorter process start, fewer serial seconds, a larger grid), not a finer plan.
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from harness.cli import positive_int
from harness.report import cost as cost_report
from harness.suite import cost, shard

# What a model must hold for the what-if (``python -m harness.suite.cost --json`` writes it).
FIELDS = ("fit", "serial", "solo", "cores_per_gpu", "sizes", "per_combination")

# Groups per family the best split tries at most (``--parts``): each further group pays a
# family process's start, so past two they rarely pay on the recorded grids.
MAX_PARTS = 2


@dataclass(frozen=True, slots=True)
class Split:
    """The least wall one GPU count could reach: ``busiest`` GPU lane's seconds, the CPU
    lanes' end (after the solo family), the wall (serial steps plus the longer), and the
    cut that reaches it (``parts``: groups per family)."""

    gpus: int
    busiest: float
    cpu: float
    wall: float
    parts: Mapping[str, int]


def _seconds(m: Mapping) -> dict[str, dict[str, float]]:
    """Each unit's combinations at the seconds the model predicts for them."""
    return {u: {c: s for c, (_, s) in cs.items()} for u, cs in m["per_combination"].items()}


def best_split(m: Mapping, gpus: int, max_parts: int = MAX_PARTS) -> Split:
    """The model ``m``'s least wall on ``gpus`` GPUs over every cut of its GPU families into
    at most ``max_parts`` groups and every partition of the pieces (see the module)."""
    if gpus < 1 or max_parts < 1:
        raise ValueError(f"gpus={gpus}, max_parts={max_parts}: both must be >= 1")
    a, process = m["fit"]["a"], m["fit"].get("process", 0.0)
    per, cpu_units = _seconds(m), cost.cpu_units(m)
    solo = set(m["solo"])
    families = sorted(u for u in per if u not in cpu_units and u not in solo)
    # The solo family runs in a batch of its own for its recorded seconds (start-up and
    # process included): a piece of that weight less the batch's start-up.
    alone = [
        shard.Piece(u, u, tuple(sorted(per.get(u, {}))), max(0.0, m["solo"][u] - a))
        for u in sorted(solo)
    ]
    best: tuple[float, dict[str, int]] | None = None
    for counts in itertools.product(range(1, max_parts + 1), repeat=len(families)):
        parts = dict(zip(families, counts, strict=True))
        pieces = shard.cut({u: per[u] for u in families}, parts, process) + alone
        lanes = shard.partition(pieces, gpus, a, solo)
        busiest = max(shard.lane_cost(ps, a, solo) for ps in lanes)
        if best is None or busiest < best[0] - 1e-9:
            best = (busiest, parts)
    assert best is not None
    on_cpu = {u: per[u] for u in sorted(cpu_units)}
    lanes_cpu = shard.cpu_lanes(m["cores_per_gpu"] * gpus)
    cpu_plan = shard.balance(on_cpu, lanes_cpu, a) if on_cpu else []
    start = sum(m["solo"].values())
    cpu_end = max((start + shard.lane_cost(ps, a) for ps in cpu_plan if ps), default=0.0)
    wall = sum(m["serial"].values()) + max(best[0], cpu_end)
    return Split(gpus, best[0], cpu_end, wall, best[1])


def with_process(m: Mapping, seconds: float) -> dict:
    """The model ``m`` with every family process starting in ``seconds`` (a what-if)."""
    if not 0 <= seconds < math.inf:
        raise ValueError(f"process={seconds}: must be finite and >= 0 seconds")
    return {**m, "fit": {**m["fit"], "process": seconds}}


def rows(m: Mapping, counts=cost.GPU_COUNTS, max_parts: int = MAX_PARTS) -> list[dict]:
    """Per GPU count: the plan's wall (the table's, grid as is) and the best split's, each
    speedup against its own one-GPU wall."""
    as_is = cost.GROWTHS["as is"]
    plan = {n: cost.wall(m, n, as_is) for n in counts}
    best = {n: best_split(m, n, max_parts) for n in counts}
    first = counts[0]
    return [
        {
            "gpus": n,
            "plan_s": plan[n],
            "plan_x": plan[first] / plan[n],
            "best_s": best[n].wall,
            "best_x": best[first].wall / best[n].wall,
            "parts": {u: k for u, k in best[n].parts.items() if k > 1},
        }
        for n in counts
    ]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m harness.suite.whatif",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("model", type=Path, help="a cost model (python -m harness.suite.cost --json)")
    p.add_argument(
        "--process",
        type=float,
        default=None,
        metavar="SECONDS",
        help="what if each family process started in SECONDS (default: the model's fit)",
    )
    p.add_argument(
        "--parts",
        type=positive_int,
        default=MAX_PARTS,
        help=f"groups per family the best split tries at most (default: {MAX_PARTS})",
    )
    args = p.parse_args(argv)
    try:
        m = json.loads(args.model.read_text())
    except (OSError, ValueError) as err:
        p.error(f"model {args.model}: {err!r}")
    missing = [f for f in FIELDS if f not in m] if isinstance(m, dict) else list(FIELDS)
    if missing or "a" not in m["fit"]:
        p.error(
            f"model {args.model}: lacks {missing or ['fit.a']}: a model holds "
            f"{', '.join(FIELDS)} (fit with a), as python -m harness.suite.cost --json writes it"
        )
    fitted = m["fit"].get("process", 0.0)
    if args.process is not None:
        try:
            m = with_process(m, args.process)
        except ValueError as err:
            p.error(f"--{err}")
    print(cost_report.render_whatif(rows(m, max_parts=args.parts), m["fit"]["process"], fitted))
    return 0


if __name__ == "__main__":
    sys.exit(main())
