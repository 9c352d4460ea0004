"""The statistical policy of the whole project, as one frozen value: what counts as a
slowdown in the PR gate (``harness.gate.decide``), in its calibration
(``harness.gate.calibrate``), in its self-test and in the history detector
(``harness.suite.regressions``). Each of them reads ``POLICY``; none keeps its own copy.

The rule, once:

- significance: two-sided ``alpha`` (asv's Mann-Whitney ``p < 0.002``), whose normal
  quantile is ``z_alpha``; power 90%, quantile ``z_power``;
- spread: robust, the median absolute deviation scaled to a normal's sigma
  (``mad_to_sigma``), relative to the median;
- a shift is significant when it clears ``k`` standard deviations of the difference it
  is read from, ``k = z_alpha`` (``significant``); the smallest shift detected with that
  power is ``(z_alpha + z_power) * sd`` (``mde``), which the gate's calibration sets as a
  benchmark's threshold (one run's value is all it compares); the history detector
  compares levels of several commits each, whose length gives the power, and sets
  ``k * sd`` (``harness.suite.regressions``);
- floors: no threshold is below ``floor`` (the process gate and the history) or
  ``paired_floor`` (the paired gate, whose ratios cancel drift); a calibration or a
  spread can raise a threshold, never lower it;
- cap: a benchmark that would need more than ``cap`` is too noisy to gate.

What the rule concludes on a benchmark has one name each (``REGRESSION`` ... ``NOISY``):
the gate decides them (``harness.gate.decide``), its report renders them
(``harness.report.gate``). A bisect step's outcome (``GOOD``, ``BAD``, ``SKIP``) likewise:
bisect judges it (``harness.gate.bisection``), its report renders it
(``harness.report.bisection``).

Pure data and arithmetic: imports nothing from the project.
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Policy:
    alpha: float = 0.002  # two-sided significance: asv's Mann-Whitney p < 0.002
    z_alpha: float = 3.09  # the standard normal's 1 - alpha/2 quantile
    z_power: float = 1.28  # its 0.90 quantile: 90% power
    # The gate self-test on the H200 (reports/measurement_h200.md) measured the process
    # gate at 2%: no false alarm in 140 A/A verdicts, a 3% slowdown caught on small and
    # medium shapes. The history is judged no finer.
    floor: float = 0.02
    # Paired samples: the ratio's spread between processes is 0.1-0.3% on the H200 (the
    # gate self-test's A/A runs), so 1% is far outside noise and a 2% slowdown clears it.
    paired_floor: float = 0.01
    # Calibration may raise a threshold up to this and no further: a benchmark that needs
    # more is reported as too noisy, never silently let through.
    cap: float = 0.05
    mad_to_sigma: float = 1.4826  # a normal's sigma over its median absolute deviation
    # Paired: a benchmark whose A/A spread is over this gets more launches per trial, its
    # launch scale (calibration), up to max_launch_scale times the worker's own sizing. A
    # trial's ratio is of means, whose noise falls with the square root of the launches;
    # on the H200 Tuned(decode64, *) measured 0.30-0.36% at 48 launches a trial.
    spread_target: float = 0.002
    max_launch_scale: int = 8

    def __post_init__(self) -> None:
        for name in ("alpha", "floor", "paired_floor", "cap", "spread_target"):
            value = getattr(self, name)
            if not 0 < value < 1:
                raise ValueError(f"Policy.{name}={value!r}: must be a fraction in (0, 1)")
        for name in ("z_alpha", "z_power", "mad_to_sigma"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value > 0):
                raise ValueError(f"Policy.{name}={value!r}: must be a finite number > 0")
        if isinstance(self.max_launch_scale, bool) or not (
            isinstance(self.max_launch_scale, int) and self.max_launch_scale >= 1
        ):
            raise ValueError(
                f"Policy.max_launch_scale={self.max_launch_scale!r}: must be an integer >= 1"
            )
        if not self.paired_floor <= self.floor <= self.cap:
            raise ValueError(
                f"Policy: paired_floor={self.paired_floor!r} <= floor={self.floor!r} <= "
                f"cap={self.cap!r} must hold"
            )

    @property
    def k(self) -> float:
        """Standard deviations of a difference that a significant shift clears."""
        return self.z_alpha

    def significant(self, sd: float) -> float:
        """The smallest significant shift in a difference of standard deviation ``sd``."""
        return self.k * sd

    def mde(self, sd: float) -> float:
        """The smallest shift detected with the policy's power in a difference of standard
        deviation ``sd``."""
        return (self.z_alpha + self.z_power) * sd

    def launch_scale(self, spread: float, in_force: int = 1) -> int:
        """The launch scale of a paired benchmark whose A/A ``spread`` was measured at the
        scale ``in_force``: that one where the spread meets ``spread_target`` (a scale is
        never lowered by a quiet calibration, so it does not swing back and forth), else
        what brings the spread to the target, up to ``max_launch_scale``."""
        if spread <= self.spread_target:
            return in_force
        wanted = math.ceil(in_force * (spread / self.spread_target) ** 2)
        return max(in_force, min(self.max_launch_scale, wanted))

    def robust_sd(self, deviations_median: float) -> float:
        """A normal's sigma from the median absolute deviation of its sample."""
        return self.mad_to_sigma * deviations_median


POLICY = Policy()


# A benchmark's verdict in the gate: slower or faster beyond its threshold, neither, too
# noisy to gate (above the cap), failed to build or run, or on one revision only.
REGRESSION = "regression"
IMPROVEMENT = "improvement"
UNCHANGED = "unchanged"
FAILED = "failed"
NEW = "new"
REMOVED = "removed"
NOISY = "too noisy"

# A bisect step's outcome, as ``git bisect`` names it: the probed commit is as fast as GOOD,
# slower like BAD, or could not be judged (it failed to build or run).
GOOD = "good"
BAD = "bad"
SKIP = "skip"
