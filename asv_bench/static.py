"""Tracks that need no GPU: cold compile time and the static resources of the kernel
built for sm_90a (registers, shared memory, spills, Hopper instructions).

They are deterministic for a given TileLang and nvcc, so a change that adds spills or
loses wgmma/TMA shows on any machine with the CUDA compiler. Without nvcc they are
skipped (n/a) with the reason.
"""

import shutil

from harness.resources import cold_compile_seconds, sm90a_resources
from kernels import GemmConfig, GemmShape, compile_gemm

SHAPE = GemmShape(4096, 4096, 4096)
CONFIGS = [
    "b128x128x32_t128_s3",
    "b128x128x32_t256_s4",
    "b128x128x64_t128_s4",
    "b128x256x64_t256_s3",
    "b256x128x64_t256_s3",
    "b64x256x64_t128_s4",
]
_RESOURCES: dict = {}


def _need_nvcc():
    if shutil.which("nvcc") is None:
        raise NotImplementedError("skipped: nvcc not found, cannot build for sm_90a")


class Sm90aResources:
    """Registers, spills, shared memory and missing Hopper instructions per config."""

    params = (CONFIGS, ["f16", "bf16"])
    param_names = ["config", "dtype"]
    timeout = 300

    def setup(self, config, dtype):
        _need_nvcc()
        key = (config, dtype)
        if key not in _RESOURCES:
            shape = GemmShape(
                SHAPE.m, SHAPE.n, SHAPE.k, {"f16": "float16", "bf16": "bfloat16"}[dtype]
            )
            kernel = compile_gemm(shape, GemmConfig.from_id(config), arch="sm_90a")
            _RESOURCES[key] = sm90a_resources(kernel)
        self.res = _RESOURCES[key]

    def track_registers(self, config, dtype):
        return self.res.registers

    track_registers.unit = "registers/thread"

    def track_spill_bytes(self, config, dtype):
        return self.res.spill_bytes

    track_spill_bytes.unit = "bytes"

    def track_smem_bytes(self, config, dtype):
        return self.res.smem_bytes

    track_smem_bytes.unit = "bytes"

    def track_hopper_missing(self, config, dtype):
        """0 when both wgmma and TMA are used; +1 for each one that is lost."""
        return int(not self.res.has_wgmma) + int(not self.res.has_tma)

    track_hopper_missing.unit = "missing"


class CompileTime:
    """Cold compile (TileLang lowering + nvcc, caches off) per config, fp16."""

    params = [CONFIGS]
    param_names = ["config"]
    timeout = 300
    unit = "seconds"

    def setup(self, config):
        _need_nvcc()

    def track_compile_seconds(self, config):
        return cold_compile_seconds(SHAPE, GemmConfig.from_id(config))
