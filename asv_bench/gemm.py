"""GPU tracks of the TileLang GEMM: kernel latency, latency relative to the operator's
torch baseline, and (family ``Launch``) host launch overhead. ``_GpuFamily`` is the base of
every GPU family, the kernel families' too (``families.py`` binds theirs onto it).

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

A family is a subclass of ``_GpuFamily`` with ``params``, ``param_names``, the registry
name of its ``operator`` (``harness.ops.registry``) and ``case`` (params -> shape and
config). Its inputs and baseline come from the operator, its kernel from discovery's one
walk (``discovery.combination`` and ``discovery.build``); ``measure`` times one
combination outside asv (the gate's worker uses it).
"""

from __future__ import annotations

import itertools
import statistics
import sys
import time
import traceback
from dataclasses import dataclass
from typing import TYPE_CHECKING

# asv instantiates every public class in a benchmark module: import under private names.
# Only light modules here; torch, TileLang and the timing path load where they are used.
from asv_bench._setup_cache import own_setup_cache as _own_setup_cache
from harness.measure import device as _device
from harness.suite import discovery as _discovery
from kernels.gemm import SHORT_DTYPES as DTYPES
from kernels.tuned import CASES as _TUNED_CASES

if TYPE_CHECKING:
    from typing import Any

    from kernels import GemmConfig as _Config
    from kernels import GemmShape as _Shape

# Batches of 50 launches until the median's relative standard error is 0.5% (nvbench's
# default target), at most 10 batches or 5 s; batches taken while NVML reports throttling
# are re-taken.
TIMING = {"warmup": 10, "repeat": 50, "target_rsd": 0.005, "max_rounds": 10, "budget_s": 5.0}
# One setup_cache measures a whole family (up to 16 combinations, all its tracks), where
# asv's timeout would give it as long as one track's process.
SETUP_CACHE_TIMEOUT = 1200  # seconds

# Inputs and baseline per (operator, shape) for the process's lifetime (seed 0); compiled
# kernels are memoised by the kernels' compile functions (and on disk).
_INPUTS: dict[tuple[str, Any], tuple[Any, Any]] = {}
_NVML: list = []  # one reader per process, opened on first use


def _nvml():
    if not _NVML:
        from harness.measure.gpu_state import open_nvml

        _NVML.append(open_nvml())
    return _NVML[0]


def _inputs(combo: _discovery.Combination) -> tuple[Any, Any]:
    """The operator's inputs of ``combo``'s shape (seed 0) and its baseline bound to them,
    made once per process."""
    key = (combo.operator, combo.shape)
    if key not in _INPUTS:
        _INPUTS[key] = _placement(combo)
    return _INPUTS[key]


def _placement(combo: _discovery.Combination) -> tuple[Any, Any]:
    """A fresh set of ``combo``'s inputs (seed 0) and its baseline bound to them: the one
    ``_inputs`` keeps, or another for ``versus.placed``, not kept."""
    op = _discovery.operator_of(combo)
    inputs = op.inputs(combo.shape, 0)
    return inputs, op.baseline(inputs)


@dataclass(frozen=True)
class _Prepared:
    """One combination ready to time: its inputs, its baseline (``contract.Baseline``)
    and its kernel's launch on those inputs (None where the combination has no kernel)."""

    combination: _discovery.Combination
    inputs: Any
    baseline: Any
    launch: Any

    @property
    def shape(self):
        return self.combination.shape

    @property
    def config(self):
        return self.combination.config


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


