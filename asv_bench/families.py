"""GPU tracks of the kernel families (``families/``): each registered family's ``gpu``
classes bound onto ``gemm._GpuFamily`` (latency, latency over the torch baseline), named
``families.<Class>``; their CPU tracks are bound into ``static`` (``_bind`` says how).
Each class may name combinations for the gate's default subset (its ``gate``)."""

import re as _re

from asv_bench._bind import bound as _bound
from asv_bench.gemm import _GpuFamily
from harness.suite.discovery import combination_name as _combination_name

_MODULE = __name__.rsplit(".", 1)[-1]  # asv's name of this module: "families"
_BOUND = _bound({"gpu": _GpuFamily}, _MODULE)
globals().update(_BOUND)

GATE_SUBSET = "|".join(
    _re.escape(_combination_name(f"{_MODULE}.{name}", params)).replace("\\ ", " ")
    for name, cls in _BOUND.items()
    for params in getattr(cls, "gate", ())
)
