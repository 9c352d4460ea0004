"""GPU tracks of the TileLang GEMM: kernel latency, latency relative to torch.matmul,
and (family ``Launch``) host launch overhead.

    asv run -E existing:python3 --set-commit-hash $(git rev-parse HEAD) --record-samples

Each family (class) is measured once per asv run, in its ``setup_cache``: one process
imports torch and TileLang, creates the CUDA context and goes through every parameter
combination, timing all of the family's tracks and printing a line per combination.
asv still starts a process per track and combination, but those only hand back the
cached samples: this module imports nothing heavy at the top, so they start fast. The
runner (``harness.suite.run``) may hand a process a share of the family, the
combinations listed in ``discovery.COMBINATIONS_ENV``; it then measures those only.

All tracks return ``{"samples": [...], "number": 1}``, so asv stores the samples and
computes its CIs and Mann-Whitney test on them. asv reads lower as better, so latency and
latency ratios are tracked, never TFLOP/s. Without a CUDA device every benchmark here is
skipped (n/a) with the reason; an invalid combination is skipped with the config's rule;
a combination that fails to build or run fails alone, with its traceback.
``static.py`` holds the tracks that need no GPU.

A new family is a subclass of ``_GpuGemm`` with ``params``, ``param_names`` and
``case``; ``measure`` times one combination outside asv (the gate's worker uses it).
"""

from __future__ import annotations

import itertools
import statistics
import sys
import time
import traceback
from typing import TYPE_CHECKING

# asv instantiates every public class in a benchmark module: import under private names.
# Only light modules here; torch, TileLang and the timing path load where they are used.
from harness.measure import device as _device
from harness.suite.discovery import combination_name as _combination_name
from harness.suite.discovery import selected_combinations as _selected_combinations
from kernels.gemm import SHORT_DTYPES as DTYPES
from kernels.tuned import CASES as _TUNED_CASES

if TYPE_CHECKING:
    from harness.measure.cases import Case as _Case
    from kernels import GemmConfig as _Config
    from kernels import GemmShape as _Shape

# Batches of 50 launches until the median's relative standard error is 0.5% (nvbench's
# default target), at most 10 batches or 5 s; batches taken while NVML reports throttling
# are re-taken.
TIMING = {"warmup": 10, "repeat": 50, "target_rsd": 0.005, "max_rounds": 10, "budget_s": 5.0}
RATIO_ROUNDS = 10  # kernel and torch.matmul alternate; one ratio of medians per round
RATIO_TIMING = {"warmup": 5, "repeat": 20}
# One setup_cache measures a whole family (up to 16 combinations, all its tracks), where
# asv's timeout would give it as long as one track's process.
SETUP_CACHE_TIMEOUT = 1200  # seconds

# Inputs per shape for the process's lifetime; compiled kernels are memoised by
# kernels.compile_gemm (and on disk).
_CASES: dict[_Shape, _Case] = {}
_NVML: list = []  # one reader per process, opened on first use


def _nvml():
    if not _NVML:
        from harness.measure.gpu_state import open_nvml

        _NVML.append(open_nvml())
    return _NVML[0]


def _case(shape: _Shape) -> _Case:
    """The inputs of ``shape``, made once per process."""
    if shape not in _CASES:
        from harness.measure.cases import Case

        _CASES[shape] = Case(shape)
    return _CASES[shape]


def shape_of(size: str, dtype: str, layout: str = "NN") -> _Shape:
    from kernels import GemmShape

    m, n, k = (int(x) for x in size.split("x"))
    return GemmShape(m, n, k, DTYPES[dtype], layout)


def config_of(spec: str | tuple[int, ...]) -> _Config:
    """A config from its id (``b128x256x64_t256_s3``) or its leading fields."""
    from kernels import GemmConfig

    return GemmConfig.from_id(spec) if isinstance(spec, str) else GemmConfig(*spec)


def _summary(samples: dict[str, list[float]]) -> str:
    parts = {
        "track_latency": lambda x: f"{x * 1e3:.3f} ms",
        "track_vs_torch": lambda x: f"kernel/torch {x:.3f}",
        "track_launch": lambda x: f"launch {x * 1e6:.1f} us",
    }
    return ", ".join(parts[t](statistics.median(s)) for t, s in samples.items() if t in parts and s)


