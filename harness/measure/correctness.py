"""Correctness of a compiled GEMM against a float64 reference on fresh random inputs."""

from __future__ import annotations

from dataclasses import dataclass

from kernels import GemmKernel, GemmShape

# Relative Frobenius error allowed per input dtype. The accumulation is fp32, so the error
# is dominated by rounding C to the output dtype: 2^-11 (fp16) or 2^-8 (bf16) per element,
# a few times smaller in the Frobenius norm. The bounds leave ~4x headroom above that.
TOLERANCE = {"float16": 2e-3, "bfloat16": 1e-2}


@dataclass(frozen=True, slots=True)
class Check:
    shape: GemmShape
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


def random_inputs(shape: GemmShape, seed: int, device="cuda"):
    """Fresh A and B, normal(0, 1), in the shape's dtype and layout."""
    import torch

    gen = torch.Generator(device=device).manual_seed(seed)
    dtype = getattr(torch, shape.dtype)
    a = torch.randn(shape.a_shape, generator=gen, device=device, dtype=torch.float32).to(dtype)
    b = torch.randn(shape.b_shape, generator=gen, device=device, dtype=torch.float32).to(dtype)
    return a, b


def torch_reference_fn(shape: GemmShape, a, b):
    """The torch.matmul (cuBLAS) call the kernel is compared with, same layout."""
    import torch

    b_op = b if shape.layout == "NN" else b.t()
    return lambda: torch.matmul(a, b_op)


def check_kernel(kernel: GemmKernel, seed: int = 0) -> Check:
    """Run ``kernel`` once on fresh inputs into a NaN-poisoned output and compare it with
    the float64 product of the same inputs."""
    import torch

    shape = kernel.shape
    a, b = random_inputs(shape, seed)
    out = torch.full(shape.c_shape, float("nan"), dtype=a.dtype, device=a.device)
    kernel(a, b, out)
    torch.cuda.synchronize()
    b64 = b.double() if shape.layout == "NN" else b.double().t()
    ref = a.double() @ b64
    got = out.double()
    unwritten = int(torch.isnan(got).sum().item())
    rel = float((torch.linalg.norm(got - ref) / torch.linalg.norm(ref)).item())
    return Check(shape=shape, rel_error=rel, unwritten=unwritten, tolerance=TOLERANCE[shape.dtype])
