"""What the suite costs, and what it would cost grown or on more GPUs: a model fitted to
the per-unit seconds of real runs (the ``timing`` lines ``harness.suite.run`` prints).

    python -m harness.suite.cost RUN.log [MORE.log ...] [--json reports/cost_h200.json]
    python -m harness.suite.cost --render reports/cost_h200.json   # the table again

A GPU unit (one family) takes ``a + b * combinations + c * TFLOP`` seconds: ``a`` is
asv's start-up and the family's process (CUDA context, kernel loads), ``b`` each
combination's fixed cost (timing loops, track processes), ``c`` the launches themselves,
which grow with the work. The wall time on N GPUs is the serial steps of the first log
(precompile, the solo unit, publish, the runner's own overhead) plus the longer of the
CPU lane and the busiest GPU lane, with the units placed by ``shard.plan`` on their
predicted seconds: a family is not split, so past a few GPUs the largest one bounds the
wall time. The grown grids scale every GPU family's combinations and TFLOP, and the CPU
lane and the precompile by what each growth adds to them (``GROWTHS``).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path

from harness.suite import discovery, run, shard

ROOT = Path(__file__).resolve().parent.parent.parent
GPU_COUNTS = (1, 2, 4, 8)


@dataclass(frozen=True, slots=True)
class UnitSize:
    """What a GPU unit measures: its valid combinations and their work."""

    combinations: int
    tflop: float


@dataclass(frozen=True, slots=True)
class Fit:
    """``seconds = a + b * combinations + c * tflop`` for one GPU unit."""

    a: float
    b: float
    c: float
    points: int

    def seconds(self, size: UnitSize) -> float:
        return self.a + self.b * size.combinations + self.c * size.tflop


@dataclass(frozen=True, slots=True)
class Growth:
    """A grown grid, as factors on what the current one measures."""

    combinations: float  # every GPU family's combinations and TFLOP
    cpu: float  # the CPU lane (static): it builds configs x dtypes at one shape
    kernels: float  # distinct kernels to precompile


GROWTHS = {
    "as is": Growth(1, 1, 1),
    # static measures one shape: more shapes leave it alone.
    "2x shapes": Growth(2, 1, 2),
    # Sm90aResources doubles (config x dtype), CompileTime (fp16 only) does not.
    "2x dtypes": Growth(2, 1.5, 2),
    "2x kernels": Growth(2, 2, 2),
}


@dataclass(frozen=True, slots=True)
class Run:
    """One run's timing lines: every unit's seconds with its lane, and the other steps."""

    units: dict[str, tuple[str, float]]  # unit -> (lane, seconds)
    steps: dict[str, float]  # precompile, measure, publish, total

    @classmethod
    def read(cls, lines: Iterable[str]) -> Run:
        units, steps = {}, {}
        for step, lane, seconds in run.read_timings(lines):
            if lane:
                units[step] = (lane, seconds)
            else:
                steps[step] = seconds
        if not units:
            raise ValueError("no unit timing lines (timing UNIT LANE: SECONDS s) in the log")
        return cls(units, steps)


def unit_sizes(root: Path = ROOT) -> dict[str, UnitSize]:
    """``UnitSize`` of every GPU unit of the suite in ``root`` (no GPU needed)."""
    out = {}
    for unit, families in shard.suite_units(root).items():
        if not all(f.is_gpu for f in families):
            continue
        combos, flops = 0, 0
        for family in families:
            bench = family.cls()
            for combo in family.combinations():
                try:
                    shape, _ = bench.case(*combo)
                except ValueError:
                    continue
                combos += 1
                flops += shape.flops
        out[unit] = UnitSize(combos, flops / 1e12)
    return out


def fit(observations: list[tuple[UnitSize, float]]) -> Fit:
    """Least squares over ``(size, seconds)`` pairs, coefficients kept >= 0 (a negative
    cost is noise in few points): a coefficient that comes out negative is dropped and
    the rest refitted."""
    import numpy as np

    if not observations:
        raise ValueError("fit: no (unit size, seconds) observations")
    x = np.array([[1.0, s.combinations, s.tflop] for s, _ in observations])
    y = np.array([sec for _, sec in observations])
    keep = [0, 1, 2]
    while True:
        coef, *_ = np.linalg.lstsq(x[:, keep], y, rcond=None)
        if (coef >= 0).all() or len(keep) == 1:
            break
        del keep[int(np.argmin(coef))]
    full = [0.0, 0.0, 0.0]
    for i, value in zip(keep, coef, strict=True):
        full[i] = max(0.0, float(value))
    return Fit(*full, points=len(observations))


def model(runs: list[Run], sizes: Mapping[str, UnitSize], solo: set[str]) -> dict:
    """The fit over every run's GPU units, and the serial and CPU-lane figures of the
    first run (the base the table grows)."""
    obs = [
        (sizes[u], sec)
        for r in runs
        for u, (lane, sec) in r.units.items()
        if u in sizes and u not in solo and lane != "cpu"
    ]
    base = runs[0]
    cpu = sum(sec for lane, sec in base.units.values() if lane == "cpu")
    solo_s = sum(sec for u, (_, sec) in base.units.items() if u in solo)
    gpu_units = {u: sec for u, (lane, sec) in base.units.items() if lane != "cpu" and u not in solo}
    lanes: dict[str, float] = {}
    for _u, (lane, sec) in base.units.items():
        if lane != "cpu" and _u not in solo:
            lanes[lane] = lanes.get(lane, 0.0) + sec
    measure = base.steps.get("measure", solo_s + max([cpu, *lanes.values()]))
    # What the runner spends between units (planning, asv machine files): measure minus
    # its steps, at least 0.
    overhead = max(0.0, measure - solo_s - max([cpu, *lanes.values()]))
    serial = {
        "precompile": base.steps.get("precompile", 0.0),
        "solo": solo_s,
        "publish": base.steps.get("publish", 0.0),
        "overhead": overhead,
    }
    total = base.steps.get("total")
    if total is not None:
        serial["start-up"] = max(0.0, total - measure - serial["precompile"] - serial["publish"])
    return {
        "fit": asdict(fit(obs)),
        "serial": serial,
        "cpu_lane": cpu,
        "gpu_units": gpu_units,
        "sizes": {u: asdict(s) for u, s in sizes.items() if u not in solo},
    }


def wall(m: Mapping, gpus: int, growth: Growth) -> float:
    """Predicted wall time of the grid grown by ``growth`` on ``gpus`` GPUs."""
    f = Fit(**m["fit"])
    seconds = {
        u: f.seconds(
            UnitSize(s["combinations"] * growth.combinations, s["tflop"] * growth.combinations)
        )
        for u, s in m["sizes"].items()
    }
    lanes = shard.plan(seconds, list(range(gpus))) if seconds else {}
    busiest = max((sum(seconds[u] for u in us) for us in lanes.values()), default=0.0)
    serial = dict(m["serial"])
    serial["precompile"] *= growth.kernels
    return sum(serial.values()) + max(busiest, m["cpu_lane"] * growth.cpu)


def table(m: Mapping, counts: Iterable[int] = GPU_COUNTS) -> list[dict]:
    counts = list(counts)
    rows = []
    for name, growth in GROWTHS.items():
        walls = {n: wall(m, n, growth) for n in counts}
        rows.append({"grid": name, "wall_s": walls, "speedup_2": walls[1] / walls.get(2, walls[1])})
    return rows


def render(m: Mapping) -> str:
    """Markdown: the fit, then expected wall time per GPU count and grid."""
    f = m["fit"]
    rows = m["table"]
    counts = list(rows[0]["wall_s"])
    lines = [
        f"GPU unit seconds = {f['a']:.1f} + {f['b']:.2f} x combinations + {f['c']:.2f} x TFLOP "
        f"(fitted on {f['points']} unit timings); serial steps "
        + ", ".join(f"{k} {v:.0f} s" for k, v in m["serial"].items())
        + f"; CPU lane {m['cpu_lane']:.0f} s.",
        "",
        "| grid | " + " | ".join(f"{n} GPU{'s' if n > 1 else ''}" for n in counts) + " |",
        "|---|" + "---|" * len(counts),
    ]
    for row in rows:
        walls = row["wall_s"]
        cells = [f"{walls[n]:.0f} s ({walls[counts[0]] / walls[n]:.2f}x)" for n in counts]
        lines.append(f"| {row['grid']} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m harness.suite.cost",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("logs", nargs="*", type=Path, help="logs of harness.suite.run, base first")
    p.add_argument("--json", type=Path, default=None, help="write the model and table here")
    p.add_argument("--render", type=Path, default=None, help="print the table of a --json file")
    args = p.parse_args(argv)
    if args.render:
        m = json.loads(args.render.read_text())
        m["table"] = [
            {**row, "wall_s": {int(n): s for n, s in row["wall_s"].items()}} for row in m["table"]
        ]
        print(render(m))
        return 0
    if not args.logs:
        p.error("give at least one run log (or --render FILE)")
    try:
        runs = [Run.read(path.read_text().splitlines()) for path in args.logs]
    except (OSError, ValueError) as err:
        p.error(str(err))
    solo = {u for u, e in discovery.listing(ROOT).items() if e["solo"]}
    m = model(runs, unit_sizes(ROOT), solo)
    m["table"] = table(m)
    print(render(m))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(m, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
