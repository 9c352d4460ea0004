"""What the suite costs, and what it would cost grown or on more GPUs: a model fitted to
the per-unit seconds of real runs (the ``timing`` lines ``harness.suite.run`` prints).

    python -m harness.suite.cost RUN.log [MORE.log ...] [--json reports/cost_h200.json]
    python -m harness.suite.cost --render reports/cost_h200.json   # the table again

An ``asv run`` of GPU units (one family, or a batch of whole families: ``gemm.A+gemm.B``)
takes ``a + b * combinations + c * TFLOP`` seconds, plus ``process`` per family process
it starts. Where the logs hold the runner's ``family`` lines (each GPU family process's
seconds, per combination in measuring order: ``discovery.SECONDS_ENV``), ``b`` and ``c``
are fitted to the measured combinations, ``process`` to what each process spent beyond
them and ``a`` to each run's own phases (``cost_fit.fit_combinations``), and the plan's
predicted seconds are each combination's own; older logs fit whole runs (``cost_fit.fit``,
``process`` 0). There, ``a`` is asv's start-up and the
family's process (CUDA context, kernel loads), ``b`` each combination's fixed cost
(timing loops, track processes), ``c`` the launches themselves, which grow with the
work, and ``a`` is charged once per ``asv run``, batch or family. The wall time on N GPUs is the
serial steps of the first log
(precompile, publish, start-up, the runner's own overhead) plus the longer of the CPU
lanes and the busiest GPU lane, with the suite cut and placed by the runner's own plan
(``shard.plan_suite``, weighed in seconds by ``Calibration.of_model`` of this
model). A batch (the pieces one ``asv run`` measures: what a lane packs within
``shard.RUN_BUDGET_S``) costs ``a``, ``process`` per GPU piece and its combinations'
seconds: as recorded (a process's first combination at its family's median), else each
timed run's seconds less ``a``, shared among its combinations in proportion to their
``b + c x TFLOP``; the CPU lane's seconds less ``a`` likewise,
shared equally among the CPU combinations. The solo family (``gemm.Launch``) runs first
in its GPU's lane for its measured seconds, and the CPU lanes (as many as
``shard.cpu_lanes`` allows a host of ``cores_per_gpu`` cores per GPU) start when it
ends. The grown grids repeat every GPU family's combinations, and scale the CPU
combinations and the precompile by what each growth adds to them (``GROWTHS``).

    python -m harness.suite.cost --model reports/cost_h200.json --json reports/cost_h200.json

recomputes a recorded model's plan and table for the suite as it is now, from the
seconds the model holds (no logs needed).

What ``a`` is made of is in the same logs: each run's ``phases`` line
(``harness.suite.asv_phases``: start-up, discovery, build, import, setup_cache, tracks,
save); with family lines the fit reads its own phases as ``a`` (``cost_fit.RUN_PHASES``).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path

from harness.cli import positive_int
from harness.report import cost as cost_table
from harness.suite import asv_phases, discovery, run, shard
from harness.suite.cost_fit import Fit as Fit  # re-exported: the model's fit type
from harness.suite.cost_fit import UnitSize, fit, fit_combinations, is_cpu, typical_first
from harness.suite.weights import Calibration, combination_flops, cpu_combinations

ROOT = Path(__file__).resolve().parent.parent.parent
GPU_COUNTS = (1, 2, 4, 8)
# Cores per GPU of the H200 runner hosts the recorded runs come from: the model gives a
# host of N GPUs N times as many (``shard.cpu_lanes``).
CORES_PER_GPU = 16


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
    # GPU family -> its process's seconds, whole and per combination in measuring order
    # (``run.read_families``), where the runner recorded them.
    families: dict[str, dict] = field(default_factory=dict)
    # Each run's asv phases (``asv_phases.read_phases``) by its step's key, where logged.
    phases: dict[str, dict[str, float]] = field(default_factory=dict)

    @property
    def combinations(self) -> dict[str, dict[str, float]]:
        return {unit: spent["combinations"] for unit, spent in self.families.items()}

    @classmethod
    def read(cls, lines: Iterable[str]) -> Run:
        lines = list(lines)
        units, steps = {}, {}
        for step, lane, seconds in run.read_timings(lines):
            if lane:
                units[step] = (lane, seconds)
            else:
                steps[step] = seconds
        if not units:
            raise ValueError("no unit timing lines (timing UNIT LANE: SECONDS s) in the log")
        families = {unit: spent for unit, _, spent in run.read_families(lines)}
        phases = {step: p for step, _, p in asv_phases.read_phases(lines)}
        return cls(units, steps, families, phases)


def suite_combinations(root: Path = ROOT) -> dict[str, dict[str, int | None]]:
    """``{unit: {combination: flops}}`` of the suite in ``root``: the GPU units'
    (``combination_flops``), and the CPU units' with None."""
    cpu = cpu_combinations(root)
    return {**combination_flops(root), **{u: dict.fromkeys(n) for u, n in cpu.items()}}


