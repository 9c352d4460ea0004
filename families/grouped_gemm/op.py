"""The grouped GEMM of a mixture-of-experts layer (``kernel.py`` beside this file) as an
operator (``harness.ops.contract.Operator``): C[rows of g] = A[rows of g] @ B[g] for every
expert g, compared with ``torch._grouped_mm`` where the installed torch runs it for the
inputs, else with one ``torch.matmul`` per expert."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from families.grouped_gemm.kernel import (
    GroupedGemmShape,
    candidates,
    check_shape_config,
    compile_grouped_gemm,
    fits,
    make_grouped_gemm,
)
from harness.ops.contract import (
    Baseline,
    DenseWork,
    DeviceSpec,
    arch_of,
    check_types,
    random_tensors,
)
from kernels import GemmConfig

GROUPED_MM = "torch._grouped_mm"
MATMUL_LOOP = "torch.matmul per expert"


@dataclass(frozen=True, slots=True)
class GroupedGemmInputs:
    shape: GroupedGemmShape
    a: Any
    b: Any
    out: Any

    def parts(self) -> tuple:
        """``out``'s rows of each expert, an empty view for an expert with none."""
        starts = self.shape.offsets
        return tuple(self.out[starts[g] : starts[g + 1]] for g in range(self.shape.groups))


class GroupedGemm(DenseWork):
    name = "grouped_gemm"
    shape_type = GroupedGemmShape
    config_type = GemmConfig
    tracks = ("track_latency", "track_vs_torch")

    def example_shape(self) -> GroupedGemmShape:
        # A ragged layout with an empty expert: the cases a grouped kernel gets wrong.
        return GroupedGemmShape((64, 0, 100, 1), 192, 128, "bfloat16")

    def configs(self, shape: GroupedGemmShape, device: DeviceSpec) -> list[GemmConfig]:
        return [c for c in candidates() if fits(shape, c)]

    def validate(self, shape: GroupedGemmShape, config: GemmConfig) -> None:
        check_types(self, shape, config)
        check_shape_config(shape, config)

    def inputs(self, shape: GroupedGemmShape, seed: int, device: Any = "cuda"):
        import torch

        a, b = random_tensors(seed, device, shape.dtype, shape.a_shape, shape.b_shape)
        out = torch.empty(shape.c_shape, dtype=a.dtype, device=a.device)
        return GroupedGemmInputs(shape, a, b, out)

    def reference(self, inputs: GroupedGemmInputs) -> tuple:
        starts = inputs.shape.offsets
        a64, b64 = inputs.a.double(), inputs.b.double()
        return tuple(a64[starts[g] : starts[g + 1]] @ b64[g] for g in range(inputs.shape.groups))

    def program(self, shape: GroupedGemmShape, config: GemmConfig):
        return make_grouped_gemm(shape, config)

    def kernel(self, shape: GroupedGemmShape, config: GemmConfig, device: DeviceSpec | None):
        return compile_grouped_gemm(shape, config, arch_of(device))

    def delayed(self, shape: GroupedGemmShape, config: GemmConfig, device=None):
        """Test-only (the gate self-test's injection): the kernel built with a delay of
        ``delay_cycles`` per block, launched as ``kernel(a, b, out)``."""
        return compile_grouped_gemm(shape, config, arch_of(device), delay=True)

    def build(self, shape: GroupedGemmShape, config: GemmConfig, device: DeviceSpec | None):
        kernel = self.kernel(shape, config, device)

        def bind(inputs: GroupedGemmInputs):
            a, b, out = inputs.a, inputs.b, inputs.out
            kernel.tables(a.device)  # made once, outside any timed launch
            return lambda: kernel(a, b, out)

        return bind

    def baseline(self, inputs: GroupedGemmInputs) -> Baseline:
        """``torch._grouped_mm`` when this torch has it and one trial call on these inputs
        runs; otherwise a ``torch.matmul`` per expert, with the reason."""
        import torch

        grouped = getattr(torch, "_grouped_mm", None)
        if grouped is None:
            why = f"torch {torch.__version__} has no {GROUPED_MM}"
        else:
            a, b = inputs.a, inputs.b
            offs = torch.tensor(inputs.shape.offsets[1:], dtype=torch.int32, device=a.device)
            try:
                grouped(a, b, offs=offs)
                if a.is_cuda:
                    torch.cuda.synchronize()
            except Exception as err:  # any refusal (dtype, arch, alignment) means: fall back
                why = f"{GROUPED_MM} refused these inputs: {type(err).__name__}: {err}"
                why = why.splitlines()[0]
            else:
                return Baseline(GROUPED_MM, lambda: grouped(a, b, offs=offs))
        return Baseline(MATMUL_LOOP, matmul_loop(inputs), why)


def matmul_loop(inputs: GroupedGemmInputs):
    """One ``torch.matmul`` per expert with rows, each into its rows of ``out``."""
    import torch

    b, starts = inputs.b, inputs.shape.offsets
    jobs = [
        (g, inputs.a[starts[g] : starts[g + 1]], inputs.out[starts[g] : starts[g + 1]])
        for g, rows in enumerate(inputs.shape.m_sizes)
        if rows
    ]

    def run():
        for g, a_g, out_g in jobs:
            torch.matmul(a_g, b[g], out=out_g)

    return run


# What the registry loads (``harness.ops.registry``, from pyproject's family list).
OPERATOR = GroupedGemm()
