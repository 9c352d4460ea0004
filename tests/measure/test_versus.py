"""The speedup measurement the tuner, the suite and the off-table record share, on the CPU:
its bookkeeping around a fake interleaving (the timing itself needs a GPU)."""

import pytest

from harness.measure import interleave, versus


@pytest.fixture
def fake_gpu(monkeypatch):
    """``interleave.interleaved`` answering from a script: the kernel's launches 0.5 ms a
    trial (one stray), the baseline's 0.4 ms, per trial a little slower."""
    import torch

    monkeypatch.setattr(torch.cuda, "synchronize", lambda: None)
    calls = []

    def interleaved(fns, *, trials, launches, warmup, timer="event"):
        calls.append({"trials": trials, "launches": launches, "warmup": warmup, "timer": timer})
        if timer == "cupti" and fake_gpu.no_cupti:
            raise interleave.kernel_timer.CuptiUnavailable("no kernels recorded")
        out = []
        for base in (0.5, 0.4):
            per_trial = []
            for t in range(trials):
                trial = [base * (1 + t / 100)] * launches
                trial[0] *= 3  # a stray launch, left out of the trial's center
                per_trial.append(trial)
            out.append(per_trial)
        return out

    fake_gpu.no_cupti = False
    monkeypatch.setattr(interleave, "interleaved", interleaved)
    fake_gpu.calls = calls
    return fake_gpu


def test_ratios_and_speedups_are_per_trial_centers(fake_gpu):
    got = versus.versus(lambda: None, lambda: None, trials=4)
    assert got.timer == "cupti" and len(got.kernel_ms) == 4
    assert got.kernel_ms[2] == pytest.approx(0.5 * 1.02)  # the stray is left out
    assert got.ratios == pytest.approx([1.25] * 4)
    assert got.speedups == pytest.approx([0.8] * 4) and got.speedup == pytest.approx(0.8)
    probe, trials = fake_gpu.calls
    assert probe["trials"] == 1 and probe["launches"] == interleave.LAUNCH_ROUND
    assert trials["trials"] == 4 and trials["launches"] % interleave.LAUNCH_ROUND == 0


def test_the_default_is_the_suites_trial_count(fake_gpu):
    assert len(versus.versus(lambda: None, lambda: None).ratios) == versus.TRIALS


def test_events_stand_in_where_cupti_records_nothing(fake_gpu):
    fake_gpu.no_cupti = True
    got = versus.versus(lambda: None, lambda: None, trials=3)
    assert got.timer == versus.EVENT_FALLBACK
    assert [c["timer"] for c in fake_gpu.calls] == ["event", "cupti", "event"]


def test_the_probe_times_no_first_launch(fake_gpu, monkeypatch):
    """A function's first launch in a process pays one-time costs (a module loaded, an
    algorithm chosen): the warm-up launches them untimed, before the probe whose wall time
    sets the launches per trial, so those costs do not cut the launches."""
    clock = {"now": 0.0}
    monkeypatch.setattr(versus.time, "perf_counter", lambda: clock["now"])
    launched = []

    def fn(name):
        def launch():
            if name not in launched:
                clock["now"] += 0.5  # the first launch's one-time cost, in seconds
            launched.append(name)

        return launch

    scripted = interleave.interleaved

    def interleaved(fns, *, trials, launches, warmup, timer="event"):
        clock["now"] += len(fns) * launches * 0.1e-3  # 0.1 ms a launch, its flush included
        return scripted(fns, trials=trials, launches=launches, warmup=warmup, timer=timer)

    monkeypatch.setattr(interleave, "interleaved", interleaved)
    got = versus.versus(fn("kernel"), fn("torch"), trials=2, warmup=2)
    assert launched == ["kernel", "torch", "kernel", "torch"]  # before the probe
    probe, _ = fake_gpu.calls
    assert probe["warmup"] == 0
    assert got.launches == interleave.launches_for(0.1, 0.0) > interleave.LAUNCH_ROUND


@pytest.mark.parametrize(("trials", "warmup"), [(0, 3), (2, -1), (True, 3)])
def test_bad_counts_are_refused_by_name(trials, warmup):
    with pytest.raises(ValueError, match="trials|warmup"):
        versus.versus(lambda: None, lambda: None, trials=trials, warmup=warmup)


def test_placed_shares_the_trials_over_input_sets_held_to_the_end(fake_gpu, monkeypatch):
    """Each set's launches come from ``bind(i)``; every set is held until the last one is
    measured (a freed set's memory would be the next set's: the same addresses); the
    trials are shared out, the first sets one more, and pooled in order."""
    import gc
    import weakref

    class Inputs:
        pass

    alive, shares = [], []
    real = versus.versus

    def counting(kernel, baseline, trials, *args):
        shares.append(trials)
        gc.collect()
        alive.append(sum(r() is not None for r in refs))
        return real(kernel, baseline, trials, *args)

    refs = []

    def bind(i):
        inputs = Inputs()
        refs.append(weakref.ref(inputs))
        return (lambda: inputs), (lambda: inputs)

    monkeypatch.setattr(versus, "versus", counting)
    got = versus.placed(bind, trials=10, placements=3)
    assert shares == [4, 3, 3] and alive == [1, 2, 3]
    assert len(got.kernel_ms) == len(got.baseline_ms) == 10 and got.timer == "cupti"
    # The fake's trials get slower one by one: pooled in order, each set from its start.
    assert got.kernel_ms[4] == pytest.approx(got.kernel_ms[0])
    assert got.speedup == pytest.approx(0.8)


def test_placed_names_a_count_that_cannot_be_shared(fake_gpu):
    with pytest.raises(ValueError, match=r"placements=0: must be an int >= 1"):
        versus.placed(lambda i: (None, None), trials=4, placements=0)
    with pytest.raises(ValueError, match=r"trials=2: must be an int >= placements \(3\)"):
        versus.placed(lambda i: (None, None), trials=2, placements=3)


def test_placed_reports_events_where_one_set_fell_back(fake_gpu, monkeypatch):
    real, calls = versus.versus, []

    def flaky(kernel, baseline, trials, *args):
        calls.append(1)
        fake_gpu.no_cupti = len(calls) == 2
        return real(kernel, baseline, trials, *args)

    monkeypatch.setattr(versus, "versus", flaky)
    got = versus.placed(lambda i: (lambda: None, lambda: None), trials=6, placements=3)
    assert got.timer == versus.EVENT_FALLBACK
