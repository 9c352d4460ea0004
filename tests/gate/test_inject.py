"""The self-test's injection math on synthetic numbers: the first guess of delay cycles,
the correction steps, and when a seen injection misses its request."""

import json
import math
import re

import pytest

from harness.gate import decide as gd
from harness.gate import inject


def test_first_guess_spreads_the_fraction_over_the_waves():
    # 2% of a 9 us kernel at 1980 cycles/us, one wave: 356 cycles per block.
    assert inject.initial_cycles(0.02, 0.009, 1.98e6, 1) == 356
    # 1024 blocks over 132 SMs: 8 waves, each block spins an eighth as long.
    n = inject.waves(1024, 132)
    assert n == 8
    assert inject.initial_cycles(0.01, 1.6, 1.98e6, n) == round(0.01 * 1.6 * 1.98e6 / 8)


@pytest.mark.parametrize(
    "args, field",
    [
        ((0.0, 1.0, 1e6, 1), "fraction=0.0"),
        ((1.5, 1.0, 1e6, 1), "fraction=1.5"),
        ((0.02, 0.0, 1e6, 1), "base_ms=0.0"),
        ((0.02, 1.0, 1e6, 0), "waves=0"),
    ],
)
def test_first_guess_rejects_bad_input(args, field):
    with pytest.raises(ValueError, match=field):
        inject.initial_cycles(*args)


def test_waves_rejects_an_empty_grid():
    with pytest.raises(ValueError, match="blocks=0"):
        inject.waves(0, 132)


@pytest.mark.parametrize(
    "model",
    [
        lambda c: 2e-6 * c,  # proportional
        lambda c: 0.004 + 1e-6 * c,  # a fixed cost of the spin
        lambda c: 1e-6 * c - 0.002,  # the first cycles hide in the pipeline's fill
        lambda c: 3e-6 * c**0.9,  # blocks sharing an SM: less than proportional
    ],
)
def test_correction_converges_on_synthetic_kernels(model):
    """From the first guess (here far off: the models are not proportional), the steps
    reach the request within the worker's calibration tolerance, and the kernel is left
    at the closest step's cycles."""

    class Kernel:
        blocks, delay_cycles = 1024, 0

    kernel = Kernel()
    record = inject.calibrate(kernel, 0.02, 0.5, (1.98e6, 132), lambda: model(kernel.delay_cycles))
    assert record["steps"][0][0] == inject.initial_cycles(0.02, 0.5, 1.98e6, 8)
    assert len(record["steps"]) < inject.MAX_STEPS
    assert inject.within(record["seen"], 0.02, inject.CALIBRATION_TOLERANCE), record
    assert kernel.delay_cycles == record["cycles"] and model(record["cycles"]) == record["seen"]


def test_a_step_that_saw_nothing_doubles_the_cycles():
    assert inject.next_cycles([(500, 0.0)], 0.02) == 1000
    assert inject.next_cycles([(500, -0.001)], 0.02) == 1000
    with pytest.raises(ValueError, match="steps"):
        inject.next_cycles([], 0.02)


def test_miss_is_silent_within_the_tolerance_and_says_why_beyond():
    assert inject.miss(0.0229, 0.02) is None and inject.miss(0.0171, 0.02) is None
    why = inject.miss(0.0587, 0.02)
    assert "+5.87% for +2.00% injected, off by +3.87 pp (tolerance ±0.3 pp)" in why
    assert inject.miss(None, 0.02) == "no injected ratio was measured"


def test_a_compile_error_keeps_the_compilers_message():
    """TileLang raises a failed build as ``RuntimeError:`` then the kernel's whole source,
    the compiler's message last: the record keeps both ends, the status line the message."""
    source = "\n".join(f"  line {i} of the kernel;" for i in range(200))
    err = RuntimeError(f"\n{source}\nkernel.cu(12): error: identifier tl_x is undefined")
    text = inject.error_text(err)
    assert len(text) <= inject.ERROR_CHARS + len(" [...] ")
    assert text.startswith("RuntimeError:") and text.endswith("tl_x is undefined")
    assert inject.first_line(text) == (
        "RuntimeError: kernel.cu(12): error: identifier tl_x is undefined"
    )
    assert inject.first_line("ValueError: a\n  b error") == "ValueError: a"
    assert inject.error_text(ValueError("short")) == "ValueError: short"


def _noisy_calibrations(sigma: float, trials: int = 200) -> list[float]:
    """The true slowdown left set after ``inject.calibrate`` on seeded noisy linear
    kernels (a 2% request, per-step noise of ``sigma``), one per trial."""
    import random

    rng = random.Random(22)
    models = [(0.0, 2e-5), (0.004, 1e-5), (-0.002, 1e-5), (0.001, 4e-5)]
    got = []
    for i in range(trials):
        a, b = models[i % len(models)]

        class Kernel:
            blocks, delay_cycles = 132, 0

        kernel = Kernel()

        def seen(k=kernel, a=a, b=b):
            return a + b * k.delay_cycles + rng.gauss(0.0, sigma)

        inject.calibrate(kernel, 0.02, 0.5, (2000.0, 132), seen)  # first guess: 1000 cycles
        got.append(a + b * kernel.delay_cycles)
    return got


