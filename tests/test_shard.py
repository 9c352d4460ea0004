"""The multi-GPU sharding plan, on the CPU: stable, balanced, every class once."""

import random
import re
import sys

import pytest

from harness.shard import (
    asv_regex,
    benchmark_names,
    combination_weight,
    family_weights,
    parse_gpus,
    plan,
    pop_bench,
    shard_regex,
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


def test_weights_of_the_suite_classes():
    weights = family_weights("asv_bench.gemm")
    gpu_classes = ["Attention", "Launch", "Stage", "Stage128", "Tiles", "Tuned"]
    assert sorted(weights) == [f"gemm.{c}" for c in gpu_classes]
    # 16 combinations each; 4096^3 costs more than 128^3, and 8192^3 weighs Tiles up.
    assert 16 < weights["gemm.Stage128"] < weights["gemm.Stage"] < weights["gemm.Tiles"]
    assert combination_weight(None) == 0.0
    assert combination_weight(2 * 8192**3) == pytest.approx(2.0995, abs=1e-3)


def test_the_cpu_classes_are_one_unit_and_the_plan_covers_the_whole_suite():
    units = suite_units()
    assert [f for f, _ in units["static"]] == ["static.Sm90aResources", "static.CompileTime"]
    weights = family_weights()
    assert set(weights) == set(family_weights("asv_bench.gemm")) | {"static"}
    every = [f for classes in units.values() for f, _ in classes]
    assert len(every) == len(set(every)) == 8


def _all_names():
    return {
        unit: [n for family, cls in classes for n in benchmark_names(family, cls)]
        for unit, classes in suite_units().items()
    }


def test_regex_selects_exactly_its_own_unit():
    every = _all_names()
    assert len(every["gemm.Stage"]) == len(every["gemm.Stage128"]) == 2 * 16
    assert len(every["static"]) == 4 * 12 + 6
    for unit in every:
        picked = {n for names in every.values() for n in names if re.search(asv_regex(unit), n)}
        assert picked == set(every[unit]), unit


@pytest.mark.parametrize("user", [["bf16"], ["Stage128", "compile"], ["^gemm\\.Launch"]])
def test_a_user_regex_narrows_each_unit_to_the_intersection(user):
    every = _all_names()
    for unit, names in every.items():
        picked = {n for n in names if re.search(shard_regex(unit, user), n)}
        assert picked == {n for n in names if any(re.search(u, n) for u in user)}, unit
        # ... and never reaches into another unit.
        others = [n for u, ns in every.items() if u != unit for n in ns]
        assert not any(re.search(shard_regex(unit, user), n) for n in others)


def test_pop_bench_takes_every_form_and_keeps_the_rest():
    args = ["-b", "a", "--quick", "--bench", "b", "--bench=c", "-e"]
    assert pop_bench(args) == ["a", "b", "c"]
    assert args == ["--quick", "-e"]
    with pytest.raises(ValueError, match="-b: needs a regex"):
        pop_bench(["-b"])


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


@pytest.fixture
def fake_asv(monkeypatch, tmp_path):
    """Record each ``asv run`` the shard would start as ``(cmd, CUDA_VISIBLE_DEVICES)``."""
    from harness import shard

    runs = []

    class FakePopen:
        def __init__(self, cmd, **kwargs):
            runs.append((cmd, kwargs["env"]["CUDA_VISIBLE_DEVICES"]))
            self.stdout = iter(["[ 50.00%] ··· gemm.X.track_latency  ok\n"])
            self.returncode = 0

        def wait(self):
            return 0

    monkeypatch.setattr(shard, "ROOT", tmp_path)
    monkeypatch.setattr(shard.subprocess, "run", lambda *a, **k: None)
    monkeypatch.setattr(shard.subprocess, "Popen", FakePopen)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    return runs


def _patterns(cmd):
    return [cmd[i + 1] for i, arg in enumerate(cmd) if arg == "-b"]


def test_run_starts_one_asv_run_per_gpu_with_classes(fake_asv, capsys):
    from harness import shard

    gpus = list(range(8))  # more GPUs than units: the idle ones must not run the suite
    assert shard.run(gpus, "h200", "abc", ["--quick"], sys.executable) == 0
    selected = []
    for cmd, _ in fake_asv:
        assert _patterns(cmd) and cmd[-1] == "--quick"
        selected += _patterns(cmd)
    assert sorted(selected) == sorted(asv_regex(f) for f in family_weights())
    steps = shard.phases(family_weights(), gpus, {"gemm.Launch"})
    busy = {g for step in steps for g, units in step.items() if units}
    assert {int(gpu) for _, gpu in fake_asv} == busy and len(busy) < len(gpus)
    # The host-timed family runs first, alone.
    assert _patterns(fake_asv[0][0]) == [asv_regex("gemm.Launch")]
    assert "no benchmark class left for it, not run" in capsys.readouterr().out


def test_run_with_a_user_regex_starts_only_the_shards_it_selects(fake_asv, capsys):
    from harness import shard

    args = ["-b", "Launch", "--quick"]
    assert shard.run([0, 1], "h200", "abc", args, sys.executable) == 0
    assert len(fake_asv) == 1
    cmd, _ = fake_asv[0]
    assert _patterns(cmd) == [shard_regex("gemm.Launch", ["Launch"])]
    assert cmd[-1] == "--quick" and args == ["-b", "Launch", "--quick"]
    fake_asv.clear()
    assert shard.run([0, 1], "h200", "abc", ["-b", "NoSuchTrack"], sys.executable) == 2
    assert not fake_asv and "no benchmark matches -b NoSuchTrack" in capsys.readouterr().out


def test_each_shard_is_pinned_through_this_process_visible_list(fake_asv, monkeypatch):
    from harness import shard

    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "5,7")
    assert shard.run([0, 1], "h200", "abc", [], sys.executable) == 0
    assert {gpu for _, gpu in fake_asv} == {"5", "7"}


def test_probe_gpus_names_the_pins_or_the_reason(monkeypatch):
    import torch

    from harness import device, shard

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


def test_solo_units_run_first_each_alone_and_once():
    from harness import shard

    weights = family_weights()
    steps = shard.phases(weights, [0, 1], {"gemm.Launch"})
    assert len(steps) == 2 and list(steps[0].values()) == [["gemm.Launch"]]
    placed = [u for step in steps for units in step.values() for u in units]
    assert sorted(placed) == sorted(weights)
    # Stable: the solo unit keeps its GPU run after run.
    assert shard.phases(weights, [0, 1], {"gemm.Launch"})[0] == steps[0]
