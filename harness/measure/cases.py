"""One GEMM case on the GPU: inputs, the compiled kernel and the torch.matmul reference,
timed through the one timing path. Shared by the CLI, the asv suite and the gate."""

from __future__ import annotations

from dataclasses import dataclass

from harness.measure import metrics
from harness.measure.correctness import (
    TOLERANCE,
    Check,
    check_kernel,
    random_inputs,
    torch_reference_fn,
)
from harness.measure.timing import Timing, measure
from kernels import GemmConfig, GemmShape, compile_gemm


@dataclass(frozen=True, slots=True)
class CaseResult:
    shape: GemmShape
    config: GemmConfig | None
    torch: Timing
    tilelang: Timing | None = None
    check: Check | None = None

    @property
    def torch_ms(self) -> float:
        return self.torch.median_ms

    @property
    def tilelang_ms(self) -> float | None:
        return None if self.tilelang is None else self.tilelang.median_ms

    @property
    def tflops(self) -> float | None:
        """TileLang throughput from the median latency (torch's when no kernel ran)."""
        ms = self.tilelang_ms if self.tilelang is not None else self.torch_ms
        return metrics.tflops(self.shape.flops, ms * 1e-3)

    @property
    def torch_tflops(self) -> float:
        return metrics.tflops(self.shape.flops, self.torch_ms * 1e-3)

    @property
    def vs_torch(self) -> float | None:
        """TileLang latency over torch latency: below 1.0 is faster than cuBLAS."""
        if self.tilelang is None:
            return None
        return metrics.ratio(self.tilelang.median_ms, self.torch.median_ms)

    @property
    def speedup(self) -> float | None:
        """torch latency over TileLang latency: 1.00 is parity, above 1 beats cuBLAS."""
        if self.tilelang is None:
            return None
        return metrics.speedup(self.tilelang.median_ms, self.torch.median_ms)

    def to_dict(self) -> dict:
        return {
            "shape": self.shape.id,
            "m": self.shape.m,
            "n": self.shape.n,
            "k": self.shape.k,
            "dtype": self.shape.dtype,
            "layout": self.shape.layout,
            "config": None if self.config is None else self.config.id,
            "torch_ms": self.torch_ms,
            "tilelang_ms": self.tilelang_ms,
            "tflops": self.tflops,
            "vs_torch": self.vs_torch,
            "rel_error": None if self.check is None else self.check.rel_error,
            "correct": None if self.check is None else self.check.ok,
            "backend": self.torch.backend,
            "torch_samples_ms": list(self.torch.samples_ms),
            "tilelang_samples_ms": None
            if self.tilelang is None
            else list(self.tilelang.samples_ms),
        }

    @classmethod
    def from_dict(cls, d: dict) -> CaseResult:
        """Inverse of ``to_dict``, for re-rendering a recorded sweep without a GPU."""
        shape = GemmShape(d["m"], d["n"], d["k"], d["dtype"], d["layout"])
        config = None if d["config"] is None else GemmConfig.from_id(d["config"])
        backend = d.get("backend", "event")
        torch_t = Timing(tuple(d["torch_samples_ms"]), backend, 0)
        samples = d.get("tilelang_samples_ms")
        tl_t = None if samples is None else Timing(tuple(samples), backend, 0)
        check = None
        if d.get("rel_error") is not None:
            # The record keeps the verdict, not the unwritten count: a recorded failure
            # stays one (unwritten=1) whatever its error.
            unwritten = 0 if d["correct"] else 1
            check = Check(shape, d["rel_error"], unwritten, TOLERANCE[shape.dtype])
        return cls(shape, config, torch_t, tl_t, check)


class Case:
    """Inputs for one shape on the GPU, reused across configs and timings."""

    def __init__(self, shape: GemmShape, seed: int = 0) -> None:
        import torch

        self.shape = shape
        self.a, self.b = random_inputs(shape, seed)
        self.out = torch.empty(shape.c_shape, dtype=self.a.dtype, device=self.a.device)
        self.torch_fn = torch_reference_fn(shape, self.a, self.b)

    def tilelang_fn(self, config: GemmConfig):
        kernel = compile_gemm(self.shape, config)
        a, b, out = self.a, self.b, self.out
        return lambda: kernel(a, b, out)

    def time_torch(self, **timing) -> Timing:
        return measure(self.torch_fn, **timing)

    def time_tilelang(self, config: GemmConfig, **timing) -> Timing:
        return measure(self.tilelang_fn(config), **timing)

    def check(self, config: GemmConfig, seed: int = 1) -> Check:
        return check_kernel(compile_gemm(self.shape, config), seed=seed)
