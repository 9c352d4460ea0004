"""The suite's cost model, on synthetic timings: the fit recovers known coefficients,
the wall time follows the plan's busiest lane, and the table reads back from its JSON."""

import json
import statistics

import pytest

from harness.suite import cost, shard
from harness.suite.run import timing_line

SIZES = {
    "gemm.A": cost.UnitSize(16, 2.2),
    "gemm.B": cost.UnitSize(16, 0.0),
    "gemm.C": cost.UnitSize(12, 7.4),
    "gemm.D": cost.UnitSize(8, 0.1),
    "gemm.E": cost.UnitSize(16, 20.0),
}
TRUE = cost.Fit(4.0, 0.8, 1.5, points=0)


def _log(seconds, lanes, cpu=30.0, solo=9.0, extra=()):
    lines = [timing_line("precompile", 2.0), timing_line("gemm.Launch", solo, "gpu")]
    lines += [timing_line(u, s, lanes[u]) for u, s in seconds.items()]
    lines += [timing_line("static", cpu, "cpu"), *extra, "asv chatter that is not a timing"]
    return lines


def _seconds():
    return {u: TRUE.seconds(s) for u, s in SIZES.items()}


def test_the_fit_recovers_the_coefficients_of_exact_data():
    got = cost.fit([(SIZES[u], s) for u, s in _seconds().items()])
    assert (got.a, got.b, got.c) == pytest.approx((TRUE.a, TRUE.b, TRUE.c), rel=1e-6)
    assert got.points == len(SIZES)


def test_a_negative_coefficient_is_dropped_not_kept():
    # Time falls with TFLOP in these points: noise, not a cost that can be negative.
    obs = [(cost.UnitSize(10, 0.0), 20.0), (cost.UnitSize(10, 5.0), 18.0)]
    obs.append((cost.UnitSize(20, 1.0), 30.0))
    got = cost.fit(obs)
    assert min(got.a, got.b, got.c) >= 0.0 and got.c == 0.0


def test_wall_time_is_serial_plus_the_busiest_lane_and_the_largest_unit_is_cut():
    lines = _log(
        _seconds(), dict.fromkeys(SIZES, "gpu"), cpu=1.0, extra=[timing_line("publish", 5.0)]
    )
    m = cost.model([cost.Run.read(lines)], SIZES, {"gemm.Launch"})
    serial = 2.0 + 5.0  # precompile, publish; no measure line: no overhead
    close = {"abs": 0.5}  # the log keeps a tenth of a second
    total = sum(_seconds().values())
    as_is = cost.GROWTHS["as is"]
    # One GPU: the solo family first in the lane, in a run of its own, then the others
    # packed in runs of at most 45 s (a = 4 s each), heaviest first, first fit; by hand,
    # combinations' seconds E 42.8 (a run alone), C 20.7 + A 16.1, B 12.8 + D 6.55: three
    # runs where there were five, two start-ups fewer.
    assert cost.wall(m, 1, as_is) == pytest.approx(serial + 9.0 + total - 2 * TRUE.a, **close)
    walls = [cost.wall(m, n, as_is) for n in (1, 2, 4, 8)]
    assert walls == sorted(walls, reverse=True)
    # The largest family no longer bounds the wall: the plan cuts it into groups.
    largest = max(_seconds().values())
    assert walls[-1] < serial + largest
    # Doubling the grid doubles what the GPUs measure, not the serial steps.
    grown = cost.wall(m, 1, cost.GROWTHS["2x shapes"])
    a = m["fit"]["a"]  # each run keeps one fixed cost, fitted from the log
    # (and the precompile, twice the kernels). Twice the combinations' seconds, in runs of
    # at most 41 s of them, by hand: E 85.6 and C 41.4 each alone (over it), A 32.2,
    # B 25.6 + D 13.1 (38.7): four runs where there were five families.
    grown_by_hand = serial + 2.0 + 9.0 + 2 * (total - len(SIZES) * a) + 4 * a
    assert grown == pytest.approx(grown_by_hand, **close)


def test_the_cpu_lane_bounds_the_wall_when_it_is_the_longest():
    m = cost.model(
        [cost.Run.read(_log(_seconds(), dict.fromkeys(SIZES, "gpu"), cpu=500.0))],
        SIZES,
        {"gemm.Launch"},
    )
    assert cost.wall(m, 8, cost.GROWTHS["as is"]) == pytest.approx(2.0 + 9.0 + 500.0)
    # Twice the CPU work, one start-up (the fit's a).
    a = m["fit"]["a"]
    grown = 4.0 + 9.0 + a + 2 * (500.0 - a)
    assert cost.wall(m, 8, cost.GROWTHS["2x kernels"]) == pytest.approx(grown)


