"""Correctness of a built kernel against a float64 reference on fresh random inputs, for
any operator family (``harness.ops.contract.Operator``); the GEMM helpers are the dense
family's instances of it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

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


def check_launch(op: Operator, shape, bind, seed: int = 0, device="cuda") -> Check:
    """Bind fresh inputs from ``seed`` to ``bind`` (a build's result), launch once into a
    NaN-poisoned output and compare each part of it (a GEMM's C; each expert's rows of
    a mixture-of-experts layer) with the float64 reference: the error is the largest
    relative Frobenius error of a part, NaN when any written element is NaN."""
    import torch

    inputs = op.inputs(shape, seed, device)
    inputs.out.fill_(float("nan"))
    launch: Launch = bind(inputs)
    launch()
    if inputs.out.is_cuda:
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
    return check_launch(op, shape, build_combination(op, shape, config, device), seed)


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
    return check_launch(GEMM, kernel.shape, launcher(kernel), seed)
