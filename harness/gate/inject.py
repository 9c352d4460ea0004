"""The gate self-test's injected slowdown: how many cycles of the kernel's test-only delay
(``kernels.gemm.make_gemm(..., delay=True)``) make it slower by a requested fraction, as
the gate's own timer sees it, and whether an injection missed its request.

The delay is a spin of every block on the SM's cycle counter before its pipeline starts,
so one launch of a kernel with ``blocks`` blocks over ``sms`` multiprocessors (one block
resident per SM) gains about ``waves * cycles`` of time. That gives the first guess;
the wave tail, blocks sharing an SM and what ran just before each launch make the truth
differ, so the worker then measures the slowdown the gate itself will compute and corrects
the cycles until it is within ``CALIBRATION_TOLERANCE`` of the request. In the paired gate
a step is the gate's own trials: every side of the comparison (base, head and the delayed
kernel) launched in the trial's rotation, each trial reduced to its ratio against the first
side, the seen slowdown the median of those ratios (``trial_seen``), the statistic the
gate's verdict reads. A short kernel's time depends on the launch before it, so a ratio
taken in another rotation (the delayed kernel against the plain one alone) is not the one
the gate sees. Each step's launches are held to a budget of GPU time (``step_launches``).
The self-test calibrates once and hands the cycles to its later workers in a file
(``cycles_record``, ``read_cycles``), then settles them on what its first iterations saw
(``settle``): a calibration step is one noisy sample, and the step it kept is the one
that landed inside the tolerance.

No GPU, no project imports (the gate's worker loads this file by path while
another revision's tree is on ``sys.path``).
"""

from __future__ import annotations

import json
import math
import os
import statistics
import traceback
from collections.abc import Callable, Collection, Mapping, Sequence
from pathlib import Path

# The self-test reports a detection rate only where the slowdown the gate saw is within
# this of the request (absolute, in fractions: 0.003 is 0.3 percentage points).
TOLERANCE = 0.003
# The worker's calibration aims tighter, so the self-test's own trials land inside
# TOLERANCE despite their noise.
CALIBRATION_TOLERANCE = 0.001
MAX_STEPS = 6
# After this many self-test iterations at the calibrated cycles, a benchmark whose median
# seen slowdown over them misses the request by more than SETTLE_MARGIN gets its cycles
# scaled by request / seen once, and those iterations are run again. On the H200 one
# calibration step of a 128^3 kernel scattered by about +-0.25 points: Stage128(256, 3)
# kept 171 cycles at +2.04% for 2% and the gate then saw +2.31% in 20 fresh workers (its
# calibrating worker's own trials: +2.36%); Tuned(mlp_down, bf16) kept 3159 cycles at
# +1.02% for 1% and was seen at +0.68%.
SETTLE_ITERATIONS = 3
SETTLE_MARGIN = 0.0015
# A correction step moves the cycles by at most this factor either way.
STEP_RANGE = (0.25, 4.0)
# Each step measures about this much kernel time (ms) a side, in at least MIN_LAUNCHES and
# at most MAX_LAUNCHES launches a side: a 9 us kernel gets the GPU budget below, a 2 ms
# kernel MIN_LAUNCHES.
STEP_BUDGET_MS = 50.0
MIN_LAUNCHES = 30
MAX_LAUNCHES = 4000
# A step's launches, each after its L2 flush (a 256 MB rewrite, about 0.1 ms on the H200,
# ten times a 9 us kernel), are held to about this much GPU time, so one step, its
# profiler capture included, stays within a second or two. On the H200 a 400 ms budget
# gave a 128^3 kernel 756 launches a side among four sides, and its steps scattered by
# about 0.15 points at the same cycles (+2.09% to +2.41% at 165-175 cycles): a step could
# land within CALIBRATION_TOLERANCE by luck and the gate then saw +2.30% for +2.00%. At
# 1000 ms (about 2300 launches a side) they scattered no less (+1.84% to +2.33% at 167-176
# cycles): the scatter is between steps, not within one, so more launches buy nothing,
# and the self-test settles the cycles on its own iterations instead (``settle``).
STEP_GPU_BUDGET_MS = 400.0
# The injected delay's cycles per benchmark, calibrated once and reused (``--inject-cycles``).
CYCLES_VERSION = 1
# An error as a payload records it: a compiler's failure is the kernel's whole source
# with the compiler's message at its end, so a long one keeps both ends.
ERROR_CHARS = 500


