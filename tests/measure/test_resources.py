"""sm_90a resource extraction, on the CPU (needs nvcc)."""

import pytest

from harness.measure.resources import dynamic_smem, parse_ptxas, sm90a_resources
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
    # No mbarrier, no static shared memory: ptxas says nothing of it.
    bare = PTXAS.replace(", 1024 bytes smem", "")
    assert parse_ptxas(bare)["static_smem"] == 0
    with pytest.raises(ValueError, match="spill_stores"):
        parse_ptxas(bare.replace("24 bytes spill stores", ""))


@requires_nvcc
def test_resources_of_large_tile_on_sm90a():
    config = GemmConfig(128, 256, 64, 256, 3)
    res = sm90a_resources(compile_gemm(GemmShape(4096, 4096, 4096), config, arch="sm_90a"))
    assert 64 <= res.registers <= 255
    assert res.spill_bytes == 0
    assert res.smem_bytes >= config.smem_bytes
    assert res.has_wgmma and res.has_tma
    # The same tile's loads by cp.async: no TMA, no mbarrier, no static shared memory.
    cp_async = GemmConfig(128, 256, 64, 256, 3, cp_async=True)
    res = sm90a_resources(compile_gemm(GemmShape(4096, 4096, 4096), cp_async, arch="sm_90a"))
    assert res.spill_bytes == 0 and res.has_wgmma and not res.has_tma
    assert res.smem_bytes >= cp_async.smem_bytes


def test_dynamic_smem_is_read_from_the_launch_arguments():
    host = "".join(
        f"(((TVMFFIAny*)stack)[{i}].v_int64) = ((int64_t){v});\n"
        for i, v in enumerate([2, 4096, 16, 32, 1, 384, 1, 1, 147456])
    )
    assert dynamic_smem(host) == 147456
    assert dynamic_smem(host.replace("384", "100")) is None  # not a whole number of warps
    assert dynamic_smem("no launch here") is None


@requires_nvcc
def test_shared_memory_follows_the_built_kernel_not_the_config(monkeypatch):
    # A kernel built with one stage under a config that says three (a code change the
    # config cannot see, like a planted num_stages=1): the figure follows the build.
    import kernels.gemm as gemm

    shape, config = GemmShape(4096, 4096, 4096), GemmConfig(128, 256, 64, 256, 3)
    built = sm90a_resources(compile_gemm(shape, config, arch="sm_90a"))
    one_stage = compile_gemm(shape, GemmConfig(128, 256, 64, 256, 1), arch="sm_90a")
    mislabelled = gemm.GemmKernel(shape, config, one_stage.jit_kernel)
    smaller = sm90a_resources(mislabelled)
    assert built.smem_bytes >= 147456 and smaller.smem_bytes < built.smem_bytes - 90000
