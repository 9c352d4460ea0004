"""The multi-GPU sharding plan, on the CPU: stable, balanced, every class once."""

import json
import random
import re
from pathlib import Path

import pytest

from harness.revisions import placement
from harness.revisions.placement import parse_gpus, plan
from harness.suite import discovery, shard
from harness.suite import weights as plan_weights
from harness.suite.shard import asv_regex
from harness.suite.weights import combination_weights, suite_units


def family_weights():
    return {u: sum(cs.values()) for u, cs in combination_weights().items()}


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
    # Coarse units (a family is measured whole) on few GPUs: at most two thirds of them
    # move (5 of the 8 units, on three GPUs, when the new family weighs as much as one).
    existing = family_weights()
    assert len(_moved(existing, {"gemm.NewFamily": weight}, gpus)) <= 2 * len(existing) // 3


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
FAMILY_GPU_CLASSES = ["families.GroupedGemm"]  # bound from the family packages


def test_weights_of_the_suite_classes_are_seconds_of_the_recorded_model():
    fit = json.loads(plan_weights.COST_MODEL.read_text())["fit"]
    weights = {u: w for u, w in family_weights().items() if u.startswith("gemm.")}
    assert sorted(weights) == [f"gemm.{c}" for c in GPU_CLASSES]
    # 4096^3 costs more than 128^3, and 8192^3 weighs Tiles up.
    assert weights["gemm.Stage128"] < weights["gemm.Stage"] < weights["gemm.Tiles"]
    cal = plan_weights.recorded_calibration()
    assert (cal.piece, cal.combination, cal.tflop) == (fit["a"], fit["b"], fit["c"])
    assert cal.gpu(None) == 0.0
    assert cal.gpu(2 * 8192**3) == pytest.approx(fit["b"] + fit["c"] * 2 * 8192**3 / 1e12)
    # The 16 Stage128 combinations (no work to speak of) weigh 16 x b seconds, not 16.
    assert weights["gemm.Stage128"] == pytest.approx(16 * fit["b"], rel=1e-3)


@pytest.mark.parametrize("field", ["piece", "combination", "tflop", "cpu_combination"])
def test_a_calibration_names_the_bad_field(field):
    good = {"piece": 7.0, "combination": 0.3, "tflop": 1.1, "cpu_combination": 2.0}
    with pytest.raises(ValueError, match=f"Calibration.{field}=-1.0: must be finite and >= 0"):
        plan_weights.Calibration(**{**good, field: -1.0})


def test_a_missing_cost_model_is_named(tmp_path):
    with pytest.raises(ValueError, match="cannot read the recorded cost model"):
        plan_weights.recorded_calibration(ROOT, tmp_path / "nope.json")
    (tmp_path / "bad.json").write_text('{"fit": {}}')
    with pytest.raises(ValueError, match="needs fit.a, fit.b, fit.c and cpu_lane"):
        plan_weights.recorded_calibration(ROOT, tmp_path / "bad.json")


def test_the_cpu_classes_are_one_unit_and_the_plan_covers_the_whole_suite():
    units = suite_units()
    assert [f.full for f in units["static"]] == [
        "static.Sm90aResources",
        "static.CompileTime",
        "static.GroupedGemmResources",
        "static.GroupedGemmCompileTime",
    ]
    weights = combination_weights()
    assert set(weights) == {f"gemm.{c}" for c in GPU_CLASSES} | {"static", *FAMILY_GPU_CLASSES}
    # GEMM's 12 + 2, the grouped GEMM's resources (4) and compile time (2): one CPU unit.
    assert len(weights["static"]) == 12 + 2 + 4 + 2
    every = [f.full for families in units.values() for f in families]
    assert len(every) == len(set(every)) == 11


def _all_names():
    return {
        unit: [n for family in families for n in family.benchmark_names()]
        for unit, families in suite_units().items()
    }


