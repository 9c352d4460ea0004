"""GPU tracks of the TileLang GEMM: kernel latency, latency relative to torch.matmul,
and (family ``Launch``) host launch overhead.

    asv run -E existing:python3 --set-commit-hash $(git rev-parse HEAD) --record-samples

All tracks return ``{"samples": [...], "number": 1}``, so asv stores the samples and
computes its CIs and Mann-Whitney test on them. asv reads lower as better, so latency and
latency ratios are tracked, never TFLOP/s. Without a CUDA device every benchmark here is
skipped (n/a) with the reason; ``static.py`` holds the tracks that need no GPU.
"""

import sys

# asv instantiates every public class in a benchmark module: import under private names.
from harness import device as _device
from harness.cases import Case as _Case
from harness.gpu_state import open_nvml as _open_nvml
from harness.timing import measure_launch as _measure_launch
from kernels import GemmConfig as _Config
from kernels import GemmShape as _Shape

DTYPES = {"f16": "float16", "bf16": "bfloat16"}
# Batches of 50 launches until the median's relative standard error is 0.5% (nvbench's
# default target), at most 10 batches or 5 s; batches taken while NVML reports throttling
# are re-taken.
TIMING = {"warmup": 10, "repeat": 50, "target_rsd": 0.005, "max_rounds": 10, "budget_s": 5.0}
RATIO_ROUNDS = 10  # kernel and torch.matmul alternate; one ratio of medians per round
RATIO_TIMING = {"warmup": 5, "repeat": 20}

# asv re-runs setup before every sample and starts a new process per combination, so
# inputs live here; compiled kernels are memoised by kernels.compile_gemm (and on disk).
_CASES: dict[_Shape, _Case] = {}
_NVML: list = []  # one reader per process, opened on first use


def _nvml():
    if not _NVML:
        _NVML.append(_open_nvml())
    return _NVML[0]


def shape_of(size: str, dtype: str, layout: str = "NN") -> _Shape:
    m, n, k = (int(x) for x in size.split("x"))
    return _Shape(m, n, k, DTYPES[dtype], layout)


class _GpuGemm:
    """One compiled kernel and its inputs per combination; subclasses map params to them."""

    unit = "seconds"
    timeout = 300
    number = 1

    def case(self, *params) -> tuple[_Shape, _Config]:
        raise NotImplementedError

    def setup(self, *params):
        reason = _device.no_gpu_reason()
        if reason:
            raise NotImplementedError(f"GPU track skipped: {reason}")
        try:
            self.shape, self.config = self.case(*params)
        except ValueError as err:  # an invalid combination, not a failure
            raise NotImplementedError(str(err)) from None
        if self.shape not in _CASES:
            _CASES[self.shape] = _Case(self.shape)
        self.data = _CASES[self.shape]
        self.data.tilelang_fn(self.config)  # compile outside the timed region

    def track_latency(self, *params):
        timing = self.data.time_tilelang(self.config, **TIMING, nvml=_nvml())
        if timing.throttled or timing.target_met is False:
            print(
                f"note: {self.shape.id} {self.config.id}: throttled={timing.throttled}, "
                f"median rsd {timing.median_rsd:.2%} (target {timing.target_rsd:.1%})",
                file=sys.stderr,
            )
        return {"samples": timing.samples_s, "number": 1}

    def track_vs_torch(self, *params):
        ratios = []
        for _ in range(RATIO_ROUNDS):
            kernel = self.data.time_tilelang(self.config, **RATIO_TIMING).median_ms
            ref = self.data.time_torch(**RATIO_TIMING).median_ms
            ratios.append(kernel / ref)
        return {"samples": ratios, "number": 1}

    track_vs_torch.unit = "ratio"


class Stage(_GpuGemm):
    """The training stage's 128x128x32 tile: threads x num_stages, fp16 and bf16."""

    params = (["128x128x128", "4096x4096x4096"], [128, 256], [1, 2, 3, 4], ["f16", "bf16"])
    param_names = ["shape", "threads", "stages", "dtype"]

    def case(self, size, threads, stages, dtype):
        return shape_of(size, dtype), _Config(128, 128, 32, threads, stages)


class Tiles(_GpuGemm):
    """Larger tiles (two consumer warpgroups, block_K 64) at 4096^3 and 8192^3."""

    params = (
        ["4096x4096x4096", "8192x8192x8192"],
        ["b128x256x64_t256_s3", "b256x128x64_t256_s3", "b128x256x64_t256_s4_w10"],
        ["f16", "bf16"],
    )
    param_names = ["shape", "config", "dtype"]

    def case(self, size, config, dtype):
        return shape_of(size, dtype), _Config.from_id(config)


ATTENTION = {
    # One head, sequence 4096, head dim 128: S = Q K^T is NT, O = P V is NN.
    "qk_t": ("4096x4096x128", "NT"),
    "pv": ("4096x128x4096", "NN"),
}


class Attention(_GpuGemm):
    """Attention-shaped products: QK^T (NT, K = head dim) and P@V (NN, N = head dim)."""

    params = (list(ATTENTION), ["b128x128x32_t128_s3", "b128x128x64_t256_s3"], ["f16", "bf16"])
    param_names = ["op", "config", "dtype"]

    def case(self, op, config, dtype):
        size, layout = ATTENTION[op]
        return shape_of(size, dtype, layout), _Config.from_id(config)


class Launch(_GpuGemm):
    """Host launch overhead of the TileLang kernel: wall time of one call through the
    Python path, device work not waited for. It dominates small shapes."""

    params = (["128x128x128", "4096x4096x4096"], ["b128x128x32_t128_s3", "b128x256x64_t256_s3"])
    param_names = ["shape", "config"]
    track_latency = None  # this family tracks the launch path only
    track_vs_torch = None

    def case(self, size, config):
        return shape_of(size, "f16"), _Config.from_id(config)

    def track_launch(self, *params):
        timing = _measure_launch(self.data.tilelang_fn(self.config))
        return {"samples": timing.samples_s, "number": 1}
