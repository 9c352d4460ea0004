"""The contract every operator family implements, and what the families share.

A family is one object satisfying ``Operator``: its shape and config types (frozen,
validated dataclasses), its config space and the validator of a (shape, config) pair,
inputs from a seed on a device, a float64 reference, ``build`` (a compiled kernel bound
to inputs, ready to launch; ``program`` and ``kernel`` are the steps before it), the
baseline it is compared with, flops, bytes, the correctness tolerance and the asv tracks
it offers. Whatever walks the suite depends on this protocol only. ``docs/add_a_family.md``
walks a new family through it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

# Relative Frobenius error allowed per input dtype. The accumulation is fp32, so the error
# is dominated by rounding C to the output dtype: 2^-11 (fp16) or 2^-8 (bf16) per element,
# a few times smaller in the Frobenius norm. The bounds leave ~4x headroom above that.
TOLERANCE = {"float16": 2e-3, "bfloat16": 1e-2}

# A launch of a built kernel on bound inputs: what the one timing path times.
Launch = Callable[[], Any]


@runtime_checkable
class DeviceSpec(Protocol):
    """What a build reads of the device it builds for. Any object with these attributes
    serves (the measured device's spec among them). One that also has ``arch`` (e.g.
    "sm_90a") names a device that need not be present: the build cross-compiles for it;
    without ``arch`` TileLang targets the visible GPU."""

    sm_count: int
    compute_capability: tuple[int, int]


@dataclass(frozen=True, slots=True)
class CompileTarget:
    """A device that is not here, to compile for (codegen tests, precompiling on a CPU
    machine): its SM count given (the tuned table records it per GPU,
    ``kernels.tuned.recorded_sms``), an sm_90a part unless said otherwise, and the name of
    the GPU it stands for where one is meant (its tuned configs are that GPU's)."""

    sm_count: int
    arch: str = "sm_90a"
    compute_capability: tuple[int, int] = (9, 0)
    name: str | None = None

    def __post_init__(self) -> None:
        if (
            isinstance(self.sm_count, bool)
            or not isinstance(self.sm_count, int)
            or self.sm_count < 1
        ):
            raise ValueError(f"CompileTarget.sm_count={self.sm_count!r}: must be an integer >= 1")


def arch_of(device: DeviceSpec | None) -> str | None:
    """The arch to cross-compile for, or None to build for the visible GPU (``device``
    None, or a spec of a present device, which has no ``arch``)."""
    return getattr(device, "arch", None)


@dataclass(frozen=True, slots=True)
class Baseline:
    """What a kernel is compared with: the call (bound to inputs), its name as reports
    print it, and why it is the one chosen (empty when it is the family's first choice)."""

    name: str
    fn: Launch
    why: str = ""


class Inputs(Protocol):
    """A family's inputs: the operands and an output buffer ``out`` the kernel writes."""

    out: Any

    def parts(self) -> Sequence[Any]:
        """Views of ``out``, one per tensor of the family's ``reference``, same order."""
        ...


@runtime_checkable
class Operator(Protocol):
    name: str  # the registry key, e.g. "gemm"
    shape_type: type
    config_type: type
    tracks: tuple[str, ...]  # asv track methods the family offers

    def example_shape(self) -> Any:
        """A small valid shape, for smoke tests of the family on any device."""
        ...

    def configs(self, shape: Any, device: DeviceSpec) -> list[Any]:
        """The config space searched for ``shape`` on ``device`` (its SM count sizes
        split-K and persistent grids), every entry valid for it."""
        ...

    def validate(self, shape: Any, config: Any) -> None:
        """Raise ValueError naming the field and the rule where ``config`` cannot build
        ``shape`` (each is valid alone by construction)."""
        ...

    def inputs(self, shape: Any, seed: int, device: Any = "cuda") -> Inputs:
        """Fresh random operands from ``seed`` (the same seed, the same values) and an
        uninitialised output buffer, on ``device``."""
        ...

    def reference(self, inputs: Inputs) -> tuple[Any, ...]:
        """The exact result in float64, one tensor per ``inputs.parts()``."""
        ...

    def program(self, shape: Any, config: Any) -> Any:
        """The TileLang program (a ``T.prim_func``) of ``shape`` under ``config``; compiles
        nothing (the compile-time track compiles it with TileLang's caches off)."""
        ...

    def kernel(self, shape: Any, config: Any, device: DeviceSpec | None) -> Any:
        """The compiled kernel ``build`` binds, memoised: its generated CUDA ``source``,
        TileLang's ``jit_kernel`` and its ``config`` (the static resource tracks read them)."""
        ...

    def build(
        self, shape: Any, config: Any, device: DeviceSpec | None
    ) -> Callable[[Inputs], Launch]:
        """Compile ``shape`` under ``config`` for ``device`` (None: the visible GPU); the
        result binds inputs to a launch that writes ``inputs.out``."""
        ...

    def baseline(self, inputs: Inputs) -> Baseline:
        """The library call the kernel is compared with, bound to ``inputs``."""
        ...

    def flops(self, shape: Any) -> int: ...

    def bytes(self, shape: Any) -> int:
        """Bytes moved if every operand is read once and the output written once."""
        ...

    def tolerance(self, shape: Any) -> float:
        """Largest relative Frobenius error against the float64 reference."""
        ...


class DenseWork:
    """flops, bytes and tolerance for a family whose shape has ``flops``, ``min_bytes``
    and ``dtype`` and that accumulates in fp32 (``TOLERANCE``)."""

    def flops(self, shape: Any) -> int:
        return shape.flops

    def bytes(self, shape: Any) -> int:
        return shape.min_bytes

    def tolerance(self, shape: Any) -> float:
        return TOLERANCE[shape.dtype]


def check_types(op: Operator, shape: Any, config: Any) -> None:
    """The part of every validator that is the same for all families: the values are of
    the family's own types."""
    for field, value, want in (("shape", shape, op.shape_type), ("config", config, op.config_type)):
        if not isinstance(value, want):
            raise ValueError(
                f"{op.name}: {field}={value!r}: must be a {want.__name__}, "
                f"got {type(value).__name__}"
            )


def random_tensors(seed: int, device: Any, dtype: str, *dims: tuple[int, ...]) -> tuple:
    """One tensor per entry of ``dims``, normal(0, 1) drawn in float32 from one generator
    seeded with ``seed`` and rounded to ``dtype`` (a torch dtype name), in order."""
    import torch

    gen = torch.Generator(device=device).manual_seed(seed)
    want = getattr(torch, dtype)
    return tuple(
        torch.randn(d, generator=gen, device=device, dtype=torch.float32).to(want) for d in dims
    )
