"""The grouped GEMM's asv classes: what each one measures, as plain classes that
the asv suite binds (``asv_bench/_bind.py``): ``families.GroupedGemm`` (GPU tracks:
latency, latency over the torch baseline), ``static.GroupedGemmResources`` and
``static.GroupedGemmCompileTime`` (resources built for sm_90a, cold compile time).

MoE layers route each token to its top-k experts, so an expert's rows are the tokens sent
to it: 4096 tokens with top-2 routing give 8192 rows over 8 or 64 experts. ``balanced``
gives every expert the same share; ``skewed`` follows a Zipf law (expert g's share ~
1 / (g + 1)), so one hot expert takes the most, and the last eighth of the experts get no
token at all: the ragged, partly empty layouts a grouped kernel has to get right. K = N
is the hidden size of the layer (4096; 7168 as in DeepSeek-V3).

Imports nothing heavy: asv imports the suite in one process and forks each benchmark.
"""

from families.grouped_gemm.kernel import GroupedGemmShape, heuristic
from kernels.gemm import SHORT_DTYPES

ROWS = 4096 * 2  # 4096 tokens, each routed to 2 experts
ROUTING = ("balanced", "skewed")


def routed_rows(experts: int, routing: str, rows: int = ROWS) -> tuple[int, ...]:
    """Rows per expert, summing to ``rows``: even, or skewed (Zipf, the last eighth of the
    experts empty), shares rounded by largest remainder."""
    if routing not in ROUTING:
        raise ValueError(f"routing={routing!r}: must be one of {list(ROUTING)}")
    if routing == "balanced":
        weights = [1.0] * experts
    else:
        busy = experts - max(1, experts // 8)
        weights = [1.0 / (g + 1) for g in range(busy)] + [0.0] * (experts - busy)
    exact = [rows * w / sum(weights) for w in weights]
    out = [int(x) for x in exact]
    by_remainder = sorted(range(experts), key=lambda g: out[g] - exact[g])
    for g in by_remainder[: rows - sum(out)]:
        out[g] += 1
    return tuple(out)


def moe_shape(experts: int, size: int, routing: str, dtype: str) -> GroupedGemmShape:
    """The layer's grouped GEMM: ``experts`` experts, K = N = ``size``, ``dtype`` by its
    short name (``f16``, ``bf16``)."""
    return GroupedGemmShape(routed_rows(experts, routing), size, size, SHORT_DTYPES[dtype])


class GroupedGemm:
    """One launch over all experts, its config the kernel's heuristic for the layout;
    compared with ``torch._grouped_mm`` (or a torch.matmul per expert where that cannot
    run)."""

    operator = "grouped_gemm"
    params = ([8, 64], [4096, 7168], list(ROUTING), list(SHORT_DTYPES))
    param_names = ["experts", "k_n", "routing", "dtype"]
    # The gate's default subset takes these.
    gate = ((8, 4096, "balanced", "bf16"), (8, 4096, "skewed", "bf16"))

    def case(self, experts, size, routing, dtype):
        shape = moe_shape(experts, size, routing, dtype)
        return shape, heuristic(shape)


class GroupedGemmResources:
    """Registers, spills, shared memory and missing Hopper instructions of the kernels the
    GPU class runs at K = N = 4096, built for sm_90a (the tile, not the routing, sets them:
    one layout per tile the heuristic picks)."""

    operator = "grouped_gemm"
    params = ([8, 64], list(SHORT_DTYPES))
    param_names = ["experts", "dtype"]

    def kernel_case(self, experts, dtype):
        shape = moe_shape(experts, 4096, "balanced", dtype)
        return shape, heuristic(shape)


class GroupedGemmCompileTime(GroupedGemmResources):
    """Cold compile time (TileLang lowering + nvcc, caches off) of the same kernels, fp16."""

    params = ([8, 64], ["f16"])


# What the suite makes of each class: GPU tracks, resources, compile time.
ASV = {
    "gpu": (GroupedGemm,),
    "resources": (GroupedGemmResources,),
    "compile_time": (GroupedGemmCompileTime,),
}
