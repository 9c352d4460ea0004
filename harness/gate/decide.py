"""Decision logic of the PR performance gate: BASE vs HEAD benchmark samples in, verdicts
and an exit code out (``harness.report.gate`` turns them into markdown).

Pure: no GPU, no subprocess, no file IO. The samples come from BASE and HEAD measured
interleaved on the same GPU; the statistics are asv's own (``asv._stats`` for the
Mann-Whitney test and its CI-overlap fallback, ``asv_runner.statistics.compute_stats`` for
medians and their 99% confidence intervals), so the gate and ``asv compare`` agree on what
"significant" means.

A benchmark is a regression only when all of these hold:

1. the median slowed down by more than the threshold (``head/base > 1 + threshold``);
2. the difference is significant (asv's ``is_different``: Mann-Whitney ``p < p_threshold``
   when the sample counts can reach it, otherwise non-overlapping 99% CIs);
3. when both sides carry latencies relative to ``torch.matmul`` measured in the same
   process, that relative median slowed down by more than the threshold as well, so a GPU
   that clocked down for HEAD's rounds (slowing torch and the kernel alike) passes.

Samples measured paired (``harness/gate/worker/paired.py``: both revisions' kernels in one
process, launched in turn) carry per-trial ratios ``head/base`` instead, and the rule
reads them: the median ratio beyond the threshold, and significant when the 99%
confidence interval of that median (``compute_stats``) excludes 1. Drift cannot reach
one side alone there, so no torch.matmul check is needed, and the threshold can be lower
(``PAIRED_THRESHOLD``).

Improvements are the mirror image (``ratio < 1 / (1 + threshold)``). A benchmark whose
calibrated threshold is above ``MAX_THRESHOLD`` is not gated: it is reported as too noisy
rather than allowed a slowdown that large. Everything else is unchanged; an empty side,
or a build/run error, is failed. A benchmark that exists on one
revision only is reported as new (added by HEAD) or removed (dropped by HEAD), and fails
nothing: a PR that adds or renames a benchmark has no base to compare it with.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from asv import _stats
from asv_runner.statistics import compute_stats

from harness.cli import EXIT_FAILURE, EXIT_OK, EXIT_REGRESSION
from harness.policy import (
    FAILED,
    IMPROVEMENT,
    NEW,
    NOISY,
    POLICY,
    REGRESSION,
    REMOVED,
    UNCHANGED,
)

# The rule's numbers live in harness.policy; these are its names in the gate. The slowdown
# that counts unless a calibration raises it for a noisy benchmark; the same for paired
# samples; the most a calibration may raise it to.
DEFAULT_THRESHOLD = POLICY.floor
PAIRED_THRESHOLD = POLICY.paired_floor
MAX_THRESHOLD = POLICY.cap


@dataclass(frozen=True, slots=True)
class BenchSamples:
    """Samples of one benchmark on both revisions (latencies in seconds)."""

    name: str
    base: tuple[float, ...] = ()
    head: tuple[float, ...] = ()
    # Kernel latency over torch.matmul latency measured in the same process.
    base_rel: tuple[float, ...] = ()
    head_rel: tuple[float, ...] = ()
    # Set when the benchmark failed to build or run on either side ("head: CompileError: ...").
    error: str | None = None
    # "base" or "head": the revision that does not have this benchmark at all.
    missing: str | None = None
    # Paired measurement: head/base, one ratio per trial of launches in turn
    # (of the launches' means, strays left out: ``interleave.trial_center``).
    ratios: tuple[float, ...] = ()


@dataclass(frozen=True, slots=True)
class Verdict:
    """The gate's decision on one benchmark, with the numbers that led to it.

    ``ci_low``/``ci_high`` bound ``head/base`` from the two medians' 99% CIs of
    ``compute_stats``, taking the worst corners: ``[head_lo / base_hi, head_hi / base_lo]``.
    Every ratio of a base median and a head median inside their intervals lies in it, so
    it covers the true ratio whenever both intervals cover their medians: at least 98%
    by the union bound, and in practice wider than an exact 99% interval would be.
    The lower bound is clipped at 0 and the upper one is ``inf`` when base's interval
    reaches 0 or either interval is unbounded (one sample on a side).
    """

    name: str
    status: str
    base_median: float | None
    head_median: float | None
    ratio: float | None
    rel_ratio: float | None
    p_value: float | None
    ci_low: float | None
    ci_high: float | None
    threshold: float
    reason: str


def _finite(samples: Iterable[float]) -> list[float]:
    # asv records a failed repeat as NaN; it is not a latency.
    return [float(x) for x in samples if math.isfinite(x)]


def _pct(ratio: float) -> str:
    return f"{(ratio - 1.0) * 100:+.1f}%"


def _ratio_ci(
    base_stats: Mapping[str, float], head_stats: Mapping[str, float]
) -> tuple[float, float]:
    base_lo, base_hi = base_stats["ci_99_a"], base_stats["ci_99_b"]
    head_lo, head_hi = head_stats["ci_99_a"], head_stats["ci_99_b"]
    low = max(head_lo, 0.0) / base_hi if math.isfinite(base_hi) and base_hi > 0 else 0.0
    high = head_hi / base_lo if math.isfinite(head_hi) and base_lo > 0 else math.inf
    return low, high


def _check_threshold(threshold: float, p_threshold: float) -> None:
    if not (math.isfinite(threshold) and threshold >= 0):
        raise ValueError(f"threshold={threshold!r}: must be a finite fraction >= 0")
    if not 0 < p_threshold <= 1:
        raise ValueError(f"p_threshold={p_threshold!r}: must be in (0, 1]")


def _uncompared(
    s: BenchSamples,
    base: Sequence[float],
    head: Sequence[float],
    threshold: float,
    reason: str,
    status: str = FAILED,
) -> Verdict:
    """A verdict without a comparison: failed, or (``status``) new or removed."""
    return Verdict(
        name=s.name,
        status=status,
        base_median=statistics.median(base) if base else None,
        head_median=statistics.median(head) if head else None,
        ratio=None,
        rel_ratio=None,
        p_value=None,
        ci_low=None,
        ci_high=None,
        threshold=threshold,
        reason=reason,
    )


def _rel_ratio(s: BenchSamples) -> float | None:
    base_rel, head_rel = _finite(s.base_rel), _finite(s.head_rel)
    if not base_rel or not head_rel:
        return None
    base_med = statistics.median(base_rel)
    if base_med <= 0:
        return None
    return statistics.median(head_rel) / base_med


def decide(
    s: BenchSamples, threshold: float = DEFAULT_THRESHOLD, p_threshold: float = POLICY.alpha
) -> Verdict:
    """Verdict on one benchmark; see the module docstring for the rule."""
    _check_threshold(threshold, p_threshold)
    base, head = _finite(s.base), _finite(s.head)

    if s.error:
        return _uncompared(s, base, head, threshold, f"benchmark error: {s.error}")
    if s.missing == "base":
        return _uncompared(s, base, head, threshold, "added by head: no base to compare with", NEW)
    if s.missing == "head":
        return _uncompared(s, base, head, threshold, "not in head any more", REMOVED)
    empty = [side for side, xs in (("base", base), ("head", head)) if not xs]
    if empty:
        return _uncompared(s, base, head, threshold, f"no samples on {' or '.join(empty)}")

    if s.ratios:
        return _decide_paired(s, base, head, threshold)

    base_median, base_stats = compute_stats(base, 1)
    head_median, head_stats = compute_stats(head, 1)
    if base_median <= 0:
        return _uncompared(s, base, head, threshold, f"base median {base_median!r} is not positive")

    ratio = head_median / base_median
    rel_ratio = _rel_ratio(s)
    _, p_value = _stats.mann_whitney_u(base, head)
    ci_low, ci_high = _ratio_ci(base_stats, head_stats)

    # is_different() decides; whether it could use Mann-Whitney only changes the wording.
    significant = _stats.is_different(base, head, base_stats, head_stats, p_threshold)
    p_min = 1 / _stats.binom(len(base) + len(head), min(len(base), len(head)))
    if p_min < p_threshold:
        evidence = f"p={p_value:.2g}"
    else:
        overlap = "disjoint" if significant else "overlap"
        evidence = f"99% CIs {overlap}; too few samples for Mann-Whitney"

    slower = ratio > 1 + threshold
    faster = ratio < 1 / (1 + threshold)
    limit = f"{threshold * 100:g}% threshold"

    change = _pct(ratio)
    flagged = REGRESSION if slower else IMPROVEMENT
    if not (slower or faster):
        status, reason = UNCHANGED, f"{change}, within {limit}"
    elif not significant:
        status, reason = UNCHANGED, f"{change} but not significant ({evidence})"
    elif rel_ratio is None:
        status = flagged
        reason = f"{change}, significant ({evidence}); no torch.matmul reference to check drift"
    elif (slower and rel_ratio > 1 + threshold) or (faster and rel_ratio < 1 / (1 + threshold)):
        status = flagged
        reason = f"{change}, significant ({evidence}); {_pct(rel_ratio)} vs torch.matmul"
    else:
        status = UNCHANGED
        reason = f"{change} but only {_pct(rel_ratio)} relative to torch.matmul (clock drift?)"

    return Verdict(
        name=s.name,
        status=status,
        base_median=base_median,
        head_median=head_median,
        ratio=ratio,
        rel_ratio=rel_ratio,
        p_value=p_value,
        ci_low=ci_low,
        ci_high=ci_high,
        threshold=threshold,
        reason=reason,
    )


def _decide_paired(
    s: BenchSamples, base: Sequence[float], head: Sequence[float], threshold: float
) -> Verdict:
    ratios = _finite(s.ratios)
    if not ratios or min(ratios) <= 0:
        return _uncompared(s, base, head, threshold, "no valid paired ratios")
    ratio, stats = compute_stats(ratios, 1)
    low, high = stats["ci_99_a"], stats["ci_99_b"]
    significant = low > 1 or high < 1
    evidence = f"99% CI [{low:.4f}, {high:.4f}] over {len(ratios)} paired trials"
    change, limit = _pct(ratio), f"{threshold * 100:g}% threshold"
    slower, faster = ratio > 1 + threshold, ratio < 1 / (1 + threshold)
    if not (slower or faster):
        status, reason = UNCHANGED, f"{change}, within {limit}"
    elif not significant:
        status, reason = UNCHANGED, f"{change} but not significant ({evidence})"
    else:
        status = REGRESSION if slower else IMPROVEMENT
        reason = f"{change}, significant ({evidence})"
    return Verdict(
        name=s.name,
        status=status,
        base_median=statistics.median(base) if base else None,
        head_median=statistics.median(head) if head else None,
        ratio=ratio,
        rel_ratio=None,
        p_value=None,
        ci_low=low,
        ci_high=high,
        threshold=threshold,
        reason=reason,
    )


def too_noisy(s: BenchSamples, threshold: float, cap: float) -> Verdict:
    """The verdict on a benchmark whose calibrated threshold exceeds ``cap``: not gated."""
    base, head = _finite(s.base), _finite(s.head)
    reason = (
        f"calibration needs a {threshold:.1%} threshold, above the {cap:.0%} cap: not gated; "
        "fix the noise (or re-calibrate) to gate it again"
    )
    return _uncompared(s, base, head, threshold, reason, NOISY)


def decide_all(
    samples: Iterable[BenchSamples],
    threshold: float = DEFAULT_THRESHOLD,
    thresholds: Mapping[str, float] | None = None,
    p_threshold: float = POLICY.alpha,
    cap: float = MAX_THRESHOLD,
) -> list[Verdict]:
    """Verdicts in input order. ``thresholds`` holds per-benchmark overrides (from
    calibration of noisy benchmarks); ``threshold`` is a floor they can raise, never lower,
    and ``cap`` the most they may raise it to: beyond it the benchmark is too noisy."""
    _check_threshold(threshold, p_threshold)
    overrides = thresholds or {}
    verdicts = []
    for s in samples:
        override = overrides.get(s.name, threshold)
        if not math.isfinite(override):
            # A broken calibration file must be loud, not silently fall back to the floor.
            raise ValueError(f"thresholds[{s.name!r}]={override!r}: must be finite")
        limit = max(threshold, override)
        if limit > cap and not s.error and not s.missing:
            verdicts.append(too_noisy(s, limit, cap))
        else:
            verdicts.append(decide(s, limit, p_threshold))
    return verdicts


def exit_code(verdicts: Iterable[Verdict]) -> int:
    """EXIT_FAILURE if any benchmark failed, else EXIT_REGRESSION if any regressed, else
    EXIT_OK."""
    statuses = {v.status for v in verdicts}
    if FAILED in statuses:
        return EXIT_FAILURE
    if REGRESSION in statuses:
        return EXIT_REGRESSION
    return EXIT_OK
