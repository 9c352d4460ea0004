"""Correctness of a built kernel against a float64 reference on fresh random inputs, for
any operator family (``harness.ops.contract.Operator``); the GEMM helpers are the dense
family's instances of it."""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from harness.cli import EXIT_HUNG
from harness.ops.contract import TOLERANCE, DeviceSpec, Launch, Operator
from harness.ops.gemm import GEMM, launcher, matmul_fn
from harness.ops.registry import build_combination
from kernels import GemmKernel, GemmShape

__all__ = ["TOLERANCE", "Check", "check_kernel", "check_launch", "random_inputs"]


@dataclass(frozen=True, slots=True)
class Check:
    shape: Any  # the family's shape (``Operator.shape_type``)
    rel_error: float
    unwritten: int  # output elements still holding the poison value
    tolerance: float

    @property
    def ok(self) -> bool:
        # NaN compares False, so a NaN error fails too.
        return self.unwritten == 0 and self.rel_error <= self.tolerance

    def __str__(self) -> str:
        verdict = "ok" if self.ok else "FAIL"
        return f"{verdict} (rel err {self.rel_error:.1e}, tol {self.tolerance:.0e})"


# Seconds a check's launch may take before it counts as hung. The longest kernel checked
# here runs for milliseconds (mlp_up on the H200: 5.9 ms); one that has not finished
# after a minute waits on a barrier that will never complete.
HANG_S = 60.0
# What the running command keeps before a hung launch ends the process (``on_hang``).
_LAST_WORDS: list[Callable[[str], None]] = []


@contextmanager
def on_hang(keep: Callable[[str], None]) -> Iterator[None]:
    """While inside, a hung launch calls ``keep(what)`` before the process exits, so a
    command writes what it measured so far. ``keep`` must not touch the GPU: every CUDA
    call would wait on the hung launch."""
    _LAST_WORDS.append(keep)
    try:
        yield
    finally:
        _LAST_WORDS.remove(keep)


def hung(what: str, seconds: float) -> None:
    """Say that ``what``'s launch never finished, let the running commands keep what they
    measured (``on_hang``), then exit with ``EXIT_HUNG``: the launch cannot be cancelled,
    and every later CUDA call of this process would wait on it."""
    print(
        f"{what}: the kernel's launch did not finish within {seconds:.0f} s (a hung kernel: "
        "a deadlocked pipeline, or a barrier waiting for bytes that never arrive); a launch "
        f"cannot be cancelled, so the process exits with status {EXIT_HUNG}; what it wrote "
        "before is kept. Leave the config out to measure the rest.",
        file=sys.stderr,
        flush=True,
    )
    for keep in reversed(_LAST_WORDS):
        try:
            keep(what)
        except Exception as err:  # the exit must come whatever a command's writer does
            print(f"{what}: could not keep the results so far: {err!r}", file=sys.stderr)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(EXIT_HUNG)


def wait_or_exit(
    done: Callable[[], bool],
    what: str,
    seconds: float = HANG_S,
    *,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
    on_hang: Callable[[str, float], None] = hung,
) -> None:
    """Wait until ``done()`` (a CUDA event's ``query``) holds; past ``seconds``, call
    ``on_hang`` (which exits) instead of waiting forever, as a synchronize would."""
    start = clock()
    while not done():
        if clock() - start > seconds:
            on_hang(what, seconds)
            return
        sleep(0.001)


def check_launch(
    op: Operator, shape, bind, seed: int = 0, device="cuda", what: str | None = None
) -> Check:
    """Bind fresh inputs from ``seed`` to ``bind`` (a build's result), launch once into a
    NaN-poisoned output and compare each part of it (a GEMM's C; each expert's rows of
    a mixture-of-experts layer) with the float64 reference: the error is the largest
    relative Frobenius error of a part, NaN when any written element is NaN. A launch
    that has not finished after ``HANG_S`` ends the process (``hung``, naming ``what``:
    by default the family and the shape)."""
    import torch

    inputs = op.inputs(shape, seed, device)
    inputs.out.fill_(float("nan"))
    launch: Launch = bind(inputs)
    launch()
    if inputs.out.is_cuda:
        finished = torch.cuda.Event()
        finished.record()
        wait_or_exit(finished.query, what or f"{op.name} {getattr(shape, 'id', shape)}")
        torch.cuda.synchronize()
    unwritten = int(torch.isnan(inputs.out).sum().item())
    errors = [
        torch.linalg.norm(got.double() - ref) / torch.linalg.norm(ref)
        for got, ref in zip(inputs.parts(), op.reference(inputs), strict=True)
        if ref.numel()
    ]
    # torch's max keeps a NaN, where Python's max would depend on the order.
    rel = float(torch.stack(errors).max().item())
    return Check(shape=shape, rel_error=rel, unwritten=unwritten, tolerance=op.tolerance(shape))


def check_built(op: Operator, shape, config, device: DeviceSpec | None = None, seed: int = 0):
    """Build (shape, config) for ``device`` (None: the visible GPU) and check it."""
    what = f"{op.name} {getattr(shape, 'id', shape)} {getattr(config, 'id', config)}"
    return check_launch(op, shape, build_combination(op, shape, config, device), seed, what=what)


def random_inputs(shape: GemmShape, seed: int, device="cuda"):
    """Fresh A and B, normal(0, 1), in the shape's dtype and layout."""
    inputs = GEMM.inputs(shape, seed, device)
    return inputs.a, inputs.b


def torch_reference_fn(shape: GemmShape, a, b):
    """The torch.matmul (cuBLAS) call the kernel is compared with, same layout."""
    return matmul_fn(shape, a, b)


def check_kernel(kernel: GemmKernel, seed: int = 0) -> Check:
    """Run a compiled GEMM once on fresh inputs into a NaN-poisoned output and compare it
    with the float64 product of the same inputs."""
    what = f"gemm {kernel.shape.id} {kernel.config.id}"
    return check_launch(GEMM, kernel.shape, launcher(kernel), seed, what=what)
