"""The one statistical policy: its numbers agree with each other, bad values are refused
naming the field, and the gate and the history detector read it rather than copies."""

import math
import statistics

import pytest

from harness.gate import calibrate, decide
from harness.policy import POLICY, Policy
from harness.suite.detector.threshold import noise_threshold


def test_the_quantiles_are_alphas_and_the_powers():
    normal = statistics.NormalDist()
    assert POLICY.z_alpha == pytest.approx(normal.inv_cdf(1 - POLICY.alpha / 2), abs=0.005)
    assert POLICY.z_power == pytest.approx(normal.inv_cdf(0.90), abs=0.005)
    assert POLICY.mad_to_sigma == pytest.approx(1 / normal.inv_cdf(0.75), abs=1e-4)


def test_the_gate_and_the_history_read_the_policy():
    assert (decide.DEFAULT_THRESHOLD, decide.PAIRED_THRESHOLD, decide.MAX_THRESHOLD) == (
        POLICY.floor,
        POLICY.paired_floor,
        POLICY.cap,
    )
    spread, mde = calibrate.spread_and_mde([1.0, 1.01, 0.99, 1.0, 1.02])
    assert mde == pytest.approx(POLICY.mde(math.sqrt(2) * spread))
    assert noise_threshold(0.01) == pytest.approx(POLICY.significant(0.01))


@pytest.mark.parametrize(
    "field, value, rule",
    [
        ("floor", 0.0, "Policy.floor=0.0: must be a fraction in (0, 1)"),
        ("alpha", 1.5, "Policy.alpha=1.5: must be a fraction in (0, 1)"),
        ("z_alpha", math.nan, "Policy.z_alpha=nan: must be a finite number > 0"),
        ("cap", 0.015, "floor=0.02 <= cap=0.015 must hold"),
    ],
)
def test_a_bad_policy_names_the_field_and_the_rule(field, value, rule):
    with pytest.raises(ValueError, match=rule.replace("(", r"\(").replace(")", r"\)")):
        Policy(**{field: value})