def waves(blocks: int, sms: int) -> int:
    """Rounds of blocks over the multiprocessors, one block resident per SM."""
    if blocks < 1 or sms < 1:
        raise ValueError(f"blocks={blocks}, sms={sms}: both must be >= 1")
    return math.ceil(blocks / sms)


def initial_cycles(fraction: float, base_ms: float, cycles_per_ms: float, n_waves: int) -> int:
    """Delay cycles per block that add ``fraction`` of ``base_ms`` to a kernel of
    ``n_waves`` waves on an SM clock of ``cycles_per_ms``."""
    if not 0 < fraction < 1:
        raise ValueError(f"fraction={fraction!r}: must be in (0, 1)")
    if not (base_ms > 0 and cycles_per_ms > 0 and n_waves >= 1):
        raise ValueError(
            f"base_ms={base_ms!r}, cycles_per_ms={cycles_per_ms!r}, waves={n_waves!r}: "
            "must be positive"
        )
    return max(1, round(fraction * base_ms * cycles_per_ms / n_waves))


def fit_line(steps: Sequence[tuple[int, float]]) -> tuple[float, float] | None:
    """``(a, b)`` of the least-squares line ``seen = a + b * cycles`` through every step,
    or None where it does not say which way to go (fewer than two distinct cycles, or a
    slope that is not positive: the noise outweighs what the steps spanned)."""
    n = len(steps)
    if len({c for c, _ in steps}) < 2:
        return None
    mean_c = sum(c for c, _ in steps) / n
    mean_s = sum(s for _, s in steps) / n
    sxx = sum((c - mean_c) ** 2 for c, _ in steps)
    slope = sum((c - mean_c) * (s - mean_s) for c, s in steps) / sxx
    if slope <= 0:
        return None
    return mean_s - slope * mean_c, slope


def next_cycles(steps: Sequence[tuple[int, float]], fraction: float) -> int:
    """The next cycles to try from the ``(cycles, seen slowdown)`` steps so far: where
    ``fit_line`` gives a line (the seen slowdown is close to linear in the cycles, but not
    through zero: the spin has a fixed cost), the cycles it predicts for ``fraction``, so
    every step's noise is averaged, not only the last two's; else a proportional scale of
    the last step (one that saw no slowdown doubles its cycles). The guess stays within
    ``STEP_RANGE`` times the last cycles, so one noisy step cannot throw it far."""
    if not steps:
        raise ValueError("steps: need at least one (cycles, seen) step")
    last, seen = steps[-1]
    line = fit_line(steps)
    if line is not None:
        guess = (fraction - line[0]) / line[1]
    elif seen <= 0:
        guess = 2 * last
    else:
        guess = last * fraction / seen
    low, high = STEP_RANGE
    return max(1, round(min(max(guess, low * last), high * last)))


def closest(steps: Sequence[tuple[int, float]], fraction: float) -> tuple[int, float]:
    """The step to keep: the one whose slowdown is closest to ``fraction``, judged by the
    line through all steps where there is one (a lone step's noise can put it near the
    request by luck), else by its own measurement."""
    line = fit_line(steps)
    if line is None:
        return min(steps, key=lambda step: abs(step[1] - fraction))
    return min(steps, key=lambda step: abs(line[0] + line[1] * step[0] - fraction))


