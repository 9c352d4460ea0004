"""One case on the GPU: an operator's inputs, its compiled kernel and its baseline
(torch.matmul for the GEMM), timed through the one timing path, and the GEMM sweep's row
record. Shared by the CLI, the asv suite and the gate."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from harness.measure import metrics
from harness.measure.correctness import TOLERANCE, Check, check_built
from harness.measure.timing import Timing, measure
from harness.ops.contract import DeviceSpec
from harness.ops.registry import build_combination, operator_for
from kernels import GemmConfig, GemmShape


@dataclass(frozen=True, slots=True)
class CaseResult:
    """One row of a sweep: torch.matmul's timing and, when a kernel ran, TileLang's with
    its check; a row whose kernel could not be built or run keeps the error instead."""

    shape: GemmShape
    config: GemmConfig | None
    torch: Timing
    tilelang: Timing | None = None
    check: Check | None = None
    # Why the kernel has no timing: the config validator's rule, or the compile or launch
    # error. None for a row that measured what it asked for.
    error: str | None = None
    # The config's fields as asked for, when the validator rejected them (config is None).
    requested: Mapping[str, int] | None = None

    @property
    def failed(self) -> bool:
        return self.error is not None

    @property
    def torch_ms(self) -> float:
        return self.torch.median_ms

    @property
    def tilelang_ms(self) -> float | None:
        return None if self.tilelang is None else self.tilelang.median_ms

    @property
    def tflops(self) -> float | None:
        """TileLang throughput from the median latency; None when no kernel ran."""
        if self.tilelang is None:
            return None
        return metrics.tflops(self.shape.flops, self.tilelang.median_ms * 1e-3)

    @property
    def torch_tflops(self) -> float:
        return metrics.tflops(self.shape.flops, self.torch_ms * 1e-3)

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
            "speedup": self.speedup,
            "rel_error": None if self.check is None else self.check.rel_error,
            "correct": None if self.check is None else self.check.ok,
            "error": self.error,
            "requested": None if self.requested is None else dict(self.requested),
            "backend": self.torch.backend,
            "torch_samples_ms": list(self.torch.samples_ms),
            "tilelang_samples_ms": None
            if self.tilelang is None
            else list(self.tilelang.samples_ms),
        }

    @classmethod
    def from_dict(cls, d: Mapping) -> CaseResult:
        """Inverse of ``to_dict``, for re-rendering a recorded sweep without a GPU. A
        record that does not match the schema, or holds a timing that is not a positive
        finite number of milliseconds, raises ValueError naming the field."""
        if not isinstance(d, Mapping):
            raise ValueError(f"a row must be a JSON object, got {type(d).__name__}")
        missing = [k for k in _REQUIRED if k not in d]
        if missing:
            raise ValueError(f"not a sweep row: missing {', '.join(map(repr, missing))}")
        shape = GemmShape(d["m"], d["n"], d["k"], d["dtype"], d["layout"])
        config = None
        if d["config"] is not None:
            if not isinstance(d["config"], str):
                raise ValueError(f"config={d['config']!r}: must be a config id or null")
            config = GemmConfig.from_id(d["config"])
        backend = d.get("backend", "event")
        torch_t = Timing(_samples(d, "torch_samples_ms"), backend, 0)
        samples = d.get("tilelang_samples_ms")
        tl_t = None if samples is None else Timing(_samples(d, "tilelang_samples_ms"), backend, 0)
        check = None
        if d.get("rel_error") is not None:
            if isinstance(d["rel_error"], bool) or not isinstance(d["rel_error"], int | float):
                raise ValueError(f"rel_error={d['rel_error']!r}: must be a number")
            # The record keeps the verdict, not the unwritten count: a recorded failure
            # stays one (unwritten=1) whatever its error.
            unwritten = 0 if d.get("correct") else 1
            check = Check(shape, d["rel_error"], unwritten, TOLERANCE[shape.dtype])
        error = d.get("error")
        if error is not None and not isinstance(error, str):
            raise ValueError(f"error={error!r}: must be a string or null")
        requested = d.get("requested")
        if requested is not None and not isinstance(requested, Mapping):
            raise ValueError(f"requested={requested!r}: must be an object or null")
        return cls(shape, config, torch_t, tl_t, check, error, requested)


_REQUIRED = ("m", "n", "k", "dtype", "layout", "config", "torch_samples_ms")


def _samples(d: Mapping, key: str) -> tuple[float, ...]:
    """A recorded list of per-launch latencies: non-empty, each positive and finite."""
    samples = d[key]
    if not isinstance(samples, list) or not samples:
        raise ValueError(f"{key}: must be a non-empty list of milliseconds")
    for i, x in enumerate(samples):
        if isinstance(x, bool) or not isinstance(x, int | float) or not math.isfinite(x) or x <= 0:
            raise ValueError(f"{key}[{i}]={x!r}: must be a positive finite number of ms")
    return tuple(float(x) for x in samples)


class Case:
    """Inputs for one shape on the GPU, reused across configs and timings. Any family's
    shape serves: the operator is the one whose shape type it is."""

    def __init__(self, shape, seed: int = 0, device: DeviceSpec | None = None) -> None:
        self.shape = shape
        self.seed = seed
        self.op = operator_for(shape)
        self.device = device  # None: build for the visible GPU
        self.inputs = self.op.inputs(shape, seed)
        self.baseline = self.op.baseline(self.inputs)
        self.torch_fn = self.baseline.fn

    @property
    def a(self):
        return self.inputs.a

    @property
    def b(self):
        return self.inputs.b

    @property
    def out(self):
        return self.inputs.out

    def placement(self, i: int) -> Case:
        """The ``i``-th input set of ``harness.measure.versus.placed``: this case for 0,
        else a fresh one of the same shape, seed and device (same values, other tensors)."""
        return self if i == 0 else Case(self.shape, self.seed, self.device)

    def placed(self, config):
        """``versus.placed``'s ``bind`` for ``config``: the kernel and torch.matmul on the
        i-th input set (``placement``)."""

        def bind(i: int):
            case = self.placement(i)
            return case.tilelang_fn(config), case.torch_fn

        return bind

    def tilelang_fn(self, config):
        return build_combination(self.op, self.shape, config, self.device)(self.inputs)

    def time_torch(self, **timing) -> Timing:
        return measure(self.torch_fn, **timing)

    def time_tilelang(self, config, **timing) -> Timing:
        return measure(self.tilelang_fn(config), **timing)

    def check(self, config, seed: int = 1) -> Check:
        return check_built(self.op, self.shape, config, self.device, seed)
