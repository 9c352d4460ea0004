"""The sharding plan's weights: seconds of the recorded cost model (``COST_MODEL``,
written by ``harness.suite.cost``) per ``asv run`` and per combination of the suite, whose
combinations and their work it reads from the suite's families (no GPU needed).
``harness.suite.shard`` plans with them; ``harness.suite.cost`` fits and checks the model.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from harness.suite import discovery

ROOT = Path(__file__).resolve().parent.parent.parent
# The recorded cost model the plan weighs by (``harness.suite.cost`` writes it): seconds
# measured on an H200 host. On another GPU the seconds differ, but their ratios (what the
# balance needs) much less.
COST_MODEL = ROOT / "reports" / "cost_h200.json"


@dataclass(frozen=True, slots=True)
class Calibration:
    """The plan's weights, in seconds of a recorded cost model (``harness.suite.cost``):
    one ``asv run`` (``piece``: asv's start-up and phases of its own), one family process
    (``process``: its start, paid by each piece of a family), a GPU combination
    (``combination`` plus ``tflop`` per TFLOP it measures) and a CPU one
    (``cpu_combination``: the CPU lane's seconds less a piece, per combination)."""

    piece: float
    combination: float
    tflop: float
    cpu_combination: float
    # A GPU family process's own start (CUDA, its first kernel loads), paid by every piece
    # of a family; 0 in a model fitted to whole runs, where ``piece`` holds it.
    process: float = 0.0

    def __post_init__(self):
        for name in ("piece", "combination", "tflop", "cpu_combination", "process"):
            value = getattr(self, name)
            if not 0 <= value < math.inf:
                raise ValueError(f"Calibration.{name}={value}: must be finite and >= 0")

    def gpu(self, flops: int | None) -> float:
        """Seconds of one GPU combination; an invalid one (``None``) is skipped at once."""
        return 0.0 if flops is None else self.combination + self.tflop * flops / 1e12

    @classmethod
    def of_model(cls, model: Mapping, cpu_combinations: int) -> Calibration:
        """From a cost model's ``fit`` and ``cpu_lane`` (whose seconds the suite's
        ``cpu_combinations`` share equally: the runs timed the CPU lane whole)."""
        fit = model["fit"]
        cpu = max(0.0, model["cpu_lane"] - fit["a"]) / max(1, cpu_combinations)
        return cls(fit["a"], fit["b"], fit["c"], cpu, fit.get("process", 0.0))


def recorded_calibration(root: Path = ROOT, path: Path = COST_MODEL) -> Calibration:
    """``Calibration.of_model`` of the model recorded at ``path``, for the suite in ``root``."""
    try:
        model = json.loads(Path(path).read_text())
    except (OSError, ValueError) as err:
        raise ValueError(f"{path}: cannot read the recorded cost model ({err})") from None
    cpu = sum(len(names) for names in cpu_combinations(root).values())
    try:
        return Calibration.of_model(model, cpu)
    except (KeyError, TypeError) as err:
        raise ValueError(f"{path}: needs fit.a, fit.b, fit.c and cpu_lane ({err!r})") from None


def suite_units(root: Path = ROOT) -> dict[str, list[discovery.Family]]:
    """The plan's units: ``{"gemm.Stage": [Stage], "static": [...]}``. A GPU family is a
    unit of its own; a module's CPU families form one unit named after the module."""
    out: dict[str, list[discovery.Family]] = {}
    for family in discovery.families(root):
        out.setdefault(discovery.unit_of(family), []).append(family)
    return out


def combination_flops(root: Path = ROOT) -> dict[str, dict[str, int | None]]:
    """``{GPU unit: {combination name: flops}}`` of the suite in ``root``, by the gate's
    names (``gemm.Stage(4096x4096x4096, 128, 3, f16)``): the operator's ``flops`` of the
    shape discovery's walk maps each to (``discovery.combination``, no GPU needed); None
    for an invalid combination. The CPU units are left out."""
    out: dict[str, dict[str, int | None]] = {}
    for unit, families in suite_units(root).items():
        if not all(f.is_gpu for f in families):
            continue
        combos = out.setdefault(unit, {})
        for family in families:
            for params in family.combinations():
                try:
                    combo = discovery.combination(family, params)
                except discovery.Skipped:
                    flops = None
                else:
                    flops = discovery.operator_of(combo).flops(combo.shape)
                combos[family.combination_name(params)] = flops
    return out


def cpu_combinations(root: Path = ROOT) -> dict[str, list[str]]:
    """``{CPU unit: [combination name, ...]}`` of the suite in ``root``."""
    return {
        unit: [f.combination_name(c) if c else f.full for f in families for c in f.combinations()]
        for unit, families in suite_units(root).items()
        if not all(f.is_gpu for f in families)
    }


def combination_weights(root: Path = ROOT, cal: Calibration | None = None) -> dict[str, dict]:
    """``{unit: {combination name: seconds}}`` of every unit of the suite in ``root`` by
    ``cal`` (default: ``recorded_calibration``): a GPU combination by its work, a CPU one
    at ``cpu_combination``."""
    cal = cal or recorded_calibration(root)
    out = {
        unit: {c: cal.gpu(f) for c, f in combos.items()}
        for unit, combos in combination_flops(root).items()
    }
    for unit, names in cpu_combinations(root).items():
        out[unit] = dict.fromkeys(names, cal.cpu_combination)
    return out
