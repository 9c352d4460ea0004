"""TileLang kernel definitions: the dense GEMM and the helpers every family's kernel shares
(shapes' and configs' checks, compile targets). No timing, printing or argument parsing
lives here; the other families' kernels live in their own packages (``families/``)."""

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

__all__ = [
    "ACCUM_DTYPES",
    "DTYPES",
    "LAYOUTS",
    "GemmConfig",
    "GemmKernel",
    "GemmShape",
    "compile_gemm",
    "make_gemm",
]