def test_regex_selects_exactly_its_own_unit():
    every = _all_names()
    assert len(every["gemm.Stage"]) == len(every["gemm.Stage128"]) == 2 * 16
    assert len(every["static"]) == 4 * 12 + 2 + 4 * 4 + 2
    for unit in every:
        picked = {n for names in every.values() for n in names if re.search(asv_regex(unit), n)}
        assert picked == set(every[unit]), unit


@pytest.mark.parametrize("user", [["bf16"], ["Stage128", "compile"], ["^gemm\\.Launch"]])
def test_a_user_regex_narrows_each_unit_to_the_intersection(user):
    from harness.suite import jobs

    every = _all_names()
    chosen = jobs.select(discovery.listing(ROOT), user)
    for unit, names in every.items():
        want = {n for n in names if any(re.search(u, n) for u in user)}
        assert set(chosen.get(unit, [])) == want, unit
        if not want:
            continue
        patterns = jobs.selectors(unit, chosen[unit], len(names))[1::2]
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

    monkeypatch.setattr(device, "no_gpu_reason", lambda: None)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "4,6")
    assert placement.probe_gpus("all") == "ok:4,6"
    assert placement.probe_gpus("1") == "ok:6"
    assert placement.probe_gpus("2").startswith("error: --gpus='2': indices must be in 0..1")
    monkeypatch.setattr(device, "no_gpu_reason", lambda: "no CUDA device visible")
    assert (
        placement.probe_gpus("all")
        == "error: needs a CUDA GPU and found none: no CUDA device visible"
    )


def test_split_balances_groups_and_keeps_every_combination_once():
    combos = {f"gemm.T({i})": w for i, w in enumerate([9.0, 7.0, 6.0, 5.0, 4.0, 1.0, 1.0])}
    groups = shard.split(combos, 3)
    assert sorted(c for g in groups for c in g) == sorted(combos)
    loads = [sum(combos[c] for c in g) for g in groups]
    assert max(loads) - min(loads) <= max(combos.values())
    assert shard.split(dict(reversed(list(combos.items()))), 3) == groups
    with pytest.raises(ValueError, match="parts=0: must be >= 1"):
        shard.split(combos, 0)


def _pieces(weights):
    return [shard.Piece(k, k, (k,), w) for k, w in weights.items()]


def _busiest(lanes):
    return max(sum(p.weight for p in ps) for ps in lanes)


@pytest.mark.parametrize("seed", range(8))
@pytest.mark.parametrize("bins", [2, 3, 4])
def test_partition_finds_the_least_busiest_lane(seed, bins):
    import itertools

    weights = _weights(7, seed)
    lanes = shard.partition(_pieces(weights), bins)
    assert sorted(p.key for ps in lanes for p in ps) == sorted(weights)
    names = sorted(weights)
    best = min(
        max(
            sum(weights[n] for n, b in zip(names, where, strict=True) if b == i)
            for i in range(bins)
        )
        for where in itertools.product(range(bins), repeat=len(names))
    )
    assert _busiest(lanes) == pytest.approx(best)
    again = shard.partition(list(reversed(_pieces(weights))), bins)
    assert again == lanes


def test_partition_beats_the_greedy_plan_where_the_greedy_plan_is_off():
    # Greedy (each to the lightest) gives 5+2+2 | 4+3+... ; the best is 5+4 | 3+3+3.
    weights = {"a": 5.0, "b": 4.0, "c": 3.0, "d": 3.0, "e": 3.0}
    assert _busiest(shard.partition(_pieces(weights), 2)) == 9.0


