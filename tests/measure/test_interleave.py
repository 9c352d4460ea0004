"""The launch-by-launch interleaving's bookkeeping on the CPU (the timing needs a GPU)."""

import pytest

from harness.measure import interleave


@pytest.mark.parametrize("n", [1, 2, 3])
def test_rotation_puts_every_function_in_every_position_equally(n):
    launches = 6  # the default: a multiple of 2 and of 3
    for trial in range(3):
        positions = {f: [] for f in range(n)}
        for j in range(launches):
            for pos, f in enumerate(interleave.launch_order(n, trial, j)):
                positions[f].append(pos)
        for f in range(n):
            assert sorted(positions[f]) == sorted(p for p in range(n) for _ in range(6 // n))


def test_trial_ratios_are_medians_over_the_reference():
    samples = [[[1.0, 1.0, 9.0], [2.0, 2.0, 2.0]], [[1.1, 1.1, 0.1], [2.2, 2.0, 2.2]]]
    assert interleave.trial_ratios(samples) == [[1.0, 1.0], pytest.approx([1.1, 1.1])]


def test_host_bound_kernels_are_replayed_in_graphs_of_a_slot():
    assert interleave.graph_launches(1.5) == 1
    assert interleave.graph_launches(0.02) == 1
    assert interleave.graph_launches(0.008) == 25  # 0.2 ms of work per slot
    assert interleave.graph_launches(0.0) >= 2


@pytest.mark.parametrize("field, value", [("trials", 0), ("launches", 1.5), ("warmup", -1)])
def test_bad_counts_name_the_field(field, value):
    counts = {"trials": 1, "launches": 1, "warmup": 0, field: value}
    with pytest.raises(ValueError, match=field):
        interleave.check_counts(**counts)