def test_calibration_with_the_per_step_pair_counts_lands_within_its_tolerance():
    """With the noise the per-step pair counts give (0.03 pp per step), the calibration
    leaves the kernel within CALIBRATION_TOLERANCE of the request in >= 95% of seeded
    trials."""
    quiet = _noisy_calibrations(0.0003)
    tight = sum(inject.within(t, 0.02, inject.CALIBRATION_TOLERANCE) for t in quiet)
    assert tight >= 0.95 * len(quiet)


def test_a_correction_step_moves_at_most_the_step_range():
    # A step that saw almost nothing would ask for 200x the cycles: 4x at most.
    assert inject.next_cycles([(100, 0.0001)], 0.02) == 400
    assert inject.next_cycles([(1000, 0.5)], 0.02) == 250


def test_the_next_guess_fits_every_step_not_the_last_two():
    """The H200's noisy steps: 175 cycles read 4.6% and 195 read 2.2%; the secant through
    those two has a negative slope. The line through all steps averages them."""
    steps = [(195, 0.0223), (175, 0.0456), (77, 0.0097), (105, 0.0033)]
    a, b = inject.fit_line(steps)
    assert b > 0
    assert inject.next_cycles(steps, 0.02) == round((0.02 - a) / b)
    assert inject.fit_line([(100, 0.01), (100, 0.02)]) is None  # one distinct cycles
    assert inject.fit_line([(100, 0.02), (200, 0.01)]) is None  # no positive slope
    # The step kept is judged by the line, not by one lucky reading.
    assert inject.closest([(100, 0.01), (200, 0.0199), (300, 0.03)], 0.02) == (200, 0.0199)
    assert inject.closest([(100, 0.010), (200, 0.026), (300, 0.0199), (400, 0.04)], 0.02)[0] == 200


def test_a_step_measures_launches_for_a_time_budget():
    assert inject.step_launches(0.009) == inject.MAX_LAUNCHES  # a 9 us kernel: the cap
    assert inject.step_launches(0.05) == 1000  # 50 ms of kernel time
    assert inject.step_launches(2.0) == inject.MIN_LAUNCHES
    with pytest.raises(ValueError, match="base_ms=0"):
        inject.step_launches(0)
    with pytest.raises(ValueError, match="sides=0"):
        inject.step_launches(0.009, 0.1, 0)


def test_a_paired_step_is_whole_trials_within_the_budget_of_every_side():
    """The paired gate's trials launch every side (base, head, injected), each after a
    flush: the GPU budget counts three of each, and a step is whole trials."""
    flush, launches = 0.13, 6
    trials = inject.step_trials(0.009, flush, 3, launches)
    per_side = math.floor(inject.STEP_GPU_BUDGET_MS / (3 * (0.009 + flush)))
    assert trials == math.ceil(per_side / launches)
    assert per_side < inject.step_launches(0.009, flush, 2)  # three sides: fewer a side
    assert inject.step_trials(2.0, flush, 3, launches) == math.ceil(inject.MIN_LAUNCHES / 6)
    with pytest.raises(ValueError, match="launches=0"):
        inject.step_trials(0.009, flush, 3, 0)


def test_a_paired_step_reads_the_gates_own_statistic():
    """The seen slowdown of a paired step is the gate's verdict ratio less one: the
    median of the per-trial ratios, not a ratio of medians."""
    ratios = [1.01, 1.03, 1.02, 1.05, 1.019]
    verdict = gd.decide(
        gd.BenchSamples(name="b", base=(1.0,), head=(1.0,), ratios=tuple(ratios)), 0.01
    )
    assert inject.trial_seen(ratios) == pytest.approx(verdict.ratio - 1.0)
    assert inject.trial_seen(ratios) == pytest.approx(0.02)
    with pytest.raises(ValueError, match="ratios"):
        inject.trial_seen([])


def test_a_step_reads_the_median_of_per_pair_ratios():
    plain = [1.0, 1.0, 2.0, 1.0, 1.0]  # a slow pair (clock dip) moves both sides
    slowed = [1.02, 1.02, 2.04, 1.5, 1.02]  # and one outlier launch
    assert inject.pair_seen(plain, slowed) == pytest.approx(0.02)
    with pytest.raises(ValueError, match="plain_ms, slowed_ms"):
        inject.pair_seen([1.0], [1.0, 1.0])


