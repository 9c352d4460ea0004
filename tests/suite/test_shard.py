"""The multi-GPU sharding plan, on the CPU: stable, balanced, every class once."""

import random
import re
from pathlib import Path

import pytest

from harness.suite import discovery
from harness.suite.shard import (
    asv_regex,
    combination_weight,
    family_weights,
    parse_gpus,
    plan,
    suite_units,
)


def _weights(n, seed=0, low=0.5, high=20.0):
    rng = random.Random(seed)
    return {f"gemm.Family{i}": rng.uniform(low, high) for i in range(n)}


def _load(shards, weights):
    return {g: sum(weights[u] for u in units) for g, units in shards.items()}


@pytest.mark.parametrize(
    "n_units, gpus, low, high",
    [
        (5, [0, 1], 0.5, 20.0),
        (12, [0, 1, 2], 0.5, 20.0),
        (3, [0, 1, 2, 3], 0.5, 20.0),
        (0, [0, 1], 0.5, 20.0),
        (40, [0, 1], 0.5, 20.0),
        (200, [0, 1, 2], 0.01, 0.02),  # many small units: the slack is capped at one
    ],
)
def test_every_unit_exactly_once_and_balanced(n_units, gpus, low, high):
    weights = _weights(n_units, n_units, low, high)
    shards = plan(weights, gpus)
    assigned = [u for units in shards.values() for u in units]
    assert sorted(assigned) == sorted(weights)
    share = sum(weights.values()) / len(gpus)
    largest = max(weights.values(), default=0.0)
    assert max(_load(shards, weights).values()) <= share + largest + 1e-9


def test_equal_weights_fill_every_gpu_to_its_share():
    shards = plan(dict.fromkeys((f"gemm.S({i})" for i in range(14)), 1.0), [0, 1])
    assert [len(s) for s in shards.values()] == [7, 7]


def test_plan_is_stable_across_runs_and_input_order():
    weights = _weights(9)
    again = plan(dict(reversed(list(weights.items()))), [0, 1, 2])
    assert plan(weights, [0, 1, 2]) == again == plan(dict(sorted(weights.items())), [0, 1, 2])


def _moved(weights, added, gpus):
    before = plan(weights, gpus)
    after = plan({**weights, **added}, gpus)
    where = {u: g for g, units in before.items() for u in units}
    return [u for g, units in after.items() for u in units if u in where and where[u] != g]


@pytest.mark.parametrize("gpus", [[0, 1], [0, 1, 2], [0, 1, 2, 3]])
@pytest.mark.parametrize("weight", [4.0, 8.0, 12.0, 16.0, 20.0])
def test_adding_a_family_to_the_suite_moves_few_others(gpus, weight):
    # Coarse units (a family is measured whole) on few GPUs: at most half of them move.
    existing = family_weights()
    assert len(_moved(existing, {"gemm.NewFamily": weight}, gpus)) <= len(existing) // 2


def test_adding_a_unit_moves_few_others_on_average():
    moved = []
    for seed in range(50):
        weights = _weights(12, seed)
        moved.append(len(_moved(weights, {"gemm.NewFamily": 10.0}, [0, 1, 2])))
    assert sum(moved) / len(moved) <= 3


def test_plan_rejects_bad_input():
    with pytest.raises(ValueError, match="at least one"):
        plan({"a": 1.0}, [])
    with pytest.raises(ValueError, match="distinct"):
        plan({"a": 1.0}, [0, 0])
    with pytest.raises(ValueError, match="finite and >= 0"):
        plan({"a": -1.0}, [0])


ROOT = Path(__file__).resolve().parent.parent.parent
GPU_CLASSES = ["Attention", "Launch", "Stage", "Stage128", "Tiles", "Tuned"]


def test_weights_of_the_suite_classes():
    weights = {u: w for u, w in family_weights().items() if u.startswith("gemm.")}
    assert sorted(weights) == [f"gemm.{c}" for c in GPU_CLASSES]
    # 16 combinations each; 4096^3 costs more than 128^3, and 8192^3 weighs Tiles up.
    assert 16 < weights["gemm.Stage128"] < weights["gemm.Stage"] < weights["gemm.Tiles"]
    assert combination_weight(None) == 0.0
    assert combination_weight(2 * 8192**3) == pytest.approx(2.0995, abs=1e-3)


def test_the_cpu_classes_are_one_unit_and_the_plan_covers_the_whole_suite():
    units = suite_units()
    assert [f.full for f in units["static"]] == ["static.Sm90aResources", "static.CompileTime"]
    weights = family_weights()
    assert set(weights) == {f"gemm.{c}" for c in GPU_CLASSES} | {"static"}
    every = [f.full for families in units.values() for f in families]
    assert len(every) == len(set(every)) == 8