def calibrate(
    kernel,
    fraction: float,
    base_ms: float,
    clock: tuple[float, int],
    seen: Callable[[], float],
    done: Sequence[tuple[int, float]] = (),
) -> dict:
    """Set ``kernel.delay_cycles`` (a kernel of ``kernel.blocks`` blocks, ``base_ms`` long
    undelayed) until ``seen()``, the slowdown measured with those cycles, is ``fraction``
    within ``CALIBRATION_TOLERANCE``, from the first guess for ``clock`` = (cycles per ms,
    SMs), or on from the steps ``done`` already measured, at most ``MAX_STEPS`` more
    measurements; the closest step (``closest``) is kept. Returns the record: requested,
    the cycles set, what they were seen to add, and every step."""
    cycles_per_ms, sms = clock
    steps: list[tuple[int, float]] = list(done)
    if steps:
        cycles = next_cycles(steps, fraction)
    else:
        cycles = initial_cycles(fraction, base_ms, cycles_per_ms, waves(kernel.blocks, sms))
    for _ in range(MAX_STEPS):
        kernel.delay_cycles = cycles
        steps.append((cycles, seen()))
        if within(steps[-1][1], fraction, CALIBRATION_TOLERANCE):
            break
        cycles = next_cycles(steps, fraction)
    cycles, got = closest(steps, fraction)
    kernel.delay_cycles = cycles
    return {"requested": fraction, "cycles": cycles, "seen": got, "steps": steps}


def settle(
    cycles: Mapping[str, int], seen: Mapping[str, Sequence[float]], fraction: float
) -> dict[str, int]:
    """``{benchmark: new cycles}`` for the benchmarks whose median ``seen`` slowdown (one
    per self-test iteration at ``cycles``) misses ``fraction`` by more than
    ``SETTLE_MARGIN``: their cycles scaled by fraction / seen (doubled where nothing was
    seen), within ``STEP_RANGE`` and at least 1. A benchmark whose cycles would not change
    (already at 1) or that has no seen slowdown is left out."""
    out = {}
    for name, now in cycles.items():
        values = seen.get(name) or []
        if not values:
            continue
        got = statistics.median(values)
        if within(got, fraction, SETTLE_MARGIN):
            continue
        guess = 2 * now if got <= 0 else now * fraction / got
        low, high = STEP_RANGE
        new = max(1, round(min(max(guess, low * now), high * now)))
        if new != now:
            out[name] = new
    return out


def step_launches(base_ms: float, flush_ms: float = 0.0, sides: int = 2) -> int:
    """Launches a side one calibration step measures, with ``sides`` kernels of about
    ``base_ms`` launched in turn, each after a flush of ``flush_ms``: ``STEP_BUDGET_MS``
    of kernel time a side, at most ``STEP_GPU_BUDGET_MS`` of GPU time (every side's
    kernel and flush), within [MIN_LAUNCHES, MAX_LAUNCHES]."""
    if not base_ms > 0:
        raise ValueError(f"base_ms={base_ms!r}: must be positive")
    if not flush_ms >= 0:
        raise ValueError(f"flush_ms={flush_ms!r}: must be >= 0")
    if isinstance(sides, bool) or not isinstance(sides, int) or sides < 1:
        raise ValueError(f"sides={sides!r}: must be an integer >= 1")
    launches = min(
        math.ceil(STEP_BUDGET_MS / base_ms),
        math.floor(STEP_GPU_BUDGET_MS / (sides * (base_ms + flush_ms))),
    )
    return max(MIN_LAUNCHES, min(MAX_LAUNCHES, launches))


def step_trials(base_ms: float, flush_ms: float, sides: int, launches: int) -> int:
    """Trials of ``launches`` launches a side that one calibration step of the paired gate
    measures: ``step_launches`` a side, rounded up to whole trials."""
    if isinstance(launches, bool) or not isinstance(launches, int) or launches < 1:
        raise ValueError(f"launches={launches!r}: must be an integer >= 1")
    return math.ceil(step_launches(base_ms, flush_ms, sides) / launches)