class _GpuFamily:
    """A family of combinations, measured in ``setup_cache`` and read back by the tracks.

    A subclass gives ``params`` (one list per name in ``param_names``), its ``operator``
    and ``case``. ``track_X`` returns the samples ``_measure_X(prepared)`` took for its
    combination.
    """

    operator = "gemm"  # the registry name of the family's operator
    unit = "seconds"
    timeout = 120  # a track's own process, which only reads the cache
    number = 1

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        _own_setup_cache(cls, lambda self: self.measure_all(), SETUP_CACHE_TIMEOUT)

    def case(self, *params) -> tuple[Any, Any]:
        """(shape, config) of one combination; ValueError naming the rule where invalid."""
        raise NotImplementedError

    def combination(self, *params, device=None) -> tuple[str, Any, Any]:
        """(operator, shape, config) of one combination, what discovery's walk builds;
        ``device`` matters only to a family whose config depends on it."""
        return (self.operator, *self.case(*params))

    @classmethod
    def family(cls) -> _discovery.Family:
        """This class as discovery names it: by the suite module asv finds it in (a family
        package's class bound into ``families`` says so in ``_suite_module``)."""
        module = getattr(cls, "_suite_module", None) or cls.__module__.rsplit(".", 1)[-1]
        return _discovery.Family(module, cls.__name__, cls)

    @classmethod
    def tracks(cls) -> list[str]:
        return sorted(n for n in dir(cls) if n.startswith("track_") and callable(getattr(cls, n)))

    def combination_name(self, params: tuple) -> str:
        """``gemm.Stage(4096x4096x4096, 128, 3, f16)``, as the gate names combinations."""
        return self.family().combination_name(params)

    # Measuring, on the GPU, in this process.

    def prepare(self, *params) -> _Prepared:
        """One combination's inputs, baseline and kernel, compiled outside the timed
        region, through discovery's walk: an invalid combination raises ``Skipped`` (a
        NotImplementedError) with the rule, a failed compile ``BuildFailed`` naming it."""
        combo = _discovery.combination(self.family(), params)
        inputs, baseline = _inputs(combo)
        launch = None if combo.config is None else _discovery.build(combo)(inputs)
        return _Prepared(combo, inputs, baseline, launch)

    def measure(self, *params) -> dict[str, list[float]]:
        """``{track: samples}`` of every track of this family for one combination."""
        prepared = self.prepare(*params)
        return {
            t: getattr(self, f"_measure_{t.removeprefix('track_')}")(prepared)
            for t in self.tracks()
        }

    def measure_all(self) -> dict:
        """Every combination of the family: what ``setup_cache`` hands the tracks. Where
        the runner asks (``discovery.SECONDS_ENV``), the seconds this took, in all (the
        CUDA context and the first imports included) and per combination, are recorded."""
        began = time.perf_counter()
        reason = _device.no_gpu_reason()
        if reason:
            return {"no_gpu": f"GPU track skipped: {reason}"}
        # The runner's share for this asv run (a piece of the family on one GPU); the
        # tracks asv runs are the same combinations.
        only = _discovery.selected_combinations()
        combos = [
            c
            for c in itertools.product(*self.params)
            if only is None or self.combination_name(c) in only
        ]
        results: dict[tuple, dict] = {}
        seconds: dict[str, float] = {}
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
            name = self.combination_name(params)
            seconds[name] = time.perf_counter() - start
            print(
                f"[{i}/{len(combos)}] {name}: {status} ({seconds[name]:.1f} s)",
                file=sys.stderr,
                flush=True,
            )
        unit = _discovery.unit_of(self.family())
        _discovery.record_seconds(unit, time.perf_counter() - began, seconds)
        return {"combinations": results}

    def _measure_latency(self, p: _Prepared) -> list[float]:
        from harness.measure.timing import measure

        timing = measure(p.launch, **TIMING, nvml=_nvml())
        if timing.throttled or timing.target_met is False:
            print(
                f"note: {p.shape.id} {p.config.id}: throttled={timing.throttled} "
                f"({', '.join(timing.throttle_reasons) or 'none seen'}, "
                f"{timing.discarded} batch(es) re-taken), "
                f"median rsd {timing.median_rsd:.2%} (target {timing.target_rsd:.1%})",
                file=sys.stderr,
            )
        return timing.samples_s

    def _measure_vs_torch(self, p: _Prepared) -> list[float]:
        # The tuner's confirmation measures the same way (``harness.measure.versus``), so
        # the tuned table's speedups are what this track reads: over the process's input
        # set and fresh ones (``versus.placed``), freed once measured.
        from harness.measure.versus import placed

        def bind(i):
            if i == 0:
                return p.launch, p.baseline.fn
            inputs, baseline = _placement(p.combination)
            return _discovery.build(p.combination)(inputs), baseline.fn

        return placed(bind).ratios

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

    # Lower is better, as asv reads every track: kernel latency over its torch baseline's.
    track_vs_torch.unit = "kernel/torch"


class Stage(_GpuFamily):
    """The training stage's 128x128x32 tile at 4096^3: threads x num_stages, fp16, bf16."""

    params = (["4096x4096x4096"], [128, 256], [1, 2, 3, 4], ["f16", "bf16"])
    param_names = ["shape", "threads", "stages", "dtype"]

    def case(self, size, threads, stages, dtype):
        return shape_of(size, dtype), config_of((128, 128, 32, threads, stages))


class Stage128(Stage):
    """The same grid at 128^3, where launch and pipeline fill dominate."""

    params = (["128x128x128"], [128, 256], [1, 2, 3, 4], ["f16", "bf16"])


class Tiles(_GpuFamily):
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


class Attention(_GpuFamily):
    """Attention-shaped products: QK^T (NT, K = head dim) and P@V (NN, N = head dim)."""

    params = (list(ATTENTION), ["b128x128x32_t128_s3", "b128x128x64_t256_s3"], ["f16", "bf16"])
    param_names = ["op", "config", "dtype"]

    def case(self, op, config, dtype):
        size, layout = ATTENTION[op]
        return shape_of(size, dtype, layout), config_of(config)


class Tuned(_GpuFamily):
    """The tuned config of each case in ``kernels.tuned`` on this GPU (the heuristic where
    the table has none): a commit that loses the tuning shows here."""

    params = (list(_TUNED_CASES), list(DTYPES))
    param_names = ["case", "dtype"]

    def case(self, name, dtype):
        return self.combination(name, dtype)[1:]

    def combination(self, name, dtype, device=None):
        """The tuned config of ``device`` (its name's tuned row, else the heuristic for its
        SM count); ``device`` None: the visible GPU's. No GPU and no device (planning on a
        CPU host): the shape alone, since which config runs depends on the device."""
        from kernels.tuned import case_shape, pick_config

        shape = case_shape(name, DTYPES[dtype])
        if device is None:
            if _device.no_gpu_reason():
                return self.operator, shape, None
            device = _device.DeviceSpec.read()
        config = pick_config(shape, getattr(device, "name", None), device.sm_count)
        return self.operator, shape, config


TORCH = "torch.matmul"


class Launch(_GpuFamily):
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

    def _measure_launch(self, p: _Prepared) -> list[float]:
        from harness.measure.timing import measure_launch

        return measure_launch(p.baseline.fn if p.launch is None else p.launch).samples_s

    def track_launch(self, cache, *params):
        return self._cached(cache, "track_launch", params)
