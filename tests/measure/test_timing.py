"""The timing path's stopping rule and throttle filter, with a fake batch and a mocked
NVML, on the CPU."""

import random
import sys
import types

import pytest

from harness.measure import gpu_state, metrics
from harness.measure.gpu_state import GpuState
from harness.measure.timing import measure
from tests.fakes import FakeBatch, FakeNvml, fake_pynvml


def _state(clock=1980, reasons=()):
    return GpuState(clock, 1980, 60, 500.0, tuple(reasons))


def test_median_rsd_tracks_noise_and_sample_count():
    rng = random.Random(1)
    small = [rng.gauss(1.0, 0.01) for _ in range(100)]
    big = [rng.gauss(1.0, 0.01) for _ in range(10000)]
    # sqrt(pi/2) * 0.01 / sqrt(n)
    assert metrics.median_rsd(small) == pytest.approx(0.00125, rel=0.3)
    assert metrics.median_rsd(big) == pytest.approx(0.000125, rel=0.1)
    # A wild outlier barely moves it.
    assert metrics.median_rsd(small + [50.0]) == pytest.approx(metrics.median_rsd(small), rel=0.1)


def test_quiet_samples_stop_after_the_first_round():
    batch = FakeBatch(noise=0.001)
    t = measure(lambda: None, repeat=50, target_rsd=0.005, batch=batch)
    assert batch.calls == 1 and t.target_met and t.median_rsd <= 0.005 and len(t.samples_ms) == 50


def test_noisy_samples_take_more_rounds_until_the_target():
    batch = FakeBatch(noise=0.05, seed=2)
    t = measure(lambda: None, repeat=50, target_rsd=0.005, max_rounds=40, batch=batch)
    # sqrt(pi/2) * 0.05 / sqrt(n) <= 0.005 needs n ~ 157 samples: three or four rounds of 50.
    assert t.target_met and batch.calls >= 3 and len(t.samples_ms) == 50 * batch.calls


def test_round_cap_reports_the_target_missed():
    batch = FakeBatch(noise=0.2, seed=3)
    t = measure(lambda: None, repeat=20, target_rsd=0.001, max_rounds=4, batch=batch)
    assert batch.calls == 4 and t.target_met is False and t.median_rsd > 0.001


def test_without_a_target_rounds_are_fixed():
    batch = FakeBatch(noise=0.2, seed=4)
    t = measure(lambda: None, repeat=10, rounds=3, batch=batch)
    assert batch.calls == 3 and t.target_met is None and len(t.samples_ms) == 30


def test_throttled_batches_are_discarded_and_retaken():
    batch = FakeBatch(noise=0.001, seed=5)
    nvml = FakeNvml([_state(reasons=["power cap"]), _state(clock=900), _state()])
    t = measure(lambda: None, repeat=10, batch=batch, nvml=nvml)
    assert batch.calls == 3 and t.discarded == 2 and not t.throttled
    assert len(t.samples_ms) == 10 and t.clocks_mhz == (1980, 900, 1980)


def test_retakes_are_bounded_then_flagged():
    batch = FakeBatch(noise=0.001, seed=6)
    hot = [_state(reasons=["thermal (hardware)"]), _state(reasons=["power cap"])]
    nvml = FakeNvml(hot * 3)
    t = measure(lambda: None, repeat=10, batch=batch, nvml=nvml, max_retakes=2)
    assert batch.calls == 3 and t.discarded == 2 and t.throttled and len(t.samples_ms) == 10
    assert t.throttle_reasons == ("thermal (hardware)", "power cap")


def test_a_reason_that_persists_through_a_retake_is_kept_and_flagged():
    # A large GEMM at the card's power cap: retaking it again would only spend time.
    batch = FakeBatch(noise=0.001, seed=7)
    nvml = FakeNvml([_state(reasons=["power cap"])])
    t = measure(lambda: None, repeat=10, rounds=2, batch=batch, nvml=nvml, max_retakes=3)
    assert batch.calls == 3 and t.discarded == 1 and t.throttled and len(t.samples_ms) == 20
    assert t.throttle_reasons == ("power cap",)


def test_the_state_of_a_window_is_what_most_readings_saw():
    readings = [
        _state(clock=700),  # the ramp from idle as the batch starts
        _state(clock=1755, reasons=["power cap"]),
        _state(clock=1980, reasons=["power cap"]),
        _state(clock=1980, reasons=["thermal (software)"]),  # once: a flicker
    ]
    state = gpu_state.summarise(readings)
    assert state.sm_clock_mhz == 1980 and state.min_sm_clock_mhz == 700
    assert state.reasons == ("power cap",) and state.throttled() == "power cap"
    assert gpu_state.summarise([_state(clock=700), _state(), _state()]).throttled() is None
    with pytest.raises(ValueError, match="readings"):
        gpu_state.summarise([])