def unit_sizes(root: Path = ROOT) -> dict[str, UnitSize]:
    """``UnitSize`` of every GPU unit of the suite in ``root`` (no GPU needed)."""
    out = {}
    for unit, combos in combination_flops(root).items():
        valid = [f for f in combos.values() if f is not None]
        combos, flops = len(valid), sum(valid)
        out[unit] = UnitSize(combos, flops / 1e12)
    return out


def model(
    runs: list[Run],
    sizes: Mapping[str, UnitSize],
    solo: set[str],
    weights: Mapping[str, Mapping[str, float]] | None = None,
    cores_per_gpu: int = CORES_PER_GPU,
) -> dict:
    """The fit over every run's GPU units, the serial and CPU-lane figures of the first
    run (the base the table grows), and each combination's plan weight and seconds
    (``per_combination``). ``weights`` are the suite's ``{unit: {combination: any}}``
    (``combination_flops`` and the CPU units' combinations); a GPU unit without
    them counts as equal combinations."""
    obs = [
        (_batch_size(u, sizes), sec)
        for r in runs
        for u, (lane, sec) in r.units.items()
        if all(part in sizes and part not in solo for part in u.split("+")) and not is_cpu(lane)
    ]
    f = fit_combinations(runs, weights or {}, solo) or fit(obs)
    base = runs[0]
    cpu_pieces = [sec for lane, sec in base.units.values() if is_cpu(lane)]
    # One lane's worth: every CPU piece after the first paid its own start-up.
    cpu = max(0.0, sum(cpu_pieces) - f.a * max(0, len(cpu_pieces) - 1))
    solo_s = sum(sec for u, (_, sec) in base.units.items() if u in solo)
    gpu_units = {
        u: sec for u, (lane, sec) in base.units.items() if not is_cpu(lane) and u not in solo
    }
    lanes: dict[str, float] = {}
    for _u, (lane, sec) in base.units.items():
        if _u not in solo:
            lanes[lane] = lanes.get(lane, 0.0) + sec
    longest = max(lanes.values(), default=0.0)
    measure = base.steps.get("measure", solo_s + longest)
    # What the runner spends between units (planning, asv machine files): measure minus
    # its steps, at least 0.
    overhead = max(0.0, measure - solo_s - longest)
    serial = {
        "precompile": base.steps.get("precompile", 0.0),
        "publish": base.steps.get("publish", 0.0),
        "overhead": overhead,
    }
    total = base.steps.get("total")
    if total is not None:
        serial["start-up"] = max(0.0, total - measure - serial["precompile"] - serial["publish"])
    m = {
        "fit": asdict(f),
        "serial": serial,
        "solo": {u: sec for u, (_, sec) in base.units.items() if u in solo},
        "cpu_lane": cpu,
        "cores_per_gpu": cores_per_gpu,
        "gpu_units": gpu_units,
        "sizes": {u: asdict(s) for u, s in sizes.items() if u not in solo},
    }
    measured = {}
    for r in reversed(runs):  # the base run's figures win where several runs timed one
        for u, combos in r.combinations.items():
            if u in solo:
                continue
            # The first combination's seconds carry the process's start (``fit.process``):
            # it counts as its family's typical one.
            measured[u], _ = typical_first(combos)
    if measured:
        m["measured"] = measured
    m["per_combination"] = per_combination(m, sizes, weights or {})
    return m