class _GpuGemm:
    """A family of combinations, measured in ``setup_cache`` and read back by the tracks.

    A subclass gives ``params`` (one list per name in ``param_names``) and ``case``.
    ``track_X`` returns the samples ``_measure_X(data, config)`` took for its combination.
    """

    unit = "seconds"
    timeout = 120  # a track's own process, which only reads the cache
    number = 1

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)

        def setup_cache(self):
            return self.measure_all()

        # asv keys a setup_cache by its function's module and first source line, so one
        # inherited from here would be shared: the first family's cache handed to all.
        # Each family gets its own, whose source (for that key and for asv's version
        # hash) is the family's class.
        setup_cache.__wrapped__ = cls
        setup_cache.__module__ = cls.__module__
        setup_cache.__qualname__ = f"{cls.__qualname__}.setup_cache"
        setup_cache.timeout = SETUP_CACHE_TIMEOUT
        cls.setup_cache = setup_cache

    def case(self, *params) -> tuple[_Shape, _Config]:
        raise NotImplementedError

    @classmethod
    def tracks(cls) -> list[str]:
        return sorted(n for n in dir(cls) if n.startswith("track_") and callable(getattr(cls, n)))

    def combination_name(self, params: tuple) -> str:
        """``gemm.Stage(4096x4096x4096, 128, 3, f16)``, as the gate names combinations."""
        module = type(self).__module__.rsplit(".", 1)[-1]
        return _combination_name(f"{module}.{type(self).__name__}", params)

    # Measuring, on the GPU, in this process.

    def prepare(self, *params) -> tuple[_Case, _Config]:
        """Inputs and config of one combination, its kernel compiled; an invalid
        combination raises NotImplementedError with the config's rule."""
        try:
            shape, config = self.case(*params)
        except ValueError as err:  # an invalid combination, not a failure
            raise NotImplementedError(str(err)) from None
        data = _case(shape)
        data.tilelang_fn(config)  # compile outside the timed region
        return data, config

    def measure(self, *params) -> dict[str, list[float]]:
        """``{track: samples}`` of every track of this family for one combination."""
        data, config = self.prepare(*params)
        return {
            t: getattr(self, f"_measure_{t.removeprefix('track_')}")(data, config)
            for t in self.tracks()
        }

    def measure_all(self) -> dict:
        """Every combination of the family: what ``setup_cache`` hands the tracks."""
        reason = _device.no_gpu_reason()
        if reason:
            return {"no_gpu": f"GPU track skipped: {reason}"}
        # The runner's share for this asv run (a piece of the family on one GPU); the
        # tracks asv runs are the same combinations.
        only = _selected_combinations()
        combos = [
            c
            for c in itertools.product(*self.params)
            if only is None or self.combination_name(c) in only
        ]
        results: dict[tuple, dict] = {}
        for i, params in enumerate(combos, 1):
            start = time.perf_counter()
            try:
                entry = self.measure(*params)
                status = _summary(entry)
            except NotImplementedError as skip:
                entry = {"skipped": str(skip)}
                status = f"skipped: {skip}"
            except Exception as err:  # this combination fails alone; asv shows it failed
                entry = {"error": "".join(traceback.format_exception(err)).strip()}
                status = f"error: {traceback.format_exception_only(err)[-1].strip()}"
            results[params] = entry
            print(
                f"[{i}/{len(combos)}] {self.combination_name(params)}: {status} "
                f"({time.perf_counter() - start:.1f} s)",
                file=sys.stderr,
                flush=True,
            )
        return {"combinations": results}

    def _measure_latency(self, data: _Case, config: _Config) -> list[float]:
        timing = data.time_tilelang(config, **TIMING, nvml=_nvml())
        if timing.throttled or timing.target_met is False:
            print(
                f"note: {data.shape.id} {config.id}: throttled={timing.throttled} "
                f"({', '.join(timing.throttle_reasons) or 'none seen'}, "
                f"{timing.discarded} batch(es) re-taken), "
                f"median rsd {timing.median_rsd:.2%} (target {timing.target_rsd:.1%})",
                file=sys.stderr,
            )
        return timing.samples_s

    def _measure_vs_torch(self, data: _Case, config: _Config) -> list[float]:
        ratios = []
        for _ in range(RATIO_ROUNDS):
            kernel = data.time_tilelang(config, **RATIO_TIMING).median_ms
            ref = data.time_torch(**RATIO_TIMING).median_ms
            ratios.append(kernel / ref)
        return ratios

    # What asv runs: read back, no GPU.

    def setup(self, cache, *params):
        if "no_gpu" in cache:
            raise NotImplementedError(cache["no_gpu"])
        entry = cache["combinations"][params]
        if "skipped" in entry:
            raise NotImplementedError(entry["skipped"])

    def _cached(self, cache, track: str, params: tuple) -> dict:
        entry = cache["combinations"][params]
        if "error" in entry:
            # The error's own last line first: history stores a failure's first line.
            error = entry["error"]
            cause = error.strip().splitlines()[-1] if error.strip() else "no message"
            raise RuntimeError(f"{self.combination_name(params)} failed: {cause}\n{error}")
        return {"samples": entry[track], "number": 1}

    def track_latency(self, cache, *params):
        return self._cached(cache, "track_latency", params)

    def track_vs_torch(self, cache, *params):
        return self._cached(cache, "track_vs_torch", params)

    # Lower is better, as asv reads every track: kernel latency over torch.matmul's.
    track_vs_torch.unit = "kernel/torch"


