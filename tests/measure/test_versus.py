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
