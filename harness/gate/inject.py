"""The gate self-test's injected slowdown: how many cycles of the kernel's test-only delay
(``kernels.gemm.make_gemm(..., delay=True)``) make it slower by a requested fraction, as
the gate's own timer sees it, and whether an injection missed its request.

The delay is a spin of every block on the SM's cycle counter before its pipeline starts,
so one launch of a kernel with ``blocks`` blocks over ``sms`` multiprocessors (one block
resident per SM) gains about ``waves * cycles`` of time. That gives the first guess;
the wave tail and blocks sharing an SM make the truth differ, so the worker then measures
the slowed kernel against the plain one, launch by launch, and corrects the cycles until
the seen slowdown is within ``CALIBRATION_TOLERANCE`` of the request.

Pure: no GPU, no project imports (the gate's worker loads this file by path while
another revision's tree is on ``sys.path``).
"""

from __future__ import annotations

import math
import traceback
from collections.abc import Callable, Sequence

# The self-test reports a detection rate only where the slowdown the gate saw is within
# this of the request (absolute, in fractions: 0.003 is 0.3 percentage points).
TOLERANCE = 0.003
# The worker's calibration aims tighter, so the self-test's own trials land inside
# TOLERANCE despite their noise.
CALIBRATION_TOLERANCE = 0.001
MAX_STEPS = 6
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


def next_cycles(steps: Sequence[tuple[int, float]], fraction: float) -> int:
    """The next cycles to try from the ``(cycles, seen slowdown)`` steps so far: the
    secant through the last two distinct steps (the seen slowdown is close to linear in
    the cycles, but not through zero: the spin has a fixed cost), else a proportional
    scale of the last step. A step that saw no slowdown doubles its cycles."""
    if not steps:
        raise ValueError("steps: need at least one (cycles, seen) step")
    c1, s1 = steps[-1]
    earlier = [(c, s) for c, s in steps[:-1] if c != c1 and s != s1]
    if earlier:
        c0, s0 = earlier[-1]
        slope = (s1 - s0) / (c1 - c0)
        if slope > 0:
            return max(1, round(c1 + (fraction - s1) / slope))
    if s1 <= 0:
        return 2 * c1
    return max(1, round(c1 * fraction / s1))


def calibrate(
    kernel, fraction: float, base_ms: float, clock: tuple[float, int], seen: Callable[[], float]
) -> dict:
    """Set ``kernel.delay_cycles`` (a kernel of ``kernel.blocks`` blocks, ``base_ms`` long
    undelayed) until ``seen()``, the slowdown measured with those cycles, is ``fraction``
    within ``CALIBRATION_TOLERANCE``, from the first guess for ``clock`` = (cycles per ms,
    SMs), at most ``MAX_STEPS`` measurements; the closest step is kept. Returns the
    record: requested, the cycles set, what they were seen to add, and every step."""
    cycles_per_ms, sms = clock
    cycles = initial_cycles(fraction, base_ms, cycles_per_ms, waves(kernel.blocks, sms))
    steps: list[tuple[int, float]] = []
    for _ in range(MAX_STEPS):
        kernel.delay_cycles = cycles
        steps.append((cycles, seen()))
        if within(steps[-1][1], fraction, CALIBRATION_TOLERANCE):
            break
        cycles = next_cycles(steps, fraction)
    cycles, got = min(steps, key=lambda step: abs(step[1] - fraction))
    kernel.delay_cycles = cycles
    return {"requested": fraction, "cycles": cycles, "seen": got, "steps": steps}


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