class Stage(_GpuGemm):
    """The training stage's 128x128x32 tile at 4096^3: threads x num_stages, fp16, bf16."""

    params = (["4096x4096x4096"], [128, 256], [1, 2, 3, 4], ["f16", "bf16"])
    param_names = ["shape", "threads", "stages", "dtype"]

    def case(self, size, threads, stages, dtype):
        return shape_of(size, dtype), config_of((128, 128, 32, threads, stages))


class Stage128(Stage):
    """The same grid at 128^3, where launch and pipeline fill dominate."""

    params = (["128x128x128"], [128, 256], [1, 2, 3, 4], ["f16", "bf16"])


class Tiles(_GpuGemm):
    """Larger tiles (two consumer warpgroups, block_K 64) at 4096^3 and 8192^3."""

    params = (
        ["4096x4096x4096", "8192x8192x8192"],
        ["b128x256x64_t256_s3", "b256x128x64_t256_s3", "b128x256x64_t256_s4_w10"],
        ["f16", "bf16"],
    )
    param_names = ["shape", "config", "dtype"]

    def case(self, size, config, dtype):
        return shape_of(size, dtype), config_of(config)


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
        return shape_of(size, dtype, layout), config_of(config)


class Tuned(_GpuGemm):
    """The tuned config of each case in ``kernels.tuned`` on this GPU (the heuristic where
    the table has none): a commit that loses the tuning shows here."""

    params = (list(_TUNED_CASES), list(DTYPES))
    param_names = ["case", "dtype"]

    def case(self, name, dtype):
        from kernels.tuned import case_shape, pick_config

        shape = case_shape(name, DTYPES[dtype])
        # No GPU (planning, precompile on a CPU host): the shape alone; which config runs
        # depends on the device (its tuned row, or the heuristic for its SM count).
        if _device.no_gpu_reason():
            return shape, None
        spec = _device.DeviceSpec.read()
        return shape, pick_config(shape, spec.name, spec.sm_count)


TORCH = "torch.matmul"


class Launch(_GpuGemm):
    """Host launch overhead: wall time of one call through the Python path, device work
    not waited for, of the TileLang kernel and of torch.matmul. It dominates small
    shapes."""

    params = (
        ["128x128x128", "4096x4096x4096"],
        ["b128x128x32_t128_s3", "b128x256x64_t256_s3", TORCH],
    )
    param_names = ["shape", "kernel"]
    # It times the host: never cut, first in its GPU's lane, the CPU lane held back.
    solo = True
    track_latency = None  # this family tracks the launch path only
    track_vs_torch = None

    def case(self, size, kernel):
        return shape_of(size, "f16"), None if kernel == TORCH else config_of(kernel)

    def prepare(self, size, kernel):
        if kernel != TORCH:
            return super().prepare(size, kernel)
        shape, _ = self.case(size, kernel)
        return _case(shape), None

    def _measure_launch(self, data: _Case, config: _Config | None) -> list[float]:
        from harness.measure.timing import measure_launch

        fn = data.torch_fn if config is None else data.tilelang_fn(config)
        return measure_launch(fn).samples_s

    def track_launch(self, cache, *params):
        return self._cached(cache, "track_launch", params)
