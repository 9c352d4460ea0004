"""Tuning on first use (``harness.measure.first_use``) on the CPU: the candidate plan,
the wall-clock budget under a fake clock, the progress lines, and the answer's order
(table, first-use cache, tuned now, heuristic) with a fake timer."""

import re
from dataclasses import dataclass

import pytest

from harness.measure import first_use
from harness.measure.first_use import Budget, plan, progress_line, run_budgeted, tuned_config
from harness.measure.first_use_cache import CacheFile
from kernels import GemmConfig, GemmShape, tuned
from kernels.tuned import FITTED, THIN, TILES, candidates, case_shape, heuristic, lookup

SMS = 132
OFF_TABLE = GemmShape(3000, 5000, 7000, "bfloat16")
SKINNY = GemmShape(32, 4096, 14336, "float16")


class FakeClock:
    """Seconds that pass only when a candidate is timed."""

    def __init__(self):
        self.now = 100.0

    def __call__(self):
        return self.now


def timer(clock, per_candidate_s, latency=lambda config: 1.0, fails=lambda config: False):
    """A ``time_config`` that takes ``per_candidate_s`` on ``clock`` and records what it
    timed."""
    timed = []

    def time_config(config):
        timed.append(config)
        clock.now += per_candidate_s
        if fails(config):
            raise RuntimeError("fake compile error\nthe rest of a long log")
        return latency(config)

    time_config.timed = timed
    return time_config


@dataclass(frozen=True)
class Device:
    name: str
    sm_count: int


def configs(n):
    return [GemmConfig(128, 128, 32, 128, s) for s in range(1, n + 1)]


@pytest.mark.parametrize("shape", [OFF_TABLE, SKINNY, GemmShape(8192, 64, 8192)])
def test_the_plan_starts_with_the_heuristic_then_spreads_over_decompositions(shape):
    pick = heuristic(shape, SMS)
    forms = tuned.forms(shape, SMS)
    full = plan(shape, SMS, 8 + 2 * len(forms))
    assert full[0] == pick
    assert len(full) == 8 + 2 * len(forms) == len(set(full))
    # The forms in turn with the spread: every form within the first two per form.
    assert set(forms) <= set(full[: 1 + 2 * len(forms)])
    spread = first_use.spread(shape, SMS, pick)
    rest = [c for c in full[1:] if c not in forms]
    assert rest == [c for c in spread if c not in forms][: len(rest)]
    # The spread itself.
    got = [pick, *spread[:7]]
    space = candidates(shape, SMS)
    assert all(c in space for c in got[1:])
    # Each decomposition's best-scored config comes before any second of one.
    groups = {}
    for c in space:
        if c != got[0]:
            groups.setdefault(first_use._structure(c), []).append(c)
    firsts = [first_use._structure(c) for c in got[1:]]
    n_first = min(len(groups), 7)
    assert len(set(firsts[:n_first])) == n_first
    for c in got[1 : 1 + n_first]:
        peers = groups[first_use._structure(c)]
        assert first_use.expected(shape, c, SMS) == max(
            first_use.expected(shape, p, SMS) for p in peers
        )
    # Decompositions in the order of their best score.
    best = [first_use.expected(shape, c, SMS) for c in got[1 : 1 + n_first]]
    assert best == sorted(best, reverse=True)
    assert plan(shape, SMS, 1) == [heuristic(shape, SMS)]


def test_a_small_budget_tries_other_tiles_and_splits_not_only_neighbours():
    # 2500 x 1800: the heuristic picks 128x128; twelve candidates reach 128x256, 256x128,
    # a persistent and a stream-K grid (the pick's neighbours alone filled sixteen).
    shape = GemmShape(2500, 1800, 4000)
    got = plan(shape, SMS, 12)
    tiles = {(c.block_m, c.block_n) for c in got}
    assert {(128, 128), (128, 256), (256, 128)} <= tiles
    assert any(c.stream_k for c in got) and any(c.persistent for c in got)
    # Long K over a small output: splits of K from 2 to 16 ways.
    long_k = plan(GemmShape(384, 384, 24576), SMS, 8)
    assert {c.split_k for c in long_k} >= {2, 4, 8, 16}


