"""The dense GEMM (``kernels/gemm.py``) as an operator: C = A @ B, B as [K, N] (NN) or
[N, K] (NT), compared with torch.matmul."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from harness.ops.contract import (
    Baseline,
    DenseWork,
    DeviceSpec,
    arch_of,
    check_types,
    random_tensors,
)
from kernels import GemmConfig, GemmKernel, GemmShape, compile_gemm, make_gemm
from kernels.gemm import check_combination


@dataclass(frozen=True, slots=True)
class GemmInputs:
    shape: GemmShape
    a: Any
    b: Any
    out: Any

    def parts(self) -> tuple:
        return (self.out,)


class Gemm(DenseWork):
    name = "gemm"
    shape_type = GemmShape
    config_type = GemmConfig
    # asv_bench/gemm.py's GPU tracks (latency, latency over torch.matmul's, host launch).
    tracks = ("track_latency", "track_vs_torch", "track_launch")

    def example_shape(self) -> GemmShape:
        return GemmShape(256, 192, 128, "float16", "NT")

    def configs(self, shape: GemmShape, device: DeviceSpec) -> list[GemmConfig]:
        from kernels.tuned import candidates

        return candidates(shape, device.sm_count)  # only configs that build for ``shape``

    def validate(self, shape: GemmShape, config: GemmConfig) -> None:
        check_types(self, shape, config)
        check_combination(shape, config)

    def inputs(self, shape: GemmShape, seed: int, device: Any = "cuda") -> GemmInputs:
        import torch

        a, b = random_tensors(seed, device, shape.dtype, shape.a_shape, shape.b_shape)
        return GemmInputs(shape, a, b, torch.empty(shape.c_shape, dtype=a.dtype, device=a.device))

    def reference(self, inputs: GemmInputs) -> tuple:
        b64 = inputs.b.double()
        return (inputs.a.double() @ (b64 if inputs.shape.layout == "NN" else b64.t()),)

    def program(self, shape: GemmShape, config: GemmConfig):
        return make_gemm(shape, config)

    def kernel(self, shape: GemmShape, config: GemmConfig, device: DeviceSpec | None) -> GemmKernel:
        return compile_gemm(shape, config, arch_of(device))

    def build(self, shape: GemmShape, config: GemmConfig, device: DeviceSpec | None):
        return launcher(self.kernel(shape, config, device))

    def baseline(self, inputs: GemmInputs) -> Baseline:
        """torch.matmul (cuBLAS) in the same layout."""
        return Baseline("torch.matmul", matmul_fn(inputs.shape, inputs.a, inputs.b))


def launcher(kernel: GemmKernel):
    """Bind inputs to a launch of a compiled GEMM (``compile_gemm``), into ``out``."""

    def bind(inputs: GemmInputs):
        a, b, out = inputs.a, inputs.b, inputs.out
        return lambda: kernel(a, b, out)

    return bind


def matmul_fn(shape: GemmShape, a, b):
    """The torch.matmul (cuBLAS) call the kernel is compared with, same layout."""
    import torch

    b_op = b if shape.layout == "NN" else b.t()
    return lambda: torch.matmul(a, b_op)


GEMM = Gemm()
