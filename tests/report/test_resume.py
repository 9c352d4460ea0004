"""What a resumed measurement keeps (``harness.report.resume``), from made-up records."""

from types import SimpleNamespace

from harness.measure.cases import CaseResult
from harness.measure.timing import Timing
from harness.report import resume
from kernels import GemmConfig, GemmShape

META = {"gpu": "NVIDIA H200", "sm_count": 132, "repeat": 50, "seed": 0}
KEYS = ("gpu", "sm_count", "repeat", "seed")
A, B = GemmShape(1024, 1024, 1024), GemmShape(2048, 1024, 1024)
SMALL, WIDE = GemmConfig(), GemmConfig(128, 256, 64, 256, 3)


def _run(run_id, meta, rows):
    t = Timing((0.01,), "event", 0)
    return SimpleNamespace(
        id=run_id, meta=meta, rows=tuple(CaseResult(s, c, t, t) for s, c in rows)
    )


def test_differences_name_each_setting_that_changed():
    now = {**META, "repeat": 100}
    assert resume.differences(META, now, KEYS) == ["repeat: was 50, is 100"]
    assert resume.differences({"gpu": "NVIDIA H200"}, META, ("gpu", "seed")) == [
        "seed: was 'not recorded', is 0"
    ]


def test_a_first_use_cache_elsewhere_is_the_same_measurement():
    was = {"first_use": {"budget_s": 60.0, "candidates": 33, "cache": "/a"}}
    assert (
        resume.differences(was, {"first_use": {**was["first_use"], "cache": "/b"}}, ["first_use"])
        == []
    )
    assert resume.differences(
        was, {"first_use": {**was["first_use"], "budget_s": 30.0}}, ["first_use"]
    )


def test_a_shape_is_done_only_where_one_run_timed_every_config():
    planned = {A.id: {SMALL.id, WIDE.id}, B.id: {SMALL.id, WIDE.id}}
    runs = [
        _run("r1", META, [(A, SMALL), (A, WIDE), (B, SMALL)]),  # B cut short
        _run("r2", META, [(B, WIDE)]),  # B's other config, in another run
    ]
    done = resume.sweep_done(runs, META, KEYS, planned)
    assert done.runs == {A.id: "r1"}
    assert "1 of 2 shapes already timed whole (run r1)" in done.line(2)


def test_runs_taken_another_way_count_for_nothing():
    planned = {A.id: {SMALL.id}}
    runs = [_run("r1", {**META, "seed": 7}, [(A, SMALL)])]
    assert resume.sweep_done(runs, META, KEYS, planned).runs == {}
    assert resume.sweep_done([_run("r2", META, [(A, WIDE)])], META, KEYS, {A.id: None}).runs == {
        A.id: "r2"
    }  # a first-use pick: whatever config the run picked