def test_the_score_of_a_listed_tile_is_its_efficiency_and_others_scale_by_reuse():
    nn, nt = GemmShape(2048, 2048, 2048), GemmShape(2048, 2048, 2048, layout="NT")
    for tile in TILES:
        assert first_use.efficiency(nn, tile.config) == tile.efficiency
    # A fitted tile's efficiency is its layout's; a width that NN drops (144: no 128-byte
    # swizzle) is scaled by reuse there.
    for tile in FITTED:
        shape = nn if "NN" in tile.layouts else nt
        assert first_use.efficiency(shape, tile.config) == tile.efficiency
    odd = GemmConfig(128, 144, 64, 256, 4, policy="row")
    assert first_use.efficiency(nt, odd) == 0.92
    assert first_use.efficiency(nn, odd) != 0.92
    # The thin tile's efficiency came from the same rule: half of 128x128's reuse.
    guess = first_use.efficiency(nn, GemmConfig(64, 64, 64, 128, 3))
    assert guess == pytest.approx(THIN.efficiency, abs=0.01)
    assert first_use.efficiency(nn, GemmConfig(64, 256, 64, 128, 3)) > guess


def test_the_budget_stops_the_run_and_keeps_the_best_so_far():
    clock = FakeClock()
    time_config = timer(clock, 10.0, latency=lambda c: {2: 0.5}.get(c.num_stages, 1.0))
    outcome = run_budgeted(configs(6), time_config, 25.0, clock=clock)
    # Starts at 0, 10 and 20 s; at 30 s the budget is spent.
    assert len(time_config.timed) == 3 == len(outcome.tried)
    assert outcome.best.config == configs(6)[1].id and outcome.best.latency_ms == 0.5
    assert outcome.spent_s == 30.0
    assert outcome.spent_s <= 25.0 + 10.0  # never more than one candidate past the budget


def test_a_slow_first_candidate_is_the_only_one_and_wins():
    clock = FakeClock()
    time_config = timer(clock, 90.0)
    outcome = run_budgeted(configs(4), time_config, 30.0, clock=clock)
    assert [t.config for t in outcome.tried] == [configs(1)[0].id]
    assert outcome.best == outcome.tried[0]


def test_within_the_budget_every_candidate_runs_and_failures_are_recorded():
    clock = FakeClock()
    time_config = timer(clock, 1.0, fails=lambda c: c.num_stages == 1)
    outcome = run_budgeted(configs(4), time_config, 60.0, clock=clock)
    assert len(outcome.tried) == 4
    failed = outcome.tried[0]
    assert failed.latency_ms is None
    assert failed.error == "RuntimeError: fake compile error"  # the first line only
    assert outcome.best.config == configs(4)[1].id


def test_progress_is_one_line_per_candidate_with_latency_best_and_time_left():
    clock, steps = FakeClock(), []
    latencies = {1: 0.9, 2: 0.7, 3: 0.8}
    time_config = timer(clock, 5.0, latency=lambda c: latencies[c.num_stages])
    time_config_failing = timer(clock, 5.0, fails=lambda c: True)
    run_budgeted(configs(3), time_config, 60.0, clock=clock, report=steps.append)
    lines = [progress_line(s) for s in steps]
    assert len(lines) == 3
    pattern = r"\[(\d)/3\] (b\S+) +(\d\.\d{4}) ms; best (b\S+) (\d\.\d{4}) ms; (\d+) s left"
    parsed = [re.fullmatch(pattern, line).groups() for line in lines]
    assert [p[0] for p in parsed] == ["1", "2", "3"]
    assert [p[2] for p in parsed] == ["0.9000", "0.7000", "0.8000"]
    assert [p[4] for p in parsed] == ["0.9000", "0.7000", "0.7000"]  # best so far
    assert [p[3] for p in parsed][1:] == [configs(3)[1].id] * 2
    assert [p[5] for p in parsed] == ["55", "50", "45"]
    steps.clear()
    run_budgeted(configs(1), time_config_failing, 2.0, clock=clock, report=steps.append)
    assert progress_line(steps[0]) == (
        f"[1/1] {configs(1)[0].id:<28} FAILED RuntimeError: fake compile error; best none yet; "
        "0 s left"
    )