def trial_seen(ratios: Sequence[float]) -> float:
    """The slowdown the paired gate sees in one comparison: the median of its per-trial
    ratios (the injected side's median over the first side's, trial by trial), less one,
    the statistic its verdict reads."""
    if not ratios:
        raise ValueError("ratios: need at least one per-trial ratio")
    return statistics.median(ratios) - 1.0


def cycles_record(fraction: float, cycles: Mapping[str, int]) -> dict:
    """The file ``--inject-cycles`` reads: the delay cycles per benchmark that make its
    kernel ``fraction`` slower, as a calibration found them."""
    return {"version": CYCLES_VERSION, "slowdown": fraction, "cycles": dict(cycles)}


def read_cycles(text: str, fractions: Collection[float]) -> dict[str, int]:
    """``{benchmark: cycles}`` of a ``cycles_record`` file's ``text``, calibrated for the
    slowdown every one of ``fractions`` asks for; ValueError naming the field and the
    rule otherwise (the caller names the file and its option)."""
    slowdown, cycles = _parse_cycles(text)
    off = sorted(f for f in set(fractions) if abs(f - slowdown) > 1e-12)
    if off:
        raise ValueError(
            f"slowdown={slowdown!r}: its cycles were calibrated for {slowdown:.2%}, this run "
            f"injects {off[0]:.2%}; calibrate again (leave the option out)"
        )
    return cycles


def _parse_cycles(text: str) -> tuple[float, dict[str, int]]:
    try:
        record = json.loads(text)
    except ValueError as err:
        raise ValueError(f"not valid JSON: {err}") from None
    if not isinstance(record, dict) or record.get("version") != CYCLES_VERSION:
        raise ValueError(
            f"must be an object with version {CYCLES_VERSION}, 'slowdown' and 'cycles' "
            "(the self-test writes it)"
        )
    slowdown = record.get("slowdown")
    if isinstance(slowdown, bool) or not isinstance(slowdown, (int, float)):
        raise ValueError(f"slowdown={slowdown!r}: must be a number")
    cycles = record.get("cycles")
    if not isinstance(cycles, dict) or not cycles:
        raise ValueError("cycles: must map benchmark names to cycles, got none")
    for name, value in cycles.items():
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"cycles[{name!r}]={value!r}: must be an integer >= 1")
    return float(slowdown), dict(cycles)


def cycles_option(parser, paths, fractions: Collection[float]) -> dict[float, dict[str, int]]:
    """``{fraction: {benchmark: cycles}}`` of the ``--inject-cycles`` files ``paths`` (one
    path, or one per injected slowdown) for a run injecting ``fractions``: each file's
    slowdown must be one of them, and each of them needs exactly one file. A missing,
    unreadable or malformed file, or one without an injection to apply it to, is
    ``parser``'s usage error naming the option (exit 2), before any GPU work. The worker
    and the self-test read the option through this (``cycles_files``)."""
    return {f: cycles for f, (_, cycles) in cycles_files(parser, paths, fractions).items()}


