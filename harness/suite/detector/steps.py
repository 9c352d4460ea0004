"""The latest change of a benchmark's history beyond its threshold: asv's
piecewise-constant fit (the Potts solver behind ``asv.step_detect.detect_steps``), its
penalty set by the threshold, then cleaned with it (short segments and sub-threshold
changes merged away). ``harness.suite.regressions`` tells why."""

from __future__ import annotations

import itertools
import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from harness.suite.detector.threshold import MIN_COMMITS


@dataclass(frozen=True, slots=True)
class Step:
    """The latest change of a series beyond its threshold, by index into its points."""

    last_before: int
    first_after: int
    before: float
    after: float
    points_after: int

    @property
    def ratio(self) -> float:
        return self.after / self.before


def latest_step(
    values: Sequence[float],
    weights: Sequence[float | None] | None,
    threshold: float,
    min_commits: int = MIN_COMMITS,
) -> Step | None:
    """The latest change beyond ``threshold`` (either way) in asv's piecewise-constant fit
    of ``values``, once short segments and sub-threshold changes are merged away."""
    from asv.step_detect import solve_potts_approx, weighted_median

    if len(values) < 2:
        return None
    w = fill_weights(weights, len(values))
    # One break costs what a change of `threshold` at one commit explains (the fit's cost
    # is the weighted L1 distance, weights normalised to 1): every change that could count
    # gets a break, and the merging below removes those that do not.
    gamma = max(threshold, 1e-6) * statistics.median(values)
    right, _, _ = solve_potts_approx(list(values), w, gamma=gamma)
    segs = [[left, r] for left, r in zip([0, *right[:-1]], right, strict=True)]

    def level(seg: list[int]) -> float:
        return weighted_median(values[seg[0] : seg[1]], w[seg[0] : seg[1]])

    def merge(i: int) -> None:  # segment i and i + 1 become one
        segs[i : i + 2] = [[segs[i][0], segs[i + 1][1]]]

    limit = math.log1p(threshold)
    while len(segs) > 1:
        levels = [level(s) for s in segs]
        short = [i for i, s in enumerate(segs) if s[1] - s[0] < min_commits]
        if short:
            i = short[0]
            if i == 0:
                merge(0)
            elif i == len(segs) - 1:
                merge(i - 1)
            else:
                closer_left = abs(math.log(levels[i] / levels[i - 1])) <= abs(
                    math.log(levels[i + 1] / levels[i])
                )
                merge(i - 1 if closer_left else i)
            continue
        changes = [abs(math.log(b / a)) for a, b in itertools.pairwise(levels)]
        i = min(range(len(changes)), key=changes.__getitem__)
        if changes[i] > limit:
            break
        merge(i)
    if len(segs) < 2:
        return None
    before, after = segs[-2], segs[-1]
    return Step(before[1] - 1, after[0], level(before), level(after), after[1] - after[0])


def fill_weights(weights: Sequence[float | None] | None, n: int) -> list[float]:
    """asv's rule in ``detect_steps``: a missing weight is the median one, normalised."""
    if weights is None:
        return [1.0] * n
    valid = [x for x in weights if x is not None and math.isfinite(x) and x > 0]
    mid = statistics.median(valid) if valid else 1.0
    return [(x if x is not None and math.isfinite(x) and x > 0 else mid) / mid for x in weights]