def test_a_unit_is_cut_only_where_it_pays_and_a_whole_one_never():
    units = {
        "gemm.Big": {f"gemm.Big({i})": 4.0 for i in range(12)},
        "gemm.Small": {f"gemm.Small({i})": 1.0 for i in range(4)},
        "gemm.Host": {f"gemm.Host({i})": 6.0 for i in range(6)},
    }
    one = shard.balance(units, 1, 5.0, {"gemm.Host"})
    assert sorted(p.key for p in one[0]) == ["gemm.Big", "gemm.Host", "gemm.Small"]
    four = [p for ps in shard.balance(units, 4, 5.0, {"gemm.Host"}) for p in ps]
    big = [p for p in four if p.unit == "gemm.Big"]
    assert len(big) > 1 and [p.unit for p in four].count("gemm.Host") == 1
    assert sorted(c for p in big for c in p.combos) == sorted(units["gemm.Big"])
    assert all(p.weight == sum(units["gemm.Big"][c] for c in p.combos) for p in big)
    # Where a whole unit bounds the busiest lane anyway, a cut gains nothing: none is made.
    heavy = {**units, "gemm.Host": {f"gemm.Host({i})": 10.0 for i in range(6)}}
    kept = [p for ps in shard.balance(heavy, 4, 5.0, {"gemm.Host"}) for p in ps]
    assert sorted(p.key for p in kept) == sorted(units)
    with pytest.raises(ValueError, match="must be finite and >= 0"):
        shard.balance({"gemm.X": {"gemm.X(1)": -1.0}}, 2, 1.0)


def test_every_piece_pays_its_process_start_so_a_cut_must_pay_for_it():
    units = {
        "gemm.Big": {f"gemm.Big({i})": 1.0 for i in range(12)},
        "gemm.Small": {f"gemm.Small({i})": 1.0 for i in range(4)},
    }
    pieces = shard.cut(units, {"gemm.Big": 3}, process=2.5)
    assert [p.weight for p in pieces] == [6.5, 6.5, 6.5, 6.5]
    # Without a process start both units are cut in halves (8 s a GPU); with one of 10 s
    # a second piece costs more than the balance gains, and nothing is cut (22 s, 14 s).
    free = [p.key for ps in shard.balance(units, 2, 1.0) for p in ps]
    assert len(free) == 4
    dear = [p.key for ps in shard.balance(units, 2, 1.0, process=10.0) for p in ps]
    assert sorted(dear) == ["gemm.Big", "gemm.Small"]
    with pytest.raises(ValueError, match="must be finite and >= 0"):
        shard.cut(units, {}, process=-1.0)


SUITE = {
    "gemm.Big": {f"gemm.Big({i})": 2.0 for i in range(12)},
    "gemm.Mid": {f"gemm.Mid({i})": 1.0 for i in range(10)},
    "gemm.Host": {f"gemm.Host({i})": 1.0 for i in range(4)},
    "static": {f"static.S({i})": 1.0 for i in range(14)},
}


@pytest.mark.parametrize("gpus", [[0], [0, 1], [0, 1, 2, 3], [3, 5]])
def test_the_suite_plan_places_every_combination_once_and_keeps_its_lane(gpus):
    planned = shard.plan_suite(SUITE, gpus, 3.0, {"gemm.Host"}, {"static"}, len(gpus))
    assert set(planned.gpu) == set(gpus)
    placed = [c for bs in planned.gpu.values() for b in bs for c in b.combos]
    assert sorted(placed) == sorted(c for u in SUITE if u != "static" for c in SUITE[u])
    on_cpu = [c for bs in planned.cpu for b in bs for c in b.combos]
    assert sorted(on_cpu) == sorted(SUITE["static"])
    (home,) = [g for g, bs in planned.gpu.items() if any(b.alone({"gemm.Host"}) for b in bs)]
    # The solo unit first in its lane, in an asv run of its own.
    assert [p.unit for p in planned.gpu[home][0].pieces] == ["gemm.Host"]
    shuffled = {u: dict(reversed(list(cs.items()))) for u, cs in reversed(list(SUITE.items()))}
    again = shard.plan_suite(shuffled, gpus, 3.0, {"gemm.Host"}, {"static"}, len(gpus))
    assert again == planned


