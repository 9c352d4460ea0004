"""sm_90a resource extraction, on the CPU (needs nvcc)."""

import pytest

from harness.measure.resources import parse_ptxas, sm90a_resources
from kernels import GemmConfig, GemmShape, compile_gemm
from tests.conftest import requires_nvcc

PTXAS = """ptxas info    : Compiling entry function 'gemm_kernel' for 'sm_90a'
ptxas info    : Function properties for gemm_kernel
    0 bytes stack frame, 24 bytes spill stores, 16 bytes spill loads
ptxas info    : Used 168 registers, used 1 barriers, 1024 bytes smem
"""


def test_parse_ptxas():
    assert parse_ptxas(PTXAS) == {
        "registers": 168,
        "spill_stores": 24,
        "spill_loads": 16,
        "static_smem": 1024,
    }
    with pytest.raises(ValueError, match="registers"):
        parse_ptxas("ptxas info : nothing here")


@requires_nvcc
def test_resources_of_large_tile_on_sm90a():
    config = GemmConfig(128, 256, 64, 256, 3)
    res = sm90a_resources(compile_gemm(GemmShape(4096, 4096, 4096), config, arch="sm_90a"))
    assert 64 <= res.registers <= 255
    assert res.spill_bytes == 0
    assert res.smem_bytes >= config.smem_bytes
    assert res.has_wgmma and res.has_tma
