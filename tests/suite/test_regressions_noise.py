"""The history detector's false-alarm and detection rates on synthetic histories, through
its real path (asv's results files, ``harness.suite.detector.find.find``): pure
run-to-run noise must not raise an alarm, whatever a calibration file says, and a step a
few times the noise must be found. Seeded, so the counts are the same on every run."""

import random
import statistics

import pytest

from harness.policy import POLICY
from harness.suite.detector.find import find
from harness.suite.detector.threshold import (
    Threshold,
    history_spread,
    noise_threshold,
    threshold_for,
)
from harness.suite.series import load_history
from tests.suite.test_regressions import _commits, store

MACHINE = "noisegpu"
KEY = "gemm.Synthetic.track_latency"
N_COMMITS = 30
STEP_AT = 20  # the first commit after the step
NOISE = 0.005  # run-to-run: each commit's value, relative sd
WITHIN = 0.001  # each run's samples around its value
SAMPLES = 5


def _history(tmp_path, n_series, step, seed):
    """``n_series`` independent histories of one benchmark (one parameter value each) over
    one repository's N_COMMITS, a ``step`` factor from STEP_AT on; their shas."""
    rng = random.Random(seed)
    shas = _commits(tmp_path / "repo", N_COMMITS)
    levels = [
        [
            1e-3 * (step if i >= STEP_AT else 1.0) * (1 + rng.gauss(0, NOISE))
            for i in range(N_COMMITS)
        ]
        for _ in range(n_series)
    ]
    for i, sha in enumerate(shas):
        rows = {
            (KEY, str(j)): [lv[i] * (1 + rng.gauss(0, WITHIN)) for _ in range(SAMPLES)]
            for j, lv in enumerate(levels)
        }
        store(
            tmp_path / "results",
            MACHINE,
            sha,
            1_700_000_000_000 + i * 60_000,
            rows,
            {KEY: "seconds"},
        )
    return shas


def _calibration(n_series, threshold):
    """A calibration file's table naming every series, as the paired gate writes it."""
    return {
        f"gemm.Synthetic({j})": {"threshold": threshold, "spread": threshold / 5}
        for j in range(n_series)
    }


# The paired gate's calibration sits at its own floor, 1%: under the history's.
CALIBRATED = pytest.mark.parametrize("calibrated", [False, True], ids=["history", "calibrated"])


@CALIBRATED
def test_pure_noise_raises_no_alarm_in_200_series(tmp_path, calibrated):
    shas = _history(tmp_path, 200, step=1.0, seed=20261201)
    calibration = _calibration(200, POLICY.paired_floor) if calibrated else {}
    found = find(tmp_path / "results", MACHINE, shas, calibration=calibration)
    assert found == []
    series, _ = load_history(tmp_path / "results", MACHINE, shas)
    limits = [threshold_for(s, calibration) for s in series]
    assert len(limits) == 200 and min(t.value for t in limits) >= POLICY.floor


@CALIBRATED
def test_a_step_of_three_percent_is_found_in_95_of_100(tmp_path, calibrated):
    shas = _history(tmp_path, 100, step=1.03, seed=20261202)
    calibration = _calibration(100, POLICY.paired_floor) if calibrated else {}
    found = find(tmp_path / "results", MACHINE, shas, calibration=calibration)
    placed = [r for r in found if (r.good, r.bad) == (shas[STEP_AT - 1], shas[STEP_AT])]
    assert len(placed) >= 95, f"{len(placed)} of 100 found at the step ({len(found)} in all)"
    assert statistics.median(r.ratio for r in placed) == pytest.approx(1.03, abs=0.005)


def test_the_threshold_is_the_largest_of_floor_calibration_and_noise(tmp_path):
    shas = _history(tmp_path, 3, step=1.0, seed=20261203)
    a, b, c = load_history(tmp_path / "results", MACHINE, shas)[0]
    spread = history_spread([p.value for p in a.points])
    noise = noise_threshold(spread)
    assert noise == pytest.approx(POLICY.z_alpha * spread)  # two levels of MIN_COMMITS = 2
    assert threshold_for(a, {}) == Threshold(
        max(POLICY.floor, noise),
        *((spread, "history") if noise > POLICY.floor else (None, "floor")),
    )
    low = {b.combination: {"threshold": 0.001, "spread": 0.0002}}
    assert threshold_for(b, low).source != "calibration"
    high = {c.combination: {"threshold": 0.045, "spread": 0.009}}
    assert threshold_for(c, high) == Threshold(0.045, 0.009, "calibration")
    assert threshold_for(c, {}, floor=0.06) == Threshold(0.06, None, "floor")