def _batch_size(key: str, sizes: Mapping[str, UnitSize]) -> UnitSize:
    """What a timed run of whole units (``gemm.A+gemm.B``) measured."""
    parts = [sizes[u] for u in key.split("+")]
    return UnitSize(sum(s.combinations for s in parts), sum(s.tflop for s in parts))


def per_combination(
    m: Mapping, sizes: Mapping[str, UnitSize], combos: Mapping[str, Mapping]
) -> dict[str, dict[str, list[float]]]:
    """``{unit: {combination: [plan weight, seconds]}}`` for every unit with measured
    seconds (the solo one and the CPU units included): the weight is
    ``Calibration.of_model(m)``'s, the seconds the unit's measured seconds less the
    fit's ``a``, shared by weight. ``combos`` are the suite's ``{unit: {combination:
    flops}}`` for GPU units (``combination_flops``) and ``{unit: {combination:
    None}}`` for CPU units (without them, the CPU lane is one combination)."""
    a = m["fit"]["a"]
    timed = m.get("measured", {})  # each combination's own seconds, where recorded
    gpu = {u: cs for u, cs in combos.items() if u in sizes or u in m["solo"]}
    cpu = {u: cs for u, cs in combos.items() if u not in gpu}
    if not cpu and m["cpu_lane"]:
        cpu = {"cpu": {"cpu": None}}  # a lane known by its seconds alone: one combination
    cal = Calibration.of_model(m, sum(len(cs) for cs in cpu.values()))
    measured = {**m["gpu_units"], **m["solo"]}
    out = {}
    for key, seconds in measured.items():  # a unit, or a batch of whole units (A+B)
        flops = {part: dict(gpu.get(part) or {}) for part in key.split("+")}
        for part, fl in flops.items():
            if not fl:
                n = sizes[part].combinations if part in sizes else 1
                each = int(sizes[part].tflop * 1e12 / n) if part in sizes else 0
                fl.update({f"{part}({i})": each for i in range(n)})
        weight = {part: {c: cal.gpu(f) for c, f in fl.items()} for part, fl in flops.items()}
        total = sum(w for ws in weight.values() for w in ws.values()) or 1.0
        share = max(0.0, seconds - a)
        for part, ws in weight.items():
            got = timed.get(part, {})
            out[part] = {c: [w, got.get(c, share * w / total)] for c, w in ws.items()}
    for unit, fl in gpu.items():  # no run timed it (added since): the fit's seconds
        if unit not in out:
            out[unit] = {c: [cal.gpu(f), cal.gpu(f)] for c, f in fl.items()}
    for unit, cs in cpu.items():
        out[unit] = {c: [cal.cpu_combination, cal.cpu_combination] for c in cs}
    return out


def cpu_units(m: Mapping) -> set[str]:
    """The model ``m``'s CPU units: neither a GPU family it sized nor the solo one."""
    return {u for u in m["per_combination"] if u not in m["sizes"] and u not in m["solo"]}


def lane_seconds(m: Mapping, gpus: int, growth: Growth) -> tuple[dict[int, float], list[float]]:
    """Each GPU's seconds and each CPU lane's end under the runner's plan of the grid
    grown by ``growth`` (``shard.plan_suite`` weighed by the model's plan weights)."""
    copies = max(1, round(growth.combinations))
    solo = set(m["solo"])
    # GPU units by their sizes: a timed run's key may be a batch of them (``A+B``).
    cpu = cpu_units(m)
    combos = {}
    for unit, cs in m["per_combination"].items():
        if unit in cpu:
            combos[unit] = {c: [w * growth.cpu, s * growth.cpu] for c, (w, s) in cs.items()}
        else:
            combos[unit] = {
                f"{c}#{i}" if i else c: wc for c, wc in cs.items() for i in range(copies)
            }
    weights = {u: {c: wc[0] for c, wc in cs.items()} for u, cs in combos.items()}
    a, process = m["fit"]["a"], m["fit"].get("process", 0.0)
    lanes_cpu = shard.cpu_lanes(m["cores_per_gpu"] * gpus)
    planned = shard.plan_suite(weights, list(range(gpus)), a, solo, cpu, lanes_cpu, process=process)

    def seconds(b: shard.Batch) -> float:
        if b.alone(solo):
            return sum(m["solo"][p.unit] for p in b.pieces)
        starts = sum(process for p in b.pieces if p.unit not in cpu)
        return a + starts + sum(combos[p.unit][c][1] for p in b.pieces for c in p.combos)

    start = sum(m["solo"].values())
    gpu = {g: sum(seconds(b) for b in bs) for g, bs in planned.gpu.items()}
    return gpu, [start + sum(seconds(b) for b in bs) for bs in planned.cpu]