def _all_names():
    return {
        unit: [n for family in families for n in family.benchmark_names()]
        for unit, families in suite_units().items()
    }


def test_regex_selects_exactly_its_own_unit():
    every = _all_names()
    assert len(every["gemm.Stage"]) == len(every["gemm.Stage128"]) == 2 * 16
    assert len(every["static"]) == 4 * 12 + 2
    for unit in every:
        picked = {n for names in every.values() for n in names if re.search(asv_regex(unit), n)}
        assert picked == set(every[unit]), unit


@pytest.mark.parametrize("user", [["bf16"], ["Stage128", "compile"], ["^gemm\\.Launch"]])
def test_a_user_regex_narrows_each_unit_to_the_intersection(user):
    from harness.suite import run as suite_run

    every = _all_names()
    chosen = suite_run.select(discovery.listing(ROOT), user)
    for unit, names in every.items():
        want = {n for n in names if any(re.search(u, n) for u in user)}
        assert set(chosen.get(unit, [])) == want, unit
        if not want:
            continue
        patterns = suite_run.selectors(unit, chosen[unit], len(names))[1::2]
        everything = [n for ns in every.values() for n in ns]
        # exactly those, and never a benchmark of another unit
        assert {n for n in everything if any(re.search(p, n) for p in patterns)} == want


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


def test_probe_gpus_names_the_pins_or_the_reason(monkeypatch):
    import torch

    from harness.measure import device
    from harness.suite import shard

    monkeypatch.setattr(device, "no_gpu_reason", lambda: None)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "4,6")
    assert shard.probe_gpus("all") == "ok:4,6"
    assert shard.probe_gpus("1") == "ok:6"
    assert shard.probe_gpus("2").startswith("error: --gpus='2': indices must be in 0..1")
    monkeypatch.setattr(device, "no_gpu_reason", lambda: "no CUDA device visible")
    assert (
        shard.probe_gpus("all") == "error: needs a CUDA GPU and found none: no CUDA device visible"
    )


def test_split_balances_groups_and_keeps_every_combination_once():
    from harness.suite import shard

    combos = {f"gemm.T({i})": w for i, w in enumerate([9.0, 7.0, 6.0, 5.0, 4.0, 1.0, 1.0])}
    groups = shard.split(combos, 3)
    assert sorted(c for g in groups for c in g) == sorted(combos)
    loads = [sum(combos[c] for c in g) for g in groups]
    assert max(loads) - min(loads) <= max(combos.values())
    assert shard.split(dict(reversed(list(combos.items()))), 3) == groups
    with pytest.raises(ValueError, match="parts=0: must be >= 1"):
        shard.split(combos, 0)


def test_a_family_is_cut_only_when_it_does_not_fit_and_a_solo_one_never():
    from harness.suite import shard

    units = {
        "gemm.Big": {f"gemm.Big({i})": 4.0 for i in range(12)},
        "gemm.Small": {f"gemm.Small({i})": 1.0 for i in range(4)},
        "gemm.Host": {f"gemm.Host({i})": 6.0 for i in range(6)},
    }
    one = shard.pieces(units, 1, {"gemm.Host"})
    assert [p.key for p in one] == ["gemm.Big", "gemm.Host", "gemm.Small"]
    four = shard.pieces(units, 4, {"gemm.Host"})
    big = [p for p in four if p.unit == "gemm.Big"]
    assert len(big) > 1 and [p.unit for p in four].count("gemm.Host") == 1
    assert sorted(c for p in big for c in p.combos) == sorted(units["gemm.Big"])
    assert all(
        p.weight == shard.PIECE_WEIGHT + sum(units["gemm.Big"][c] for c in p.combos) for p in big
    )
    placed = shard.plan_pieces(units, [0, 1, 2, 3], {"gemm.Host"})
    (home,) = [g for g, ps in placed.items() if any(p.unit == "gemm.Host" for p in ps)]
    assert placed[home][0].unit == "gemm.Host"
    assert placed == shard.plan_pieces(
        dict(reversed(list(units.items()))), [0, 1, 2, 3], {"gemm.Host"}
    )
    with pytest.raises(ValueError, match="must be finite and >= 0"):
        shard.pieces({"gemm.X": {"gemm.X(1)": -1.0}}, 2)


def test_the_suite_combination_weights_follow_the_family_weights():
    from harness.suite import shard

    per_combo = shard.combination_weights(ROOT)
    families = shard.family_weights(ROOT)
    assert set(per_combo) == {u for u in families if u != "static"}
    for unit, combos in per_combo.items():
        assert sum(combos.values()) == pytest.approx(families[unit])
