"""The asv suite: the GEMM's GPU tracks in ``gemm``, its CPU-only tracks in ``static``,
and the kernel families' classes (both kinds) in ``families``."""

from asv_bench.families import GATE_SUBSET as _FAMILIES_GATE

# The PR gate's default subset (``nox -s gate`` without ``--bench``): combinations
# spanning 128^3 to 8192^3, both dtypes, NN and NT, small and large tiles, and every
# tuned case (the configs users run, so a change that loses the tuning fails the gate),
# and the combinations each kernel family names (its GPU class's ``gate``). The gate reads
# it from here; ``--bench '.'`` takes the whole grid.
GATE_SUBSET = (
    r"gemm\.Stage(128)?\((128x128x128|4096x4096x4096), (128|256), (3|4), f16\)"
    r"|gemm\.Tiles\(.*, b128x256x64_t256_s3, .*\)"
    r"|gemm\.Attention\(.*, b128x128x32_t128_s3, f16\)"
    r"|gemm\.Tuned\("
) + (f"|{_FAMILIES_GATE}" if _FAMILIES_GATE else "")