def cycles_files(
    parser, paths, fractions: Collection[float]
) -> dict[float, tuple[Path, dict[str, int]]]:
    """``cycles_option``'s files as ``{fraction: (path, {benchmark: cycles})}``: which
    file gives each injected slowdown's cycles (the self-test hands it on to its
    workers)."""
    if not fractions:
        parser.error("--inject-cycles: needs --inject SIDE=FRACTION or --inject-slowdown")
    paths = [paths] if isinstance(paths, (str, os.PathLike)) else list(paths)
    wanted = sorted(set(fractions))
    out: dict[float, tuple[Path, dict[str, int]]] = {}
    for path in paths:
        try:
            with open(path) as file:
                text = file.read()
        except OSError as err:
            parser.error(f"--inject-cycles={path}: cannot read it ({err.strerror or err})")
        try:
            slowdown, cycles = _parse_cycles(text)
            match = [f for f in wanted if abs(f - slowdown) <= 1e-12]
            if not match:
                read_cycles(text, wanted)  # raises: calibrated for another slowdown
            if match[0] in out:
                raise ValueError(
                    f"slowdown={slowdown!r}: another file already gives the cycles for "
                    f"{slowdown:.2%}; give one file per injected slowdown"
                )
        except ValueError as err:
            parser.error(f"--inject-cycles={path}: {err}")
        out[match[0]] = (Path(path), cycles)
    missing = [f for f in wanted if f not in out]
    if missing:
        parser.error(
            f"--inject-cycles: no file for the {missing[0]:.2%} injection; give one file per "
            "injected slowdown, or leave the option out to calibrate them all"
        )
    return out


def given(kernel, name: str, fraction: float, cycles: Mapping[str, int]) -> dict:
    """Set ``kernel.delay_cycles`` to benchmark ``name``'s calibrated ``cycles`` (no
    measuring); the record ``calibrate`` would give, without steps or a seen slowdown:
    what the gate then sees is the injected comparison's own ratio."""
    if name not in cycles:
        raise RuntimeError(
            f"--inject-cycles has no cycles for {name}: calibrate it (leave the option out)"
        )
    kernel.delay_cycles = cycles[name]
    return {"requested": fraction, "cycles": cycles[name], "seen": None, "steps": []}


def pair_seen(plain_ms: Sequence[float], slowed_ms: Sequence[float]) -> float:
    """The slowdown of one calibration step of the process gate: the median of the
    per-pair ratios of measurements taken in turn (the i-th of each side one pair), less
    one."""
    if not plain_ms or len(plain_ms) != len(slowed_ms):
        raise ValueError(
            f"plain_ms, slowed_ms: need equal, non-zero counts, got {len(plain_ms)} and "
            f"{len(slowed_ms)}"
        )
    return statistics.median(s / p for p, s in zip(plain_ms, slowed_ms, strict=True)) - 1.0


def within(seen: float, fraction: float, tolerance: float = TOLERANCE) -> bool:
    """Whether a seen slowdown (ratio - 1) is ``fraction`` within ``tolerance``."""
    return abs(seen - fraction) <= tolerance


def miss(seen: float | None, fraction: float, tolerance: float = TOLERANCE) -> str | None:
    """Why a detection rate measured with slowdown ``seen`` would not show ``fraction``,
    or None when it would."""
    if seen is None:
        return "no injected ratio was measured"
    if within(seen, fraction, tolerance):
        return None
    return (
        f"the gate saw {seen:+.2%} for {fraction:+.2%} injected, off by "
        f"{(seen - fraction) * 100:+.2f} pp (tolerance ±{tolerance * 100:g} pp): a detection "
        "rate here would not show the requested slowdown; fix the injection's calibration"
    )


def error_text(err: BaseException, limit: int = ERROR_CHARS) -> str:
    """``err`` as the worker records it: its type and message, at most ``limit``
    characters; a longer one keeps its start and its end (where a compiler's error is)."""
    text = traceback.format_exception_only(type(err), err)[-1].strip()
    if len(text) <= limit:
        return text
    head = limit // 3
    return f"{text[:head]} [...] {text[-(limit - head) :]}"


def first_line(text: object, limit: int = 200) -> str:
    """The line of an error that says what went wrong, for a one-line status or refusal:
    its first, and where that is only a prefix ending in ``:`` (a compiler's failure
    goes on with the kernel's source), also the first later line naming an error."""
    lines = [line.strip() for line in str(text).strip().splitlines() if line.strip()]
    if not lines:
        return ""
    out = lines[0]
    if out.endswith(":"):
        hit = next((line for line in lines[1:] if "error" in line.lower()), None)
        if hit:
            out = f"{out} {hit}"
    return out[:limit]
