"""Tracks that need no GPU: cold compile time and the static resources of the kernel
built for sm_90a (registers, shared memory, spills, Hopper instructions). The GEMM's
classes are defined here; ``_Resources`` and ``_CompileTime`` are the same tracks for any
operator, and the kernel families' CPU classes are bound onto them here too
(``static.<Class>``, see ``_bind``), so every CPU track runs in one unit.

They are deterministic for a given TileLang and nvcc, so a change that adds spills or
loses wgmma/TMA shows on any machine with the CUDA compiler. Without nvcc they are
skipped (n/a) with the reason.
"""

import itertools
import os
import shutil
from concurrent.futures import ThreadPoolExecutor as _ThreadPool

from asv_bench._bind import bound as _bound
from asv_bench._setup_cache import own_setup_cache as _own_setup_cache
from harness.measure.resources import cold_compile_program_seconds as _cold_compile_program
from harness.measure.resources import cold_compile_seconds as _cold_compile_seconds
from harness.measure.resources import sm90a_resources as _sm90a_resources

# asv instantiates every public class in a benchmark module: import under private names.
from harness.ops import registry as _registry
from harness.ops.contract import CompileTarget as _CompileTarget
from harness.suite.discovery import Combination as _Combination
from harness.suite.discovery import combination_name as _combination_name
from harness.suite.discovery import cpu_workers as _cpu_workers
from harness.suite.discovery import selected_combinations as _selected_combinations
from harness.suite.precompile import precompile as _precompile
from kernels import GemmConfig as _Config
from kernels import GemmShape as _Shape
from kernels import compile_gemm as _compile_gemm
from kernels.gemm import SHORT_DTYPES as DTYPES

SHAPE = _Shape(4096, 4096, 4096)
_MODULE = __name__.rsplit(".", 1)[-1]  # asv's name of this module: "static"
CONFIGS = [
    "b128x128x32_t128_s3",
    "b128x128x32_t256_s4",
    "b128x128x64_t128_s4",
    "b128x256x64_t256_s3",
    "b256x128x64_t256_s3",
    "b64x256x64_t128_s4",
]
# Cold compile time of a few representative configs, not all: each takes 8-10 s of one
# core, and the compiler path they exercise (lowering, wgmma/TMA codegen, nvcc) is the
# same. The training stage's tile, one consumer warpgroup; the large tile, two of them.
COMPILE_CONFIGS = ["b128x128x32_t128_s3", "b128x256x64_t256_s3"]
# This module runs beside the GPU lanes, whose timing loops each need a free core; the
# runner gives each of several CPU lanes its part of those.
WORKERS = _cpu_workers(max(1, (os.cpu_count() or 2) // 2))


def _need_nvcc():
    if shutil.which("nvcc") is None:
        raise NotImplementedError("skipped: nvcc not found, cannot build for sm_90a")


class Sm90aResources:
    """Registers, spills, shared memory and missing Hopper instructions per config."""

    params = (CONFIGS, list(DTYPES))
    param_names = ["config", "dtype"]
    timeout = 600

    def setup_cache(self):
        # Once per run, not once per track process: build every combination over all
        # cores, then read each one's ptxas report (nvcc runs in parallel threads).
        if shutil.which("nvcc") is None:
            return None
        # Only this run's combinations (the runner may cut the class over CPU lanes).
        only = _selected_combinations()
        pairs = {
            (config, dtype): (
                _Shape(SHAPE.m, SHAPE.n, SHAPE.k, DTYPES[dtype]),
                _Config.from_id(config),
            )
            for config in CONFIGS
            for dtype in DTYPES
            if only is None
            or _combination_name(f"{_MODULE}.{type(self).__name__}", (config, dtype)) in only
        }
        # The SM count sizes no kernel of these fixed configs: any count builds the same.
        combos = [_Combination("", "gemm", *pair) for pair in pairs.values()]
        _precompile(combos, _CompileTarget(sm_count=1), workers=WORKERS, log=lambda line: None)

        def resources(pair):
            return _sm90a_resources(_compile_gemm(*pair, arch="sm_90a"))

        with _ThreadPool(WORKERS) as pool:
            return dict(zip(pairs, pool.map(resources, pairs.values()), strict=True))

    def setup(self, cache, config, dtype):
        _need_nvcc()
        self.res = cache[(config, dtype)]

    def track_registers(self, cache, config, dtype):
        return self.res.registers

    track_registers.unit = "registers/thread"

    def track_spill_bytes(self, cache, config, dtype):
        return self.res.spill_bytes

    track_spill_bytes.unit = "bytes"

    def track_smem_bytes(self, cache, config, dtype):
        return self.res.smem_bytes

    track_smem_bytes.unit = "bytes"

    def track_hopper_missing(self, cache, config, dtype):
        """0 when both wgmma and TMA are used; +1 for each one that is lost."""
        return int(not self.res.has_wgmma) + int(not self.res.has_tma)

    track_hopper_missing.unit = "missing"


class CompileTime:
    """Cold compile (TileLang lowering + nvcc, caches off) per representative config, fp16."""

    params = [COMPILE_CONFIGS]
    param_names = ["config"]
    timeout = 300
    unit = "seconds"

    def setup(self, config):
        _need_nvcc()

    def track_compile_seconds(self, config):
        return _cold_compile_seconds(SHAPE, _Config.from_id(config))


# The kernel families' static tracks: a class gives ``params``, ``param_names``, its
# ``operator`` (the registry's name) and ``kernel_case`` (params -> shape and config), and
# ``_bind`` names the suite module asv finds it in (``_suite_module``).
_ANY_SM = _CompileTarget(sm_count=1)  # these tracks build fixed configs: no SM count sizes them


class _Resources(Sm90aResources):
    """``Sm90aResources``'s tracks for any operator's kernels, built through its
    ``Operator.kernel`` for sm_90a."""

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        _own_setup_cache(cls, cls.build_all, Sm90aResources.timeout)

    def build_all(self):
        """``{params: Resources}`` of this run's combinations, built over all cores."""
        if shutil.which("nvcc") is None:
            return None
        only = _selected_combinations()
        name = f"{self._suite_module}.{type(self).__name__}"
        pairs = {
            params: self.kernel_case(*params)
            for params in itertools.product(*self.params)
            if only is None or _combination_name(name, params) in only
        }
        combos = [_Combination("", self.operator, *pair) for pair in pairs.values()]
        _precompile(combos, _ANY_SM, workers=WORKERS, log=lambda line: None)
        op = _registry.operator(self.operator)

        def resources(pair):
            return _sm90a_resources(op.kernel(*pair, _ANY_SM))

        with _ThreadPool(WORKERS) as pool:
            return dict(zip(pairs, pool.map(resources, pairs.values()), strict=True))

    def setup(self, cache, *params):
        _need_nvcc()
        self.res = cache[params]


class _CompileTime:
    """Cold compile (TileLang lowering + nvcc, caches off) of an operator's program."""

    timeout = CompileTime.timeout
    unit = "seconds"

    def setup(self, *params):
        _need_nvcc()

    def track_compile_seconds(self, *params):
        shape, config = self.kernel_case(*params)
        return _cold_compile_program(_registry.operator(self.operator).program(shape, config))


globals().update(_bound({"resources": _Resources, "compile_time": _CompileTime}, _MODULE))
