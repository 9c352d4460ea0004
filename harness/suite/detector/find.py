"""The regressions among one machine's series: each series' threshold
(``threshold.threshold_for``) and latest step (``steps.latest_step``); a step that is a
slowdown beyond the threshold is a ``Regression``."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

from harness.policy import POLICY
from harness.suite import series as history_series
from harness.suite.detector.inputs import load_calibration, select
from harness.suite.detector.records import Regression
from harness.suite.detector.steps import latest_step
from harness.suite.detector.threshold import MIN_COMMITS, threshold_for
from harness.suite.series import Series


def detect(
    series: Iterable[Series],
    machine: str,
    calibration: Mapping[str, Mapping] | None = None,
    floor: float = POLICY.floor,
    min_commits: int = MIN_COMMITS,
) -> list[Regression]:
    """The regressions among ``series`` of ``machine``."""
    found = []
    for s in series:
        limit = threshold_for(s, calibration or {}, floor)
        values = [p.value for p in s.points]
        step = latest_step(values, [p.weight for p in s.points], limit.value, min_commits)
        if step is None or step.ratio <= 1 + limit.value:
            continue
        found.append(
            Regression(
                benchmark=s.name,
                machine=machine,
                good=s.points[step.last_before].commit,
                bad=s.points[step.first_after].commit,
                before=step.before,
                after=step.after,
                unit=s.unit,
                threshold=limit.value,
                spread=limit.spread,
                threshold_source=limit.source,
                commits_after=step.points_after,
            )
        )
    return found


def find(
    results_dir: Path,
    machine: str,
    commits: Sequence[str] | None = None,
    *,
    bench: str | None = None,
    calibration: Mapping[str, Mapping] | None = None,
    floor: float = POLICY.floor,
    min_commits: int = MIN_COMMITS,
) -> list[Regression]:
    """The benchmarks of ``machine`` whose latest step in ``results_dir`` is a slowdown.

    ``commits``: the branch, oldest first (``commit_order()``); None orders by the results'
    dates. ``calibration``: the ``benchmarks`` table of the machine's calibration file
    (None: ``calibration/<machine>.json`` where it exists)."""
    if calibration is None:
        from harness.revisions.calibration import calibration_path

        calibration = load_calibration(calibration_path(machine))
    series, _ = history_series.load_history(results_dir, machine, commits)
    return detect(select(series, bench), machine, calibration, floor, min_commits)
