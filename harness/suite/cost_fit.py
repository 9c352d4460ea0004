"""The cost model's fits (``harness.suite.cost``): a GPU run's seconds as ``a + b x
combinations + c x TFLOP``, fitted to whole runs' seconds (``fit``) or to the seconds of
each combination the runner recorded (``fit_combinations``)."""

from __future__ import annotations

import statistics
from collections.abc import Mapping
from dataclasses import dataclass


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
    # What the points are: "unit timings" (a run's seconds each) or "combination timings"
    # (``fit_combinations``: b and c over combinations, a over the runs' remainders).
    basis: str = "unit timings"

    def seconds(self, size: UnitSize) -> float:
        return self.a + self.b * size.combinations + self.c * size.tflop


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


def fit_combinations(runs: list, flops: Mapping[str, Mapping[str, int | None]], solo):
    """A ``Fit`` from the combinations' measured seconds (``Run.combinations``): ``b`` and
    ``c`` by least squares over every measured GPU combination (``b + c x TFLOP``, kept
    >= 0), ``a`` the median over the GPU runs that recorded theirs of what the run spent
    beyond its combinations (asv's start-up, discovery, import, each family process's
    start and imports, the tracks' processes, saving); None where no run recorded any."""
    import numpy as np

    points = [
        (flops[unit][name] / 1e12, sec)
        for r in runs
        for unit, combos in r.combinations.items()
        if unit not in solo and unit in flops
        for name, sec in combos.items()
        if flops[unit].get(name) is not None
    ]
    rest = [
        sec - sum(s for part in key.split("+") for s in r.combinations.get(part, {}).values())
        for r in runs
        for key, (lane, sec) in r.units.items()
        if not is_cpu(lane)
        and all(part in r.combinations and part not in solo for part in key.split("+"))
    ]
    if not points or not rest:
        return None
    x = np.array([[1.0, t] for t, _ in points])
    y = np.array([sec for _, sec in points])
    (b, c), *_ = np.linalg.lstsq(x, y, rcond=None)
    if c < 0:  # noise in few points: the work term is dropped, not kept negative
        b, c = float(y.mean()), 0.0
    elif b < 0:
        b, c = 0.0, float((x[:, 1] @ y) / max(1e-12, x[:, 1] @ x[:, 1]))
    return Fit(
        max(0.0, statistics.median(rest)), float(b), float(c), len(points), "combination timings"
    )


def is_cpu(lane: str) -> bool:
    """Whether a timing line's lane is a CPU lane (``cpu``, ``cpu1``, ...)."""
    return lane.startswith("cpu")