def test_a_step_counts_the_flushes_in_its_gpu_time_budget():
    """A 9 us kernel is timed after a ~0.13 ms flush: 2000 pairs were 4000 flushes, over
    half a second of GPU time before the profiler's own cost. The budget counts them."""
    flush = 0.13
    launches = inject.step_launches(0.009, flush)
    assert launches == math.floor(inject.STEP_GPU_BUDGET_MS / (2 * (0.009 + flush)))
    assert launches < inject.MAX_LAUNCHES
    assert launches * 2 * (0.009 + flush) <= inject.STEP_GPU_BUDGET_MS
    # A long kernel keeps its kernel-time rule (the GPU budget is not the tighter one).
    assert inject.step_launches(1.6, flush) == inject.step_launches(1.6) == math.ceil(50 / 1.6)
    with pytest.raises(ValueError, match="flush_ms=-1"):
        inject.step_launches(0.009, -1)


def test_calibrated_cycles_round_trip_through_their_file():
    record = inject.cycles_record(0.02, {"gemm.S(0)": 1234, "gemm.S(1)": 7})
    text = json.dumps(record)
    assert inject.read_cycles(text, [0.02]) == {"gemm.S(0)": 1234, "gemm.S(1)": 7}


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("{", "not valid JSON"),
        ("[1, 2]", "must be an object with version 1"),
        ('{"version": 1, "slowdown": "2%", "cycles": {"a": 1}}', "slowdown='2%': must be a number"),
        ('{"version": 1, "slowdown": 0.01, "cycles": {"a": 1}}', "calibrated for 1.00%, this run"),
        ('{"version": 1, "slowdown": 0.02, "cycles": {}}', "cycles: must map benchmark names"),
        ('{"version": 1, "slowdown": 0.02, "cycles": {"a": 0}}', "cycles['a']=0: must be an"),
        ('{"version": 1, "slowdown": 0.02, "cycles": {"a": 1.5}}', "cycles['a']=1.5: must be"),
        ('{"version": 1, "slowdown": 0.02, "cycles": {"a": true}}', "cycles['a']=True: must be"),
    ],
)
def test_a_bad_cycles_file_names_the_field_and_the_rule(text, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        inject.read_cycles(text, [0.02])


def test_one_cycles_file_per_injected_slowdown(tmp_path):
    """Two injected sides at 2% and 1% take one file each, keyed by the slowdown."""
    import argparse

    class Parser(argparse.ArgumentParser):
        def error(self, message):
            raise ValueError(message)

    two, one = tmp_path / "two.json", tmp_path / "one.json"
    two.write_text(json.dumps(inject.cycles_record(0.02, {"a": 50})))
    one.write_text(json.dumps(inject.cycles_record(0.01, {"a": 25})))
    got = inject.cycles_option(Parser(), [one, two], [0.02, 0.01])
    assert got == {0.02: {"a": 50}, 0.01: {"a": 25}}
    assert inject.cycles_option(Parser(), two, [0.02]) == {0.02: {"a": 50}}
    with pytest.raises(ValueError, match=re.escape("no file for the 1.00% injection")):
        inject.cycles_option(Parser(), [two], [0.02, 0.01])
    with pytest.raises(ValueError, match="another file already gives the cycles for 2.00%"):
        inject.cycles_option(Parser(), [two, two], [0.02, 0.01])
    with pytest.raises(ValueError, match=re.escape("calibrated for 1.00%, this run injects 5.00%")):
        inject.cycles_option(Parser(), [one], [0.05])


def test_given_cycles_are_set_without_measuring_and_a_missing_one_is_named():
    class Kernel:
        delay_cycles = 0

    kernel = Kernel()
    record = inject.given(kernel, "gemm.S(0)", 0.02, {"gemm.S(0)": 321})
    assert kernel.delay_cycles == 321
    assert record == {"requested": 0.02, "cycles": 321, "seen": None, "steps": []}
    with pytest.raises(RuntimeError, match=r"--inject-cycles has no cycles for gemm.S\(1\)"):
        inject.given(kernel, "gemm.S(1)", 0.02, {"gemm.S(0)": 321})


def test_the_delay_is_refused_by_name_for_a_family_without_one(worker_entry, monkeypatch):
    """Another family's combination is injected through its operator's ``delayed`` (the
    grouped GEMM's); a family without one is skipped (asv's NotImplementedError) with the
    reason, not measured undelayed."""
    from types import SimpleNamespace

    from families.grouped_gemm import op as grouped

    op = grouped.OPERATOR
    injection = worker_entry("paired").injection
    data = SimpleNamespace(shape=op.example_shape())
    config = op.configs(data.shape, None)[0]
    built = []
    monkeypatch.setattr(grouped, "compile_grouped_gemm", lambda *a, **kw: built.append(kw))
    injection.delayed_kernel(data, config)
    assert built == [{"delay": True}]
    monkeypatch.delattr(type(op), "delayed")
    with pytest.raises(NotImplementedError, match="has no test-only delay"):
        injection.delayed_kernel(data, config)
