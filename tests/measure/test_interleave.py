"""The launch-by-launch interleaving's bookkeeping on the CPU (the timing needs a GPU)."""

import pytest

from harness.measure import interleave


@pytest.mark.parametrize("n", [1, 2, 3])
def test_every_trial_puts_each_function_in_each_position_equally(n):
    launches = 6  # the default: 2! and 3! divide it
    for trial in range(3):
        positions = {f: [] for f in range(n)}
        for j in range(launches):
            for pos, f in enumerate(interleave.launch_order(n, trial, j, launches)):
                positions[f].append(pos)
        for f in range(n):
            assert sorted(positions[f]) == sorted(p for p in range(n) for _ in range(6 // n))


def test_no_function_always_follows_the_same_one():
    # Three sides (the self-test): within a slot each function follows each other one as
    # often as it precedes it; a fixed rotation (0, 1, 2), (1, 2, 0), ... never does.
    follows = {}
    for j in range(6):
        order = interleave.launch_order(3, 0, j)
        for before, after in zip(order, order[1:], strict=False):
            follows[(before, after)] = follows.get((before, after), 0) + 1
    assert len(follows) == 6 and len(set(follows.values())) == 1


def test_trial_ratios_are_medians_over_the_reference():
    samples = [[[1.0, 1.0, 9.0], [2.0, 2.0, 2.0]], [[1.1, 1.1, 0.1], [2.2, 2.0, 2.2]]]
    assert interleave.trial_ratios(samples) == [[1.0, 1.0], pytest.approx([1.1, 1.1])]


@pytest.mark.parametrize("field, value", [("trials", 0), ("launches", 1.5), ("warmup", -1)])
def test_bad_counts_name_the_field(field, value):
    counts = {"trials": 1, "launches": 1, "warmup": 0, field: value}
    with pytest.raises(ValueError, match=field):
        interleave.check_counts(**counts)


def test_short_kernels_get_more_launches_a_trial():
    flush = 0.1  # ms: the 256 MB rewrite before every launch on the H200
    short, mid, large = (interleave.launches_for(ms, flush) for ms in (0.009, 0.05, 2.0))
    assert large == interleave.LAUNCH_ROUND  # a 2 ms GEMM: one round of every order
    assert short > mid > large
    assert short <= interleave.MAX_TRIAL_LAUNCHES
    for n in (short, mid, large):
        assert n % interleave.LAUNCH_ROUND == 0  # every order of 2 or 3 sides, equally often
    # Within the budget: one more round would pass it.
    per = 0.05 + flush
    assert mid * per <= interleave.TRIAL_BUDGET_MS < (mid + interleave.LAUNCH_ROUND) * per
    assert interleave.launches_for(1e-6, 0.0) == interleave.MAX_TRIAL_LAUNCHES


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"kernel_ms": -1.0, "flush_ms": 0.1}, "kernel_ms"),
        ({"kernel_ms": 0.01, "flush_ms": float("nan")}, "flush_ms"),
        ({"kernel_ms": 0.0, "flush_ms": 0.0}, "kernel_ms \\+ flush_ms"),
        ({"kernel_ms": 0.01, "flush_ms": 0.1, "budget_ms": -2}, "budget_ms"),
    ],
)
def test_launches_for_names_the_bad_field(kwargs, field):
    with pytest.raises(ValueError, match=field):
        interleave.launches_for(**kwargs)
