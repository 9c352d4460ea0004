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
    # Each family process's start (CUDA, its first kernel loads), paid once per piece of a
    # family; 0 in a fit to whole runs, whose ``a`` holds it.
    process: float = 0.0

    def seconds(self, size: UnitSize) -> float:
        """A unit run alone: one run's start-up, one family process, its combinations."""
        return self.a + self.process + self.b * size.combinations + self.c * size.tflop


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


# The phases of an ``asv run`` (``harness.suite.asv_phases``) it pays once, whatever it
# measures: the rest (each family's ``setup_cache`` and tracks) scale with its families.
RUN_PHASES = ("start-up", "discovery", "build", "import", "save")


def typical_first(combos: Mapping[str, float]) -> tuple[dict[str, float], dict[str, float]]:
    """A family process's combinations in the order it measured them: all of them with
    the first one's seconds (which carry the process's start) replaced by the median of
    the others', and the others alone."""
    items = list(combos.items())
    rest = dict(items[1:])
    typical = statistics.median(rest.values()) if rest else 0.0
    return {**{name: typical for name, _ in items[:1]}, **rest}, rest


def fit_combinations(runs: list, flops: Mapping[str, Mapping[str, int | None]], solo):
    """A ``Fit`` from the family processes' recorded seconds (``Run.families``, each
    process's combinations in the order it measured them), None where no run recorded
    any:

    - ``b`` and ``c`` by least squares over every measured GPU combination but each
      process's first (``b + c x TFLOP``, kept >= 0);
    - ``process``, the median over the family processes of their seconds less those of
      their combinations, the first one counted as typical (the median of the others):
      the start before the first combination and what the first one took beyond a
      typical one, CUDA's start and the first kernel loads;
    - ``a``, the median over the GPU runs whose families all recorded theirs of the run's
      own phases (``RUN_PHASES``: asv's start-up, discovery, build, import, saving), and
      what the run spent beyond those and its family processes (the tracks' processes,
      asv's set-up of each family's cache) shared by its families and added to
      ``process``; a log without phases leaves all of that in ``a``."""
    import numpy as np

    points, starts = [], []
    for r in runs:
        for unit, spent in r.families.items():
            if unit in solo or unit not in flops:
                continue
            typical, rest = typical_first(spent["combinations"])
            starts.append(spent["seconds"] - sum(typical.values()))
            points += [
                (flops[unit][n] / 1e12, sec) for n, sec in rest.items() if flops[unit].get(n)
            ]
    runs_rest, per_family = [], []
    for r in runs:
        for key, (lane, sec) in r.units.items():
            parts = key.split("+")
            if is_cpu(lane) or not all(p in r.families and p not in solo for p in parts):
                continue
            rest = sec - sum(r.families[p]["seconds"] for p in parts)
            phases = r.phases.get(key)
            if phases is None:
                runs_rest.append(rest)
                continue
            # The run's own phases are its fixed part; what else it spent beyond its
            # family processes (their tracks' processes, asv's set-up of each family's
            # cache) comes with each family, so with each process.
            fixed = sum(phases.get(name, 0.0) for name in RUN_PHASES)
            runs_rest.append(fixed)
            per_family.append(max(0.0, rest - fixed) / len(parts))
    if not points or not runs_rest:
        return None
    if per_family:
        starts = [s + statistics.median(per_family) for s in starts]
    x = np.array([[1.0, t] for t, _ in points])
    y = np.array([sec for _, sec in points])
    (b, c), *_ = np.linalg.lstsq(x, y, rcond=None)
    if c < 0:  # noise in few points: the work term is dropped, not kept negative
        b, c = float(y.mean()), 0.0
    elif b < 0:
        b, c = 0.0, float((x[:, 1] @ y) / max(1e-12, x[:, 1] @ x[:, 1]))
    return Fit(
        max(0.0, statistics.median(runs_rest)),
        float(b),
        float(c),
        len(points),
        "combination timings",
        max(0.0, statistics.median(starts)),
    )


def is_cpu(lane: str) -> bool:
    """Whether a timing line's lane is a CPU lane (``cpu``, ``cpu1``, ...)."""
    return lane.startswith("cpu")
