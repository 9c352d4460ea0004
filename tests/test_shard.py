"""The multi-GPU sharding plan, on the CPU: stable, balanced, every class once."""

import itertools
import random
import re
import sys

import pytest

from asv_bench import gemm
from harness.shard import asv_regex, combination_weight, family_weights, parse_gpus, plan


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


def _asv_names(cls_name, cls):
    """Track names as asv writes them: ``gemm.Stage.track_latency('4096x4096x4096', ...)``."""
    for track in cls.tracks():
        for combo in itertools.product(*cls.params):
            yield f"gemm.{cls_name}.{track}({', '.join(repr(p) for p in combo)})"


def test_regex_selects_exactly_its_own_class():
    classes = {n.split(".")[1]: getattr(gemm, n.split(".")[1]) for n in family_weights()}
    every = {c: list(_asv_names(c, cls)) for c, cls in classes.items()}
    assert len(every["Stage"]) == len(every["Stage128"]) == 2 * 16
    for c in classes:
        pattern = asv_regex(f"gemm.{c}")
        picked = {n for names in every.values() for n in names if re.search(pattern, n)}
        assert picked == set(every[c]), c


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


def test_run_starts_one_asv_run_per_gpu_with_classes(monkeypatch, tmp_path, capsys):
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
    gpus = list(range(8))  # more GPUs than classes: the idle ones must not run the suite
    assert shard.run(gpus, "h200", "abc", ["--quick"], sys.executable) == 0
    selected = []
    for cmd, _ in runs:
        patterns = [cmd[i + 1] for i, arg in enumerate(cmd) if arg == "-b"]
        assert patterns and cmd[-1] == "--quick"
        selected += patterns
    assert sorted(selected) == sorted(asv_regex(f) for f in family_weights())
    assert len(runs) == len(family_weights()) < len(gpus)
    assert "no benchmark class left for it, not run" in capsys.readouterr().out
