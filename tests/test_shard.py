"""The multi-GPU sharding plan, on the CPU: stable, balanced, every benchmark once."""

import re

import pytest

from harness.shard import asv_regex, combinations, parse_gpus, plan


def _names(n):
    return [f"gemm.Stage('{i}x{i}x{i}', 128, 3, 'f16')" for i in range(n)]


@pytest.mark.parametrize(
    "n_names, gpus", [(52, [0, 1]), (53, [0, 1, 2]), (7, [0, 1, 2, 3]), (0, [0, 1])]
)
def test_every_benchmark_exactly_once_and_balanced(n_names, gpus):
    names = _names(n_names)
    shards = plan(names, gpus)
    assigned = [n for shard in shards.values() for n in shard]
    assert sorted(assigned) == sorted(names)
    sizes = [len(s) for s in shards.values()]
    capacity = -(-len(names) // len(gpus))
    assert max(sizes) <= capacity
    assert min(sizes) >= len(names) - (len(gpus) - 1) * capacity


def test_plan_is_stable_across_runs_and_input_order():
    names = _names(52)
    assert plan(names, [0, 1]) == plan(list(reversed(names)), [0, 1])


def test_adding_a_benchmark_moves_few_others():
    before = plan(_names(52), [0, 1])
    after = plan(_names(53), [0, 1])
    where = {n: g for g, shard in before.items() for n in shard}
    moved = [n for g, shard in after.items() for n in shard if n in where and where[n] != g]
    assert len(moved) <= 3


def test_suite_combinations_and_their_asv_patterns():
    combos = combinations("asv_bench.gemm")
    assert len(combos) >= 48 and len(set(combos)) == len(combos)
    combo = "gemm.Stage('4096x4096x4096', 128, 3, 'f16')"
    assert combo in combos
    pattern = asv_regex(combo)
    assert re.search(pattern, "gemm.Stage.track_latency('4096x4096x4096', 128, 3, 'f16')")
    assert re.search(pattern, "gemm.Stage.track_vs_torch('4096x4096x4096', 128, 3, 'f16')")
    assert not re.search(pattern, "gemm.Stage.track_latency('4096x4096x4096', 128, 3, 'bf16')")


@pytest.mark.parametrize(
    "text, visible, expected", [("all", 2, [0, 1]), ("1", 2, [1]), ("0,1", 4, [0, 1])]
)
def test_parse_gpus(text, visible, expected):
    assert parse_gpus(text, visible) == expected


@pytest.mark.parametrize(
    "text, visible, message",
    [("all", 0, "no CUDA device"), ("2", 2, "0..1"), ("x", 2, "indices like"), ("", 2, "0..1")],
)
def test_parse_gpus_rejects(text, visible, message):
    with pytest.raises(ValueError, match=message):
        parse_gpus(text, visible)


def test_plan_rejects_bad_gpu_lists():
    with pytest.raises(ValueError, match="at least one"):
        plan(["a"], [])
    with pytest.raises(ValueError, match="distinct"):
        plan(["a"], [0, 0])