def test_idle_gaps_between_launches_raise_no_warning():
    """A trial of a small kernel: most readings land while the GPU idles between launches
    (345 MHz, the driver flagging its power cap), a few while the kernels run at full
    clock. The kernels ran unthrottled, so nothing is flagged; the lowest reading is kept
    for the record."""
    idle = [_state(clock=345, reasons=["power cap"]) for _ in range(9)]
    state = gpu_state.summarise([*idle, _state(), _state(clock=1965)])
    assert state.sm_clock_mhz == 1980 and state.min_sm_clock_mhz == 345
    assert state.reasons == () and state.throttled() is None


def test_a_trial_that_never_reached_its_clock_is_flagged():
    readings = [_state(clock=345), _state(clock=1400, reasons=["power cap"]), _state(clock=1380)]
    state = gpu_state.summarise(readings)
    assert state.throttled() == "power cap"
    assert gpu_state.summarise([_state(clock=345), _state(clock=1400)]).throttled() == (
        "SM clock 1400 MHz < 80% of max"
    )
    hot = [_state(clock=1980, reasons=["thermal (hardware)"])] * 2 + [_state(clock=1900)]
    assert gpu_state.summarise(hot).throttled() == "thermal (hardware)"


@pytest.mark.parametrize(
    "kwargs, field",
    [
        ({"target_rsd": 0.0}, "target_rsd"),
        ({"target_rsd": 2.0}, "target_rsd"),
        ({"max_rounds": 0}, "max_rounds"),
        ({"budget_s": -1}, "budget_s"),
        ({"max_retakes": -1}, "max_retakes"),
    ],
)
def test_stopping_options_are_validated(kwargs, field):
    with pytest.raises(ValueError, match=field):
        measure(lambda: None, batch=FakeBatch(0.01), **kwargs)


def test_nvml_reader_decodes_throttle_reasons(monkeypatch):
    fake = fake_pynvml()
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    reader = gpu_state.open_nvml(0)
    state = reader.read()
    assert state == GpuState(1755, 1980, 71, 690.0, ("power cap",))  # 0x1 (idle) ignored
    assert state.throttled() == "power cap" and reader.driver() == "580.159.04"
    assert GpuState(1500, 1980, 60, 300.0, ()).throttled().startswith("SM clock 1500 MHz")
    assert GpuState(1900, 1980, 60, 300.0, ()).throttled() is None


def test_the_reader_watches_the_gpu_while_the_work_runs(monkeypatch):
    import time

    clocks = iter([600] + [1980] * 1000)  # idle at the first reading, busy after
    fake = fake_pynvml(clock=lambda h, c: next(clocks), reasons=0)
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    reader = gpu_state.open_nvml(0)
    result, state = reader.during(lambda: time.sleep(0.05) or 42, interval_s=0.002)
    assert result == 42 and state.sm_clock_mhz == 1980 and state.throttled() is None


@pytest.mark.parametrize(
    "visible, cuda_index, expect",
    [
        (None, 0, 0),
        ("", 1, 1),
        ("1", 0, 1),  # a worker pinned to GPU 1 reads GPU 1, not GPU 0
        ("3,2", 1, 2),
        ("GPU-8a1b, GPU-77ef", 1, "GPU-77ef"),
    ],
)
def test_nvml_device_follows_cuda_visible_devices(monkeypatch, visible, cuda_index, expect):
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    if visible is not None:
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", visible)
    assert gpu_state.nvml_device(cuda_index) == expect


def test_a_child_is_pinned_to_the_same_gpu_through_the_visible_list(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,3")
    # visible GPU 1 of a process that sees 2,3 is the host's GPU 3, not GPU 1
    assert gpu_state.visible_entry(1) == "3"
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    assert gpu_state.visible_entry(1) == "1"


def test_nvml_device_rejects_an_index_past_the_visible_list():
    with pytest.raises(ValueError, match="cuda_index=2"):
        gpu_state.nvml_device(2, visible="0,1")


def test_reader_opens_the_pinned_gpu(monkeypatch):
    opened = []
    fake = types.SimpleNamespace(
        nvmlInit=lambda: None,
        nvmlDeviceGetHandleByIndex=lambda i: opened.append(i) or "h",
        nvmlDeviceGetMaxClockInfo=lambda h, c: 1980,
        NVML_CLOCK_SM=0,
    )
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
    assert gpu_state.open_nvml(0) is not None and opened == [1]


def test_no_nvml_means_no_reader(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import fails
    assert gpu_state.open_nvml(0) is None