@pytest.mark.parametrize(
    "fields, message",
    [
        ({"seconds": 0}, "Budget.seconds=0: must be a finite number of seconds > 0"),
        ({"seconds": float("inf")}, "Budget.seconds=inf"),
        ({"seconds": True}, "Budget.seconds=True"),
        ({"candidates": 0}, "Budget.candidates=0: must be an int >= 1"),
        ({"candidates": 2.0}, "Budget.candidates=2.0"),
    ],
)
def test_a_bad_budget_names_the_field_and_the_rule(fields, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        Budget(**fields)


@pytest.fixture
def tilelang_version(monkeypatch):
    versions = ["0.1.15"]
    monkeypatch.setattr(first_use, "_tilelang_version", lambda: versions[0])
    return versions


def _never(config):
    raise AssertionError(f"timed {config.id}, but nothing should be tuned")


def test_a_tuned_case_comes_from_the_table_and_nothing_is_timed(tmp_path, tilelang_version):
    shape = case_shape("square4096", "float16")
    cache = CacheFile(tmp_path, "NVIDIA H200", SMS)
    pick = tuned_config(shape, Device("NVIDIA H200", SMS), cache=cache, time_config=_never)
    assert (pick.config, pick.source) == (lookup(shape, "NVIDIA H200").config, "table")
    assert not cache.path.exists()


def test_an_off_table_shape_is_tuned_once_recorded_then_read_back(tmp_path, tilelang_version):
    device, clock, said = Device("NVIDIA H200", SMS), FakeClock(), []
    cache = CacheFile(tmp_path, device.name, SMS)
    third = plan(OFF_TABLE, SMS, 4)[2]
    time_config = timer(clock, 3.0, latency=lambda c: 0.25 if c == third else 0.5)
    budget = Budget(seconds=100, candidates=4)
    pick = tuned_config(
        OFF_TABLE,
        device,
        budget=budget,
        cache=cache,
        say=said.append,
        time_config=time_config,
        clock=clock,
    )
    assert (pick.config, pick.source, pick.latency_ms) == (third, "tuned now", 0.25)
    assert len(time_config.timed) == 4
    assert said[0].startswith(f"{OFF_TABLE.id}: not in the table for NVIDIA H200; tuning 4")
    assert sum(line.startswith("[") for line in said) == 4
    assert said[-1].endswith(f"recorded in {cache.path}")
    entry = cache.read()[OFF_TABLE.id]
    assert (entry.config, entry.latency_ms, entry.budget_s, entry.spent_s) == (third, 0.25, 100, 12)
    assert [t.config for t in entry.tried] == [c.id for c in plan(OFF_TABLE, SMS, 4)]
    assert entry.tilelang == "0.1.15"
    # The pick carries what it was chosen over, as timed, for the command's record.
    assert pick.tried == entry.tried and [t.latency_ms for t in pick.tried].count(0.25) == 1
    again = tuned_config(OFF_TABLE, device, cache=cache, time_config=_never)
    assert (again.config, again.source, again.latency_ms) == (third, "first-use cache", 0.25)
    assert again.tried == entry.tried
    # Another TileLang: the entry is stale, and tuned again.
    tilelang_version[0] = "0.1.16"
    retimed = timer(clock, 1.0)
    later = tuned_config(OFF_TABLE, device, budget=budget, cache=cache, time_config=retimed)
    assert later.source == "tuned now" and len(retimed.timed) == 4
    assert cache.read()[OFF_TABLE.id].tilelang == "0.1.16"


def test_when_every_candidate_fails_the_heuristic_is_used_and_nothing_recorded(
    tmp_path, tilelang_version
):
    cache = CacheFile(tmp_path, "NVIDIA H200", SMS)
    failing = timer(FakeClock(), 1.0, fails=lambda c: True)
    pick = tuned_config(
        SKINNY,
        Device("NVIDIA H200", SMS),
        budget=Budget(candidates=3),
        cache=cache,
        say=lambda line: None,
        time_config=failing,
    )
    assert (pick.config, pick.source) == (heuristic(SKINNY, SMS), "heuristic")
    assert len(failing.timed) == 3 and not cache.path.exists()


def test_the_default_cache_is_the_devices_file_in_the_cache_folder(
    tmp_path, monkeypatch, tilelang_version
):
    monkeypatch.setenv("TILELANG_GEMM_PERF_CACHE", str(tmp_path))
    device = Device("NVIDIA H100 80GB HBM3", 132)
    pick = tuned_config(
        SKINNY,
        device,
        budget=Budget(candidates=1),
        say=lambda line: None,
        time_config=lambda config: 0.1,
    )
    assert pick.path == tmp_path / "nvidia-h100-80gb-hbm3-132sm.json" and pick.path.exists()


class _FakeCase:
    """Stands in for ``harness.measure.cases.Case``: every check passes; timing records
    the backend it was asked for and answers by config, or raises where CUPTI is off."""

    calls: list = []
    cupti = True

    def __init__(self, shape, seed=0):
        self.shape = shape

    def check(self, config, seed=1):
        @dataclass
        class Ok:
            ok: bool = True

        return Ok()

    def time_tilelang(self, config, backend, **timing):
        from harness.measure.kernel_timer import CuptiUnavailable

        type(self).calls.append((config.id, backend, timing))
        if backend == "cupti" and not type(self).cupti:
            raise CuptiUnavailable("torch.profiler recorded no CUDA kernels")

        @dataclass
        class Timing:
            median_ms: float

        return Timing(0.01 * config.split_k)


@pytest.mark.parametrize("cupti", [True, False])
def test_candidates_are_ranked_by_cupti_kernel_time_or_events_where_it_records_none(
    monkeypatch, cupti
):
    """The off-table record measures kernel time by CUPTI (``versus``): first-use tuning
    ranks by the same; where CUPTI records nothing it says so once and uses events."""
    import harness.measure.cases as cases

    monkeypatch.setattr(cases, "Case", _FakeCase)
    monkeypatch.setattr(_FakeCase, "calls", [])
    monkeypatch.setattr(_FakeCase, "cupti", cupti)
    said = []
    timer = first_use.gpu_timer(SKINNY, say=said.append)
    configs = [GemmConfig(64, 64, 128, 128, 6, split_k=s) for s in (2, 1, 4)]
    got = [timer(c) for c in configs]
    assert got == [0.02, 0.01, 0.04]
    backends = [backend for _, backend, _ in _FakeCase.calls]
    if cupti:
        assert backends == ["cupti"] * 3 and not said
    else:
        # The first candidate tries CUPTI once; it and the rest are then timed by events.
        assert backends == ["cupti", "event", "event", "event"]
        assert len(said) == 1 and "ranking by CUDA events" in said[0]
    assert all(timing == first_use.QUICK for _, _, timing in _FakeCase.calls)


def test_an_exchanged_config_is_a_decomposition_of_its_own():
    """A plain 64x64 tile and the exchanged 64x64 (M = 50 rounds to 64 rows) differ in
    the work's layout: the first-use plan spreads over both."""
    plain = GemmConfig(64, 64, 128, 128, 4)
    swapped = GemmConfig(64, 64, 128, 128, 4, swap_ab=True)
    assert first_use._structure(plain) != first_use._structure(swapped)
