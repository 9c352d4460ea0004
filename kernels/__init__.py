"""TileLang kernel definitions. No timing, printing or argument parsing lives here."""

from kernels.gemm import (
    ACCUM_DTYPES,
    DTYPES,
    LAYOUTS,
    GemmConfig,
    GemmKernel,
    GemmShape,
    compile_gemm,
    make_gemm,
)
from kernels.grouped_gemm import GroupedGemmKernel, GroupedGemmShape, compile_grouped_gemm

__all__ = [
    "ACCUM_DTYPES",
    "DTYPES",
    "LAYOUTS",
    "GemmConfig",
    "GemmKernel",
    "GemmShape",
    "GroupedGemmKernel",
    "GroupedGemmShape",
    "compile_gemm",
    "compile_grouped_gemm",
    "make_gemm",
]