def test_a_log_without_unit_timings_is_refused():
    with pytest.raises(ValueError, match="no unit timing lines"):
        cost.Run.read(["hello", timing_line("publish", 1.0)])


def test_the_table_is_written_as_json_and_renders_again(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(cost, "unit_sizes", lambda root: SIZES)
    monkeypatch.setattr(cost.discovery, "listing", lambda root: {"gemm.Launch": {"solo": True}})
    log = tmp_path / "run.log"
    log.write_text("\n".join(_log(_seconds(), dict.fromkeys(SIZES, "gpu0"))))
    out = tmp_path / "cost.json"
    assert cost.main([str(log), "--json", str(out)]) == 0
    first = capsys.readouterr().out
    data = json.loads(out.read_text())
    assert [row["grid"] for row in data["table"]] == list(cost.GROWTHS)
    assert cost.main(["--render", str(out)]) == 0
    assert capsys.readouterr().out == first
    assert "| as is | " in first and "| 8 GPUs |" in first


def test_the_runners_doc_shows_the_recorded_model_verbatim():
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    doc = (root / "docs" / "runners.md").read_text()
    block = doc.split("<!-- cost-table: begin -->\n")[1].split("\n<!-- cost-table: end -->")[0]
    rendered = subprocess.run(
        [sys.executable, "-m", "harness.suite.cost", "--render", "reports/cost_h200.json"],
        cwd=root,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    assert block == rendered


def test_the_recorded_model_predicts_the_two_gpu_target_and_no_compile_beside_launch():
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    m = cost.upgrade(json.loads((root / "reports" / "cost_h200.json").read_text()), root)
    walls = {n: cost.wall(m, n, cost.GROWTHS["as is"]) for n in (1, 2, 4)}
    # Against the one-GPU plan with the same batching, two GPUs cannot beat (serial + the
    # GPU work with one start-up per lane, halved): 1.88x; the plan is within 2% of it.
    assert walls[1] / walls[2] >= 1.8 and walls[2] < walls[1] and walls[4] < walls[2]
    # Four GPUs: the static work is cut over CPU lanes, each starting after Launch.
    gpu, cpu = cost.lane_seconds(m, 4, cost.GROWTHS["as is"])
    launch = sum(m["solo"].values())
    assert len(cpu) > 1 and all(end > launch + m["fit"]["a"] for end in cpu)
    # Where the CPU lanes end after the GPUs (they wait for Launch), they are as many as
    # the host allows.
    assert max(cpu) <= max(gpu.values()) or len(cpu) == shard.cpu_lanes(4 * m["cores_per_gpu"])


def _flops():
    return {
        u: {f"{u}({i})": int(s.tflop * 1e12 / s.combinations) for i in range(s.combinations)}
        for u, s in SIZES.items()
    }


def _cpu_ends(m, gpus):
    return cost.lane_seconds(m, gpus, cost.GROWTHS["as is"])[1]


def test_a_gpu_family_no_run_timed_is_planned_on_a_gpu_at_the_fits_seconds():
    # A family added after the recorded runs (no timing line of its own) is GPU work at
    # what the fit predicts for it, never CPU work at the CPU lane's rate.
    every = cost.model(
        [cost.Run.read(_log(_seconds(), dict.fromkeys(SIZES, "gpu")))],
        SIZES,
        {"gemm.Launch"},
        _flops(),
    )
    timed = {u: s for u, s in _seconds().items() if u != "gemm.E"}
    m = cost.model(
        [cost.Run.read(_log(timed, dict.fromkeys(timed, "gpu")))], SIZES, {"gemm.Launch"}, _flops()
    )
    assert sorted(m["per_combination"]["gemm.E"]) == sorted(_flops()["gemm.E"])
    for gpus in (1, 2):
        assert _cpu_ends(m, gpus) == pytest.approx(_cpu_ends(every, gpus))
        assert cost.wall(m, gpus, cost.GROWTHS["as is"]) == pytest.approx(
            cost.wall(every, gpus, cost.GROWTHS["as is"]), abs=0.5
        )


def test_the_families_of_a_batched_run_stay_gpu_work():
    seconds = _seconds()
    batch = {"gemm.A+gemm.B": seconds["gemm.A"] + seconds["gemm.B"] - TRUE.a}
    rest = {u: s for u, s in seconds.items() if u not in ("gemm.A", "gemm.B")}
    lines = _log({**batch, **rest}, dict.fromkeys([*batch, *rest], "gpu"))
    m = cost.model([cost.Run.read(lines)], SIZES, {"gemm.Launch"}, _flops())
    solo_and_cpu = 9.0 + m["cpu_lane"]
    assert _cpu_ends(m, 1) == pytest.approx([solo_and_cpu])


def _family_line(unit, combos, lane="gpu", extra=1.5):
    from harness.suite.run import families_line

    spent = {"seconds": sum(combos.values()) + extra, "combinations": combos}
    return families_line(unit, spent, lane)


def test_combination_timings_fit_b_c_the_process_start_and_a():
    # Exact data: each combination b + c x TFLOP, a process's first one 7 s more (CUDA's
    # start) and 1.5 s before it, each run a beyond its family processes.
    b, c, a, start = 0.7, 1.3, 3.0, 7.0
    flops = {
        "gemm.A": {f"gemm.A({i})": int(i * 0.4e12) for i in range(6)},
        "gemm.B": {f"gemm.B({i})": int(i * 1.1e12) for i in range(4)},
    }
    flops["gemm.B"]["gemm.B(skipped)"] = None
    spent = {
        u: {n: b + c * f / 1e12 for n, f in cs.items() if f is not None} for u, cs in flops.items()
    }
    for u in spent:  # measured first, as the records keep them
        spent[u][f"{u}(0)"] += start
    lines = [
        timing_line("gemm.A+gemm.B", a + sum(sum(s.values()) + 1.5 for s in spent.values()), "gpu"),
        _family_line("gemm.A", spent["gemm.A"]),
        _family_line("gemm.B", spent["gemm.B"]),
        timing_line("gemm.Launch", 9.0, "gpu"),
        _family_line("gemm.Launch", {"gemm.Launch(x)": 8.0}),  # solo: not fitted
        timing_line("static", 30.0, "cpu"),
    ]
    r = cost.Run.read(lines)
    assert list(r.combinations["gemm.A"])[0] == "gemm.A(0)"  # measuring order kept
    assert r.combinations["gemm.A"]["gemm.A(5)"] == pytest.approx(b + c * 2.0, abs=1e-3)
    got = cost.fit_combinations([r], flops, {"gemm.Launch"})
    assert got.a == pytest.approx(a, abs=0.05)  # the run's line keeps a tenth of a second
    assert (got.b, got.c) == pytest.approx((b, c), abs=0.01)
    typical = [statistics.median(list(s.values())[1:]) for s in spent.values()]
    assert got.process == pytest.approx(1.5 + b + start - statistics.median(typical), abs=0.01)
    assert got.points == 8 and got.basis == "combination timings"
    # The model plans with the fit; it predicts with each combination's own seconds, the
    # first one's start counted once per piece as the process's.
    sizes = {
        u: cost.UnitSize(len(s), sum(f or 0 for f in flops[u].values()) / 1e12)
        for u, s in spent.items()
    }
    m = cost.model([r], sizes, {"gemm.Launch"}, flops)
    assert m["fit"]["basis"] == "combination timings" and "gemm.Launch" not in m["measured"]
    per = m["per_combination"]["gemm.B"]
    assert per["gemm.B(3)"][1] == pytest.approx(spent["gemm.B"]["gemm.B(3)"], abs=1e-3)
    assert per["gemm.B(0)"][1] == pytest.approx(b + c * 2.2, abs=1e-3)  # the median of B's
    one_gpu, _ = cost.lane_seconds(m, 1, cost.GROWTHS["as is"])
    measured = sum(sum(s.values()) + 1.5 for s in spent.values())
    assert one_gpu[0] == pytest.approx(9.0 + a + measured, abs=0.05)  # A and B in one run
    assert "fitted on 8 combination timings" in cost.render({**m, "table": cost.table(m)})


def test_without_combination_timings_the_fit_is_over_the_runs():
    lines = _log(_seconds(), dict.fromkeys(SIZES, "gpu"))
    assert cost.fit_combinations([cost.Run.read(lines)], {}, set()) is None
    m = cost.model([cost.Run.read(lines)], SIZES, {"gemm.Launch"})
    assert m["fit"]["basis"] == "unit timings" and "measured" not in m


def test_a_damaged_family_line_is_left_out():
    from harness.suite.run import read_families

    good = _family_line("gemm.A", {"gemm.A(1)": 1.0})
    assert [u for u, _, _ in read_families([good, good[:-5], "timing gemm.A gpu family: {}"])] == [
        "gemm.A"
    ]
