"""Tests of the PR performance gate's decision logic on fresh random samples (CPU only)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from harness.gate.decide import (
    NOISY,
    BenchSamples,
    Verdict,
    decide,
    decide_all,
    exit_code,
)

SEEDS = range(10)
NAME = "gemm.TimeGemm.track_latency(m4096_n4096_k4096_f16, b128x128x32_t128_s3)"


def lat(rng: np.random.Generator, n: int, scale: float = 1.0, noise: float = 0.01) -> np.ndarray:
    """``n`` latencies around ``scale`` ms with multiplicative (log-normal) noise."""
    return 1e-3 * scale * rng.lognormal(0.0, noise, n)


def bench(
    rng: np.random.Generator,
    shift: float,
    *,
    n: int = 40,
    noise: float = 0.01,
    torch_shift: float | None = None,
    name: str = NAME,
) -> BenchSamples:
    """Kernel latencies with HEAD scaled by ``shift``; with ``torch_shift``, also per-sample
    latencies relative to a torch.matmul reference whose HEAD side is scaled by that."""
    base, head = lat(rng, n, noise=noise), lat(rng, n, shift, noise=noise)
    if torch_shift is None:
        return BenchSamples(name, tuple(base), tuple(head))
    torch_base = lat(rng, n, 0.9, noise=noise)
    torch_head = lat(rng, n, 0.9 * torch_shift, noise=noise)
    return BenchSamples(
        name,
        tuple(base),
        tuple(head),
        base_rel=tuple(base / torch_base),
        head_rel=tuple(head / torch_head),
    )


def verdict(name: str, status: str, ratio: float | None = 1.0, error: str = "") -> Verdict:
    return Verdict(
        name=name,
        status=status,
        base_median=None if ratio is None else 1e-3,
        head_median=None if ratio is None else 1e-3 * ratio,
        ratio=ratio,
        rel_ratio=ratio,
        p_value=None if ratio is None else 1e-6,
        ci_low=None if ratio is None else ratio * 0.99,
        ci_high=None if ratio is None else ratio * 1.01,
        threshold=0.05,
        reason=error or f"{status} for the test",
    )


# --- decide: the rule -------------------------------------------------------------------


@pytest.mark.parametrize("with_rel", [False, True])
@pytest.mark.parametrize("seed", range(50))
def test_identical_distributions_never_flag(seed: int, with_rel: bool) -> None:
    rng = np.random.default_rng(seed)
    n = int(rng.integers(30, 61))
    v = decide(bench(rng, 1.0, n=n, torch_shift=1.0 if with_rel else None))
    assert v.status == "unchanged", v.reason
    assert v.ratio == pytest.approx(1.0, abs=0.02)


@pytest.mark.parametrize("with_rel", [False, True])
@pytest.mark.parametrize("seed", SEEDS)
def test_clear_slowdown_is_regression(seed: int, with_rel: bool) -> None:
    rng = np.random.default_rng(seed)
    v = decide(bench(rng, 1.10, torch_shift=1.0 if with_rel else None))
    assert v.status == "regression", v.reason
    assert v.ratio == pytest.approx(1.10, abs=0.02)
    assert v.p_value is not None and v.p_value < 0.002
    assert v.ci_low is not None and v.ci_high is not None
    assert 1.0 < v.ci_low <= v.ratio <= v.ci_high
    if with_rel:
        assert v.rel_ratio == pytest.approx(1.10, abs=0.02)
    else:
        assert v.rel_ratio is None
        assert "no torch.matmul reference" in v.reason
    assert exit_code([v]) == 1


@pytest.mark.parametrize("with_rel", [False, True])
@pytest.mark.parametrize("seed", SEEDS)
def test_clear_speedup_is_improvement(seed: int, with_rel: bool) -> None:
    rng = np.random.default_rng(seed)
    v = decide(bench(rng, 1 / 1.10, torch_shift=1.0 if with_rel else None))
    assert v.status == "improvement", v.reason
    assert v.ratio == pytest.approx(1 / 1.10, abs=0.02)
    assert v.ci_high is not None and v.ci_high < 1.0
    assert exit_code([v]) == 0


@pytest.mark.parametrize("shift", [1.03, 1 / 1.03])
@pytest.mark.parametrize("seed", SEEDS)
def test_small_significant_shift_within_threshold_is_unchanged(seed: int, shift: float) -> None:
    rng = np.random.default_rng(seed)
    v = decide(bench(rng, shift), threshold=0.05)
    # The shift is real and significant: only the threshold keeps it from flagging.
    assert v.p_value is not None and v.p_value < 0.002
    assert v.status == "unchanged", v.reason
    assert "within 5% threshold" in v.reason


@pytest.mark.parametrize("seed", SEEDS)
def test_same_shift_flags_under_a_lower_threshold(seed: int) -> None:
    rng = np.random.default_rng(seed)
    assert decide(bench(rng, 1.03), threshold=0.02).status == "regression"
    assert decide(bench(rng, 1.03)).threshold == 0.02  # the gate's default floor


@pytest.mark.parametrize(
    ("side", "factor"),
    [("base", 10.0), ("head", 10.0), ("base", 0.05), ("head", 0.05)],
)
@pytest.mark.parametrize("seed", SEEDS)
def test_single_wild_outlier_does_not_flag(seed: int, side: str, factor: float) -> None:
    rng = np.random.default_rng(seed)
    # A real but sub-threshold 3% shift in the direction the outlier pushes: a mean would
    # add the outlier's ~30% on top and cross the threshold; the median must not.
    pushes_up = (side == "head") == (factor > 1)
    s = bench(rng, 1.03 if pushes_up else 1 / 1.03, n=30)
    samples = list(getattr(s, side))
    samples[int(rng.integers(len(samples)))] *= factor
    s = BenchSamples(s.name, **{"base": s.base, "head": s.head, side: tuple(samples)})
    v = decide(s, threshold=0.05)
    assert v.status == "unchanged", v.reason
    assert v.ratio == pytest.approx(1.03 if pushes_up else 1 / 1.03, abs=0.015)


@pytest.mark.parametrize("shift", [1.10, 1 / 1.10])
@pytest.mark.parametrize("seed", SEEDS)
def test_shift_also_seen_by_torch_reference_is_clock_drift(seed: int, shift: float) -> None:
    rng = np.random.default_rng(seed)
    v = decide(bench(rng, shift, torch_shift=shift))
    assert v.p_value is not None and v.p_value < 0.002
    assert v.rel_ratio == pytest.approx(1.0, abs=0.02)
    assert v.status == "unchanged", v.reason
    assert "relative to torch.matmul (clock drift?)" in v.reason


@pytest.mark.parametrize("missing", ["base_rel", "head_rel"])
def test_rel_samples_on_one_side_only_decide_on_raw_latency(missing: str) -> None:
    rng = np.random.default_rng(7)
    s = bench(rng, 1.10, torch_shift=1.10)
    s = BenchSamples(
        s.name, s.base, s.head, **{"base_rel": s.base_rel, "head_rel": s.head_rel, missing: ()}
    )
    v = decide(s)
    assert v.rel_ratio is None
    assert v.status == "regression"
    assert "no torch.matmul reference" in v.reason


@pytest.mark.parametrize("seed", range(20))
def test_big_but_noisy_shift_is_not_significant(seed: int) -> None:
    rng = np.random.default_rng(seed)
    base, head = lat(rng, 40, noise=0.3), lat(rng, 40, noise=0.3)
    # Pin the median ratio at +8% so that only the significance test can stop it.
    head *= 1.08 * np.median(base) / np.median(head)
    v = decide(BenchSamples(NAME, tuple(base), tuple(head)))
    assert v.ratio == pytest.approx(1.08)
    assert v.p_value is not None and v.p_value >= 0.002
    assert v.status == "unchanged"
    assert "not significant (p=" in v.reason


def test_one_sample_per_side_is_never_significant() -> None:
    rng = np.random.default_rng(3)
    v = decide(bench(rng, 1.5, n=1))
    assert v.status == "unchanged"
    assert "too few samples for Mann-Whitney" in v.reason
    assert v.ci_high == math.inf


@pytest.mark.parametrize("seed", SEEDS)
def test_few_samples_fall_back_to_ci_overlap(seed: int) -> None:
    # 4 vs 4 samples cannot reach p < 0.002 (min p = 1/70): asv's CI check decides.
    rng = np.random.default_rng(seed)
    v = decide(bench(rng, 1.30, n=4))
    assert v.status == "regression"
    assert "99% CIs disjoint" in v.reason


def test_nan_repeats_are_ignored() -> None:
    rng = np.random.default_rng(11)
    s = bench(rng, 1.10)
    v = decide(BenchSamples(s.name, s.base + (math.nan,), s.head + (math.nan, math.nan)))
    assert v.status == "regression"


@pytest.mark.parametrize(
    ("base", "head", "error", "words"),
    [
        ((1e-3,) * 3, (1e-3,) * 3, "head: CompileError: boom", "head: CompileError: boom"),
        ((), (1e-3, 1.1e-3), None, "no samples on base"),
        ((1e-3, 1.1e-3), (), None, "no samples on head"),
        ((), (), None, "no samples on base or head"),
        ((math.nan, math.nan), (1e-3,), None, "no samples on base"),
    ],
)
def test_error_or_empty_side_is_failed(base, head, error, words) -> None:
    v = decide(BenchSamples(NAME, base, head, error=error))
    assert v.status == "failed"
    assert words in v.reason
    assert v.ratio is None and v.p_value is None
    assert exit_code([v]) == 2


def test_exit_codes() -> None:
    rng = np.random.default_rng(5)
    regression = decide(bench(rng, 1.10, name="slow"))
    improvement = decide(bench(rng, 1 / 1.10, name="fast"))
    unchanged = decide(bench(rng, 1.0, name="same"))
    failed = decide(BenchSamples("broken", head=(1e-3,)))
    assert [v.status for v in (regression, improvement, unchanged, failed)] == [
        "regression",
        "improvement",
        "unchanged",
        "failed",
    ]
    assert exit_code([unchanged, improvement]) == 0
    assert exit_code([]) == 0
    assert exit_code([unchanged, regression]) == 1
    assert exit_code([regression, failed, unchanged]) == 2
    assert exit_code(iter([failed])) == 2


@pytest.mark.parametrize("bad", [-0.01, math.nan, math.inf])
def test_invalid_threshold_is_rejected(bad: float) -> None:
    with pytest.raises(ValueError):
        decide(BenchSamples(NAME, (1e-3,), (1e-3,)), threshold=bad)


# --- decide_all: per-benchmark thresholds ----------------------------------------------------


@pytest.mark.parametrize("seed", SEEDS)
def test_override_cannot_go_below_floor(seed: int) -> None:
    rng = np.random.default_rng(seed)
    samples = [bench(rng, 1.03, name="a"), bench(rng, 1.03, name="b")]
    verdicts = decide_all(samples, threshold=0.05, thresholds={"a": 0.01})
    assert [v.threshold for v in verdicts] == [0.05, 0.05]
    assert [v.status for v in verdicts] == ["unchanged", "unchanged"]


@pytest.mark.parametrize("seed", SEEDS)
def test_override_raises_threshold_of_its_benchmark_only(seed: int) -> None:
    rng = np.random.default_rng(seed)
    samples = [bench(rng, 1.10, name="noisy"), bench(rng, 1.10, name="quiet")]
    verdicts = decide_all(
        samples, threshold=0.05, thresholds={"noisy": 0.15, "absent": 0.5}, cap=0.2
    )
    assert [v.name for v in verdicts] == ["noisy", "quiet"]
    assert [v.threshold for v in verdicts] == [0.15, 0.05]
    assert [v.status for v in verdicts] == ["unchanged", "regression"]
    assert "within 15% threshold" in verdicts[0].reason


def test_non_finite_override_is_rejected() -> None:
    with pytest.raises(ValueError, match="thresholds"):
        decide_all([BenchSamples("a", (1e-3,), (1e-3,))], thresholds={"a": math.nan})


def test_a_threshold_over_the_cap_is_reported_too_noisy_not_let_through() -> None:
    rng = np.random.default_rng(3)
    # A 20% slowdown that a 24.9% calibrated threshold would pass: over the 5% cap it is
    # reported as too noisy to gate, and the quiet benchmark is judged as ever.
    samples = [bench(rng, 1.20, name="noisy"), bench(rng, 1.20, name="quiet")]
    verdicts = decide_all(samples, threshold=0.02, thresholds={"noisy": 0.249})
    assert [v.status for v in verdicts] == [NOISY, "regression"]
    assert "24.9%" in verdicts[0].reason and "5% cap" in verdicts[0].reason
    assert verdicts[0].threshold == pytest.approx(0.249)
    # Up to the cap a calibrated threshold applies as it is.
    at_cap = decide_all([bench(rng, 1.20, name="noisy")], thresholds={"noisy": 0.05})
    assert at_cap[0].status == "regression" and at_cap[0].threshold == 0.05


def _paired(ratios, name="p"):
    return BenchSamples(name, (1e-3,) * 10, (1e-3,) * 10, ratios=tuple(ratios))


def test_paired_ratios_decide_with_their_confidence_interval() -> None:
    rng = np.random.default_rng(5)
    slow = _paired(1.02 + rng.normal(0, 0.002, 10))
    v = decide(slow, threshold=0.01)
    assert v.status == "regression" and v.ratio == pytest.approx(1.02, abs=0.003)
    assert v.ci_low > 1 and "paired trials" in v.reason
    assert decide(_paired(1.0 + rng.normal(0, 0.002, 10)), threshold=0.01).status == "unchanged"
    assert decide(_paired(0.97 + rng.normal(0, 0.002, 10)), threshold=0.01).status == (
        "improvement"
    )


def test_paired_shift_past_threshold_but_straddling_one_is_not_significant() -> None:
    # Median 1.015 but trials on both sides of 1: the 99% CI holds 1, so nothing is flagged.
    v = decide(_paired([0.99, 1.015, 1.02, 1.03, 1.015, 0.995, 1.016, 1.014, 1.018, 1.012]), 0.01)
    assert v.ratio > 1.01 and v.status == "unchanged" and "not significant" in v.reason


def test_paired_without_valid_ratios_fails() -> None:
    assert decide(_paired([math.nan, math.nan])).status == "failed"
