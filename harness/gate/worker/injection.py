"""Test-only (the gate self-test): the worker's delayed kernels. A benchmark's kernel is
built again with a delay (``kernels.compile_gemm(..., delay=True)``: every block spins on
the SM clock before its pipeline starts), whose cycles are calibrated until the slowdown
the gate's own measurement sees is the fraction asked for (``harness.gate.inject``), or
set as ``--inject-cycles`` gives them. One progress line per calibration step."""

import importlib
import inspect
import sys
import time
from pathlib import Path

import common

inject = common.inject
records = common.records


def sleep_cycles_per_ms(median_ms) -> float:
    """GPU clock cycles that ``torch.cuda._sleep`` spins per millisecond, timed now by
    ``median_ms(fn)``: the SM clock the kernels' test-only delay counts in."""
    import torch

    cycles = 2_000_000
    return cycles / median_ms(lambda: torch.cuda._sleep(cycles))


def delayed_kernel(data, config):
    """The test-only delayed build of ``data``'s kernel under ``config``, by the
    revision's own code (the one on ``sys.path`` now): the dense GEMM's
    ``kernels.compile_gemm(..., delay=True)``, or another family's operator's ``delayed``.
    A family without one is skipped (``NotImplementedError``, the self-test lists it with
    this reason) rather than measured without a delay."""
    kernels = importlib.import_module("kernels")
    compile_gemm = getattr(kernels, "compile_gemm", None)
    if compile_gemm is None or "delay" not in inspect.signature(compile_gemm).parameters:
        raise RuntimeError("this revision's kernels have no test-only delay to inject with")
    gemm_shape = getattr(kernels, "GemmShape", None)
    if gemm_shape is None or isinstance(data.shape, gemm_shape):
        return compile_gemm(data.shape, config, delay=True)
    try:
        registry = importlib.import_module("harness.ops.registry")
        delayed = getattr(registry.operator_for(data.shape), "delayed", None)
    except (ImportError, ValueError):
        delayed = None
    if delayed is None:
        raise NotImplementedError(
            f"{type(data.shape).__name__}: this family's kernel has no test-only delay "
            "(an operator's ``delayed``); the self-test cannot inject into it"
        )
    return delayed(data.shape, config)


def sm_count() -> int:
    """The visible GPU's SMs, read from the device (``DeviceSpec.read``)."""
    import torch

    return common.device.DeviceSpec.read(torch.cuda.current_device()).sm_count


def flush_ms() -> float:
    """GPU time (ms) of one L2 flush as the paired timer does it before every launch,
    timed now with CUDA events over a few flushes."""
    import torch

    interleave = common.interleave
    cache = torch.empty(interleave.FLUSH_BYTES // 4, dtype=torch.int, device="cuda")
    interleave.kernel_timer.flush(cache)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(10):
        interleave.kernel_timer.flush(cache)
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / 10


def injection_clock(median_ms) -> tuple[float, int, float]:
    """What calibrating a delay needs of the GPU, read once per process: its SM clock in
    cycles per ms (``median_ms`` times the spin), its SMs, and one flush's ms."""
    return sleep_cycles_per_ms(median_ms), sm_count(), flush_ms()


def calibrate_delay(
    kernel,
    plain,
    fraction: float,
    seen_of,
    clock,
    name: str,
    sides: int = 2,
    unit: int = 1,
    recheck: bool = False,
) -> dict:
    """Set ``kernel.delay_cycles`` so that the delayed kernel is slower than ``plain`` by
    ``fraction`` as ``seen_of(count)`` measures it, ``count`` steps of ``unit`` launches
    a side (paired: trials) with ``sides`` kernels launched in turn, within the budget of
    ``inject.step_trials`` (``inject.calibrate``); ``clock`` is (cycles per ms, SMs,
    flush ms). Each step prints a line (benchmark ``name``, step, cycles, what it saw,
    how long it took), so a long calibration shows itself.

    ``recheck``: the kernel's cycles were calibrated before and the mix of delays has
    changed since (another side's was set): one step measures them as they are, and they
    stay where that is still the request within ``inject.CALIBRATION_TOLERANCE``;
    otherwise the calibration goes on from that step."""
    cycles_per_ms, sms, flush = clock
    base_ms = common.paired_median_ms(plain, launches=20)
    count = inject.step_trials(base_ms, flush, sides, unit)
    done = []

    def seen() -> float:
        start = time.perf_counter()
        got = seen_of(count)
        done.append(got)
        what = "recheck" if recheck and len(done) == 1 else f"step {len(done)}"
        print(
            f"  {name}: injection {what}/{inject.MAX_STEPS}: "
            f"{kernel.delay_cycles} cycles, {count * unit} launches a side, seen {got:+.3%} "
            f"for {fraction:+.2%} ({time.perf_counter() - start:.2f} s)",
            file=sys.stderr,
            flush=True,
        )
        return got

    first = []
    if recheck:
        first = [(kernel.delay_cycles, seen())]
        if inject.within(first[0][1], fraction, inject.CALIBRATION_TOLERANCE):
            return {
                "requested": fraction,
                "cycles": first[0][0],
                "seen": first[0][1],
                "steps": first,
            }
    return inject.calibrate(kernel, fraction, base_ms, (cycles_per_ms, sms), seen, first)


def set_delay(kernel, plain, fraction, seen_of, clock, name, cycles, sides=2, unit=1, before=None):
    """The ``records.Injection`` of benchmark ``name``: its cycles as given
    (``--inject-cycles``: ``cycles`` maps each injected fraction to its benchmarks'
    cycles), or calibrated now where none are given (``calibrate_delay``). ``before``: the
    record of an earlier calibration of this kernel, to recheck (its steps are kept)."""
    if cycles is not None:
        got = inject.given(kernel, name, fraction, cycles[fraction])
    else:
        again = before is not None
        got = calibrate_delay(kernel, plain, fraction, seen_of, clock, name, sides, unit, again)
    steps = tuple((int(c), float(s)) for c, s in got["steps"])
    if before is not None:
        steps = before.steps + steps
    return records.Injection(got["requested"], got["cycles"], got["seen"], steps)


def cycles_of(parser, paths, fractions):
    """The ``--inject-cycles`` files' cycles, ``{fraction: {benchmark: cycles}}`` (None
    without any), checked against the fractions asked for (``inject.cycles_option``)."""
    return inject.cycles_option(parser, paths, fractions) if paths else None


def cycles_option(parser) -> None:
    parser.add_argument(
        "--inject-cycles",
        type=Path,
        action="append",
        default=None,
        metavar="FILE",
        help="test-only, with an injection: the delay cycles per benchmark a calibration "
        "found (the self-test writes it), one file per injected slowdown; set them instead "
        "of calibrating",
    )