def test_the_cpu_units_are_cut_over_cpu_lanes_only_where_they_would_bound_the_wall():
    def ends(planned):
        solo = [b for bs in planned.gpu.values() for b in bs if b.alone({"gemm.Host"})]
        start = 3.0 + solo[0].weight
        gpu = max(shard.cost(bs, 3.0) for bs in planned.gpu.values())
        return gpu, [start + shard.cost(bs, 3.0) for bs in planned.cpu]

    # Two GPUs: one CPU lane ends before the busiest GPU, so it stays whole.
    two = shard.plan_suite(SUITE, [0, 1], 3.0, {"gemm.Host"}, {"static"}, 2)
    assert [[b.key for b in bs] for bs in two.cpu] == [["static"]]
    # Four GPUs: whole, it would bound the wall; cut, no CPU lane ends after the GPUs.
    four = shard.plan_suite(SUITE, [0, 1, 2, 3], 3.0, {"gemm.Host"}, {"static"}, 4)
    gpu, cpu = ends(four)
    assert 1 < len(four.cpu) <= 4 and max(cpu) <= gpu
    # Never more CPU lanes than the host allows.
    assert len(shard.plan_suite(SUITE, [0, 1, 2, 3], 3.0, {"gemm.Host"}, {"static"}, 1).cpu) == 1
    with pytest.raises(ValueError, match="lanes_cpu=0: must be >= 1"):
        shard.plan_suite(SUITE, [0], 3.0, lanes_cpu=0)
    with pytest.raises(ValueError, match="distinct"):
        shard.plan_suite(SUITE, [0, 0], 3.0)
    assert shard.cpu_lanes(32) == 2 and shard.cpu_lanes(4) == 1


def test_a_lane_is_packed_into_runs_within_the_budget():
    p = {
        k: shard.Piece(k.rstrip("0123456789"), k, (k,), w)
        for k, w in [("A", 30.0), ("B", 20.0), ("C", 12.0), ("D", 5.0), ("H1", 2.0), ("X", 60.0)]
    }
    # By hand, run 5 s, budget 45 s, first fit: H (solo) alone; A opens a run; B does not
    # fit beside A (5+30+20 > 45) and opens one; C fits beside B (5+20+12 = 37), not A
    # (47); D fits beside A (5+30+5 = 40); X is larger than the budget alone: its own run.
    order = [p[k] for k in ("H1", "A", "B", "C", "D", "X")]
    got = shard.pack(order, 5.0, {"H"}, budget=45.0)
    assert [b.key for b in got] == ["H1", "A+D", "B+C", "X"]
    assert all(5.0 + b.weight <= 45.0 or len(b.pieces) == 1 for b in got)
    assert shard.cost(got, 5.0) == pytest.approx(4 * 5.0 + 129.0)
    # Without a start-up cost to share, one piece per run costs the same.
    assert shard.lane_cost(order, 0.0, {"H"}) == pytest.approx(129.0)


def test_the_recorded_model_batches_every_lane_within_the_budget():
    from harness.suite import cost

    m = cost.upgrade(json.loads(plan_weights.COST_MODEL.read_text()), ROOT)
    a, process = m["fit"]["a"], m["fit"].get("process", 0.0)
    weights = {u: {c: wc[0] for c, wc in cs.items()} for u, cs in m["per_combination"].items()}
    solo = set(m["solo"])
    cpu = {u for u in weights if u not in m["sizes"] and u not in solo}
    for gpus in (1, 2, 4, 8):
        planned = shard.plan_suite(weights, list(range(gpus)), a, solo, cpu, gpus, process=process)
        batches = [b for bs in [*planned.gpu.values(), *planned.cpu] for b in bs]
        assert all(a + b.weight <= shard.RUN_BUDGET_S + 1e-9 or len(b.pieces) == 1 for b in batches)
        # Fewer asv runs than pieces where several fit in one: every lane pays one start-up
        # per batch, not per family.
        if gpus == 1:
            assert len(planned.gpu[0]) < len({p.unit for b in planned.gpu[0] for p in b.pieces})


def test_the_suite_combination_weights_cover_every_combination():
    per_combo = plan_weights.combination_weights(ROOT)
    listed = discovery.listing(ROOT)
    for unit, entry in listed.items():
        assert set(per_combo[unit]) == {aliases[1] for aliases in entry["names"].values()}