def wall(m: Mapping, gpus: int, growth: Growth) -> float:
    """Predicted wall time of the grid grown by ``growth`` on ``gpus`` GPUs."""
    gpu, cpu = lane_seconds(m, gpus, growth)
    serial = dict(m["serial"])
    serial["precompile"] *= growth.kernels
    return sum(serial.values()) + max([*gpu.values(), *cpu], default=0.0)


def table(m: Mapping, counts: Iterable[int] = GPU_COUNTS) -> list[dict]:
    counts = list(counts)
    rows = []
    for name, growth in GROWTHS.items():
        walls = {n: wall(m, n, growth) for n in counts}
        rows.append({"grid": name, "wall_s": walls, "speedup_2": walls[1] / walls.get(2, walls[1])})
    return rows


def render(m: Mapping) -> str:
    """Markdown: the fit, then expected wall time per GPU count and grid
    (``harness.report.cost``), for this suite's CPU lanes."""
    return cost_table.render(m, shard.CORES_PER_CPU_LANE)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m harness.suite.cost",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("logs", nargs="*", type=Path, help="logs of harness.suite.run, base first")
    p.add_argument("--json", type=Path, default=None, help="write the model and table here")
    p.add_argument("--render", type=Path, default=None, help="print the table of a --json file")
    p.add_argument(
        "--model", type=Path, default=None, help="recompute a --json file's plan and table"
    )
    p.add_argument(
        "--cores-per-gpu",
        type=positive_int,
        default=None,
        help=f"the measured host's CPU cores per GPU (default: the model's, else {CORES_PER_GPU})",
    )
    args = p.parse_args(argv)
    if args.model:
        try:
            m = upgrade(json.loads(args.model.read_text()), ROOT, args.cores_per_gpu)
        except (OSError, ValueError, KeyError) as err:
            p.error(f"--model {args.model}: {err!r}")
        return _write(m, args.json)
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
    cores = args.cores_per_gpu or CORES_PER_GPU
    m = model(runs, unit_sizes(ROOT), solo, suite_combinations(ROOT), cores)
    return _write(m, args.json)


def upgrade(m: dict, root: Path, cores_per_gpu: int | None = None) -> dict:
    """A recorded model (its fit, serial steps, CPU lane and per-family seconds) with the
    sizes and per-combination figures of the suite in ``root`` (a GPU family no recorded
    run timed at the fit's seconds) and its table recomputed. A model
    written before the solo family shared the start holds it among the serial steps; one
    written before the CPU lanes were counted gets ``cores_per_gpu`` (given, else
    ``CORES_PER_GPU``)."""
    m = {k: v for k, v in m.items() if k != "table"}
    serial = dict(m["serial"])
    solo_units = [u for u, e in discovery.listing(root).items() if e["solo"]]
    if "solo" in serial:
        seconds = serial.pop("solo")
        m["solo"] = {u: seconds / len(solo_units) for u in solo_units}
    m["serial"] = serial
    now = {u: s for u, s in unit_sizes(root).items() if u not in m.get("solo", {})}
    sizes = {**{u: UnitSize(**s) for u, s in m["sizes"].items()}, **now}
    m["sizes"] = {u: asdict(s) for u, s in sizes.items()}
    if cores_per_gpu or "cores_per_gpu" not in m:
        m["cores_per_gpu"] = cores_per_gpu or CORES_PER_GPU
    m["per_combination"] = per_combination(m, sizes, suite_combinations(root))
    return m


def _write(m: dict, path: Path | None) -> int:
    m["table"] = table(m)
    print(render(m))
    if path:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(m, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
