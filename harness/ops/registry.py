"""Every operator family by name, and the one walk from a combination to a built kernel.

A new family adds its operator to ``OPERATORS``; whatever walks the suite (precompile,
shard, cost, the gate's worker, the asv families) reaches kernels through ``operator``
and ``build_combination`` only."""

from __future__ import annotations

from typing import Any

from harness.ops.contract import DeviceSpec, Operator
from harness.ops.gemm import GEMM
from harness.ops.grouped_gemm import GROUPED_GEMM

OPERATORS: dict[str, Operator] = {op.name: op for op in (GEMM, GROUPED_GEMM)}


def operator(family: str | Operator) -> Operator:
    """The registered operator named ``family`` (an operator is returned as it is)."""
    if not isinstance(family, str):
        return family
    if family not in OPERATORS:
        raise ValueError(f"family={family!r}: must be one of {sorted(OPERATORS)}")
    return OPERATORS[family]


def operator_for(shape: Any) -> Operator:
    """The family whose shape type ``shape`` is."""
    for op in OPERATORS.values():
        if isinstance(shape, op.shape_type):
            return op
    raise ValueError(f"shape={shape!r}: not the shape of any family ({sorted(OPERATORS)})")


def build_combination(
    family: str | Operator, shape: Any, config: Any, device: DeviceSpec | None = None
):
    """Validate (shape, config) against the family's rules and compile it for ``device``
    (None: the visible GPU): the family's bind function, inputs -> launch. Raises
    ValueError naming the field and the rule for a combination that cannot build."""
    op = operator(family)
    op.validate(shape, config)
    return op.build(shape, config, device)
