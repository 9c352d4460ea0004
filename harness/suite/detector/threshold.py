"""Each benchmark's threshold in the history, by the project's one statistical policy
(``harness.policy.POLICY``): ``max(floor, calibration, noise_threshold(spread))``, the
spread read from the history itself or, for a short one, from the samples within runs.
``harness.suite.regressions`` tells the rule in full."""

from __future__ import annotations

import itertools
import math
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from harness.policy import POLICY
from harness.suite.series import Point, Series

MIN_HISTORY = 8  # commits before the history's own spread is trusted (7 differences)
MIN_COMMITS = 2  # a segment of the fit must hold this many commits to count as a level
SOURCES = ("calibration", "history", "samples", "floor")


@dataclass(frozen=True, slots=True)
class Threshold:
    value: float  # the slowdown that counts, as a fraction (0.02 = 2%)
    spread: float | None  # run-to-run relative standard deviation it was derived from
    source: str  # one of SOURCES


def history_spread(values: Sequence[float]) -> float | None:
    """Run-to-run relative sd of one commit's value, from consecutive commits' log ratios
    (robust: a step moves one difference, the median does not follow it)."""
    if len(values) < MIN_HISTORY:
        return None
    diffs = [math.log(b / a) for a, b in itertools.pairwise(values)]
    mid = statistics.median(diffs)
    return POLICY.robust_sd(statistics.median(abs(d - mid) for d in diffs)) / math.sqrt(2)


def samples_spread(points: Iterable[Point]) -> float | None:
    """Median over commits of the relative standard error of each commit's median."""
    from harness.measure.metrics import median_rsd

    rsd = [median_rsd(p.samples) for p in points if len(p.samples) > 2]
    rsd = [x for x in rsd if math.isfinite(x)]
    return statistics.median(rsd) if rsd else None


def noise_threshold(spread: float) -> float:
    """The smallest significant step between two levels of ``MIN_COMMITS`` commits each,
    one commit's relative spread being ``spread``."""
    return POLICY.significant(math.sqrt(2 / MIN_COMMITS) * spread)


def threshold_for(
    series: Series, calibration: Mapping[str, Mapping], floor: float = POLICY.floor
) -> Threshold:
    """The benchmark's threshold, ``max(floor, calibration, noise_threshold(spread))``, and
    the term that set it (see the module's docstring)."""
    terms = [Threshold(floor, None, "floor")]
    entry = calibration.get(series.combination)
    if entry is not None:
        terms.append(Threshold(float(entry["threshold"]), entry.get("spread"), "calibration"))
    for source, spread in (
        ("history", history_spread([p.value for p in series.points])),
        ("samples", samples_spread(series.points)),
    ):
        if spread is not None:
            terms.append(Threshold(noise_threshold(spread), spread, source))
            break
    return max(terms, key=lambda t: t.value)  # a tie goes to the earlier term
