"""Kernel values, argument checks and sm_90a codegen on the CPU; correctness on a GPU.

pytest tests/test_gemm.py                                   # CPU part; GPU part skips
RUN_TILELANG_SMOKE=1 pytest tests/test_gemm.py -m tilelang  # the training-stage smoke test
"""

import os
import re
from dataclasses import replace

import pytest
import torch

from harness.measure.correctness import check_kernel
from kernels import GemmConfig, GemmKernel, GemmShape, compile_gemm, make_gemm, tuned
from kernels.gemm import DELAY_FUNCTION, WARPGROUP, _compile_gemm
from kernels.schedules import StreamK
from tests.conftest import requires_gpu, requires_nvcc

# --- values -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "kwargs, field, rule",
    [
        ({"m": 0, "n": 8, "k": 8}, "GemmShape.m=0", ">= 1"),
        ({"m": 8, "n": -4, "k": 8}, "GemmShape.n=-4", ">= 1"),
        ({"m": 8, "n": 8, "k": 2.5}, "GemmShape.k=2.5", "integer"),
        ({"m": 8, "n": 8, "k": True}, "GemmShape.k=True", "integer"),
        ({"m": 8, "n": 8, "k": 8, "dtype": "float32"}, "GemmShape.dtype='float32'", "one of"),
        ({"m": 8, "n": 8, "k": 8, "dtype": "int8"}, "GemmShape.dtype='int8'", "one of"),
        ({"m": 8, "n": 8, "k": 8, "layout": "TN"}, "GemmShape.layout='TN'", "one of"),
    ],
)
def test_shape_rejects(kwargs, field, rule):
    with pytest.raises(ValueError) as err:
        GemmShape(**kwargs)
    assert field in str(err.value) and rule in str(err.value)


@pytest.mark.parametrize(
    "kwargs, field, rule",
    [
        ({"block_m": 0}, "block_m=0", ">= 16"),
        ({"block_m": 100}, "block_m=100", "multiple of 16"),
        ({"block_n": 24}, "block_n=24", "multiple of 16"),
        ({"block_k": 8}, "block_k=8", ">= 16"),
        ({"block_k": 512}, "block_k=512", "<= 256"),
        ({"threads": 192}, "threads=192", "multiple of 128"),
        ({"threads": 64}, "threads=64", ">= 128"),
        ({"threads": 1024}, "threads=1024", "<= 512"),
        ({"num_stages": 0}, "num_stages=0", ">= 1"),
        ({"num_stages": -1}, "num_stages=-1", ">= 1"),
        ({"swizzle": -2}, "swizzle=-2", ">= 0"),
        ({"accum_dtype": "float16"}, "accum_dtype='float16'", "one of"),
        ({"policy": "diagonal"}, "policy='diagonal'", "one of"),
        ({"smem_epilogue": 1}, "smem_epilogue=1", "bool"),
        ({"persistent": -1}, "persistent=-1", ">= 0"),
        ({"split_k": 0}, "split_k=0", ">= 1"),
        ({"persistent": 132, "swizzle": 8}, "swizzle=8", "persistent=132 and async_mma=False"),
        ({"persistent": 132, "split_k": 2}, "split_k=2", "must be 1 with persistent"),
        ({"split_k": 4, "swizzle": 8}, "swizzle=8", "must be 0 with split_k=4"),
        ({"async_mma": 1}, "async_mma=1", "bool"),
        ({"async_mma": True, "multicast": "b", "persistent": 7}, "multicast='b'", "even"),
        ({"async_mma": True, "split_k": 2}, "async_mma=True", "needs split_k=1"),
        ({"async_mma": True, "num_stages": 1}, "num_stages=1", ">= 2 with async_mma"),
        ({"stream_k": -1}, "stream_k=-1", ">= 0"),
        ({"stream_k": 132.0}, "stream_k=132.0", "integer"),
        ({"stream_k": 132, "split_k": 2}, "split_k=2", "must be 1 with stream_k=132"),
        ({"stream_k": 132, "persistent": 132}, "persistent=132", "must be 0 with stream_k"),
        ({"stream_k": 132, "async_mma": True}, "stream_k=132", "needs smem_epilogue=True"),
        ({"fixup": 1}, "fixup=1", "bool"),
        ({"fixup": True}, "fixup=True", "needs stream_k > 0 and async_mma=True (got 0, False)"),
        (
            {"fixup": True, "stream_k": 132, "smem_epilogue": True},
            "fixup=True",
            "needs stream_k > 0 and async_mma=True (got 132, False)",
        ),
        (
            {"stream_k": 131, "async_mma": True, "smem_epilogue": True, "multicast": "b"},
            "multicast='b'",
            "whole two-block clusters",
        ),
        ({"multicast": "c", "async_mma": True}, "multicast='c'", "one of"),
        ({"multicast": "b"}, "multicast='b'", "needs async_mma=True"),
        ({"multicast": "a", "async_mma": True, "swizzle": 5}, "swizzle=5", "must be even"),
        ({"swap_ab": 1}, "swap_ab=1", "bool"),
        (
            {"swap_ab": True, "async_mma": True, "multicast": "b"},
            "swap_ab=True",
            "multicast=''",
        ),
        (
            {"swap_ab": True, "async_mma": True, "smem_epilogue": True, "stream_k": 132},
            "swap_ab=True",
            "stream_k=0",
        ),
        (
            {"swap_ab": True, "async_mma": True, "multicast": "ab", "persistent": 132},
            "swap_ab=True",
            "('b' too with persistent > 0)",
        ),
        ({"swap_ab": True, "stream_k": 132}, "swap_ab=True", "stream_k=0"),
        ({"swap_ab": True, "persistent": 132}, "swap_ab=True", "persistent=0"),
        ({"swap_ab": True, "smem_epilogue": True}, "swap_ab=True", "smem_epilogue=False"),
        ({"swap_ab": True, "policy": "col", "threads": 256}, "swap_ab=True", "policy='square'"),
        # 128x256x64 in 4 stages fits (192 KiB) with the C tile in the stages' memory, but
        # not under a persistent grid, whose stages stay live through the write-back.
        (
            {
                "block_n": 256,
                "block_k": 64,
                "threads": 256,
                "num_stages": 4,
                "smem_epilogue": True,
                "persistent": 132,
            },
            "num_stages=4",
            "come on top under a persistent or stream-K grid",
        ),
        # 256x256 tile over 128 threads: 512 fp32 accumulators per thread.
        ({"block_m": 256, "block_n": 256, "threads": 128}, "threads=128", "accumulators"),
        # 256x256x128 in 4 stages needs 512 KiB of shared memory.
        (
            {"block_m": 256, "block_n": 256, "block_k": 128, "threads": 512, "num_stages": 4},
            "num_stages=4",
            "shared memory",
        ),
    ],
)
def test_config_rejects(kwargs, field, rule):
    with pytest.raises(ValueError) as err:
        GemmConfig(**kwargs)
    assert field in str(err.value) and rule in str(err.value)


# What TileLang 0.1.15 cannot build as a wgmma kernel for sm_90a, each refused by name.
# (benchmarks/validate_space.py builds the accepted side; docs/bad_inputs.md has the
# errors TileLang gave before these rules.)
@pytest.mark.parametrize(
    "kwargs, field, rule",
    [
        # Under 64 rows TileLang drops to mma.sync; 80 and 112 fail its warp partition.
        ({"block_m": 16}, "block_m=16", "multiple of 64"),
        ({"block_m": 48}, "block_m=48", "multiple of 64"),
        ({"block_m": 80}, "block_m=80", "multiple of 64"),
        ({"block_m": 112, "block_n": 64}, "block_m=112", "multiple of 64"),
        # 3 warpgroups: 128 rows are not 3 x 64 and 128 columns are not 3 x 8.
        ({"threads": 384}, "threads=384", "cannot split the 128x128 tile"),
        ({"block_m": 64, "block_n": 16, "threads": 512}, "threads=512", "fit this tile: [128, 2"),
        # Square splits 256x48 over 2 warpgroups along N: 24-column slices.
        ({"block_m": 256, "block_n": 48, "threads": 256}, "block_n=48", "multiple of 16"),
        ({"block_n": 16, "threads": 512, "policy": "col"}, "block_n=16", "slices of 8 columns"),
        # One wgmma of 208 columns needs 104 + 26 registers; 512 threads a block cap at 128.
        (
            {"block_m": 192, "block_n": 208, "block_k": 64, "threads": 384},
            "block_n=208",
            "= 130, must be <= 128",
        ),
        (
            {"block_m": 256, "block_n": 144, "block_k": 64, "threads": 512, "policy": "row"},
            "block_n=144",
            "= 98, must be <= 96",
        ),
    ],
)
def test_config_rejects_what_tilelang_cannot_build(kwargs, field, rule):
    with pytest.raises(ValueError) as err:
        GemmConfig(**kwargs)
    assert field in str(err.value) and rule in str(err.value)


@pytest.mark.parametrize(
    "kwargs",
    [
        # The rules above reject by the split TileLang picks, not the tile alone.
        {"block_m": 256, "block_n": 48, "threads": 256, "policy": "row"},  # 48-column slice
        # The widest slice 512 threads can take: 64 + 26 registers <= 96.
        {"block_m": 256, "block_n": 128, "block_k": 64, "threads": 512, "policy": "row"},
        {"block_m": 192, "block_n": 192, "block_k": 64, "threads": 384},  # 96 + 26 <= 128
        {"block_m": 192, "block_n": 128, "block_k": 64, "threads": 384},
    ],
)
def test_config_accepts_neighbours_of_the_refused(kwargs):
    config = GemmConfig(**kwargs)
    assert {name: getattr(config, name) for name in kwargs} == kwargs
    assert GemmConfig.from_id(config.id) == config


def test_config_checks_smem_against_given_limit():
    GemmConfig(128, 256, 64, 256, 4)  # 196 KiB: fits the 227 KiB of sm_90
    assert GemmConfig(128, 256, 64, 256, 4, smem_epilogue=True).smem_bytes == 196608
    assert GemmConfig(128, 256, 64, 256, 3, smem_epilogue=True, stream_k=132).smem_bytes == (
        147456 + 65536
    )
    with pytest.raises(ValueError, match="shared memory"):
        GemmConfig(128, 256, 64, 256, 4, smem_limit=100 * 1024)


def test_c_tile_is_staged_in_halves_only_where_whole_it_does_not_fit():
    """``c_parts``: 128x256x64 in 4 stages takes its persistent and stream-K forms on the
    hand-written pipeline with half the C tile on top of the stages (192 + 32 KiB); 3
    stages keep the whole tile; TileLang's pipeline, the data-parallel form (whose C tile
    reuses the stages) and the row policy (one warpgroup per half) never halve it."""
    halves = GemmConfig(128, 256, 64, 256, 4, smem_epilogue=True, persistent=132, async_mma=True)
    assert halves.c_parts == 2 and halves.smem_bytes == 196608 + 32768
    assert replace(halves, persistent=0, stream_k=132).c_parts == 2
    assert replace(halves, num_stages=3).c_parts == 1
    assert replace(halves, num_stages=3).smem_bytes == 147456 + 65536
    assert replace(halves, persistent=0).c_parts == 1  # the tile reuses the stages
    narrow = GemmConfig(128, 192, 64, 256, 5, smem_epilogue=True, persistent=7, async_mma=True)
    assert narrow.c_parts == 2
    for refused in (
        dict(async_mma=False, swizzle=0),  # TileLang's persistent loop stages it whole
        dict(policy="row"),  # each half would be one warpgroup's
        dict(num_stages=5),  # half the tile does not fit either
    ):
        with pytest.raises(ValueError, match="shared memory") as refusal:
            replace(halves, **refused)
        assert "GemmConfig.num_stages" in str(refusal.value)
        assert "c_parts=" in str(refusal.value) and "must be <= 232448" in str(refusal.value)


def test_ids_are_readable_and_distinct():
    assert GemmShape(4096, 4096, 4096).id == "m4096_n4096_k4096_f16"
    stream_k = GemmConfig(128, 256, 64, 256, 3, swizzle=8, smem_epilogue=True, stream_k=132)
    assert stream_k.id == "b128x256x64_t256_s3_w8_e_sk132"
    summing = replace(stream_k, async_mma=True, fixup=True)
    assert summing.id == "b128x256x64_t256_s3_w8_e_sk132f_a"
    assert GemmShape(1024, 512, 128, "bfloat16", "NT").id == "m1024_n512_k128_bf16_nt"
    assert GemmConfig().id == "b128x128x32_t128_s3"
    assert GemmConfig(128, 256, 64, 256, 3, swizzle=10).id == "b128x256x64_t256_s3_w10"
    configs = [GemmConfig(128, 128, 32, t, s) for t in (128, 256) for s in (1, 2, 3, 4)]
    assert len({c.id for c in configs}) == len(configs) == len(set(configs))


@pytest.mark.parametrize(
    "config",
    [
        GemmConfig(),
        GemmConfig(128, 256, 64, 256, 3, swizzle=8, policy="col", smem_epilogue=True),
        GemmConfig(256, 128, 64, 256, 3, policy="row"),
        GemmConfig(128, 256, 64, 256, 3, smem_epilogue=True, persistent=132),
        GemmConfig(64, 256, 64, 128, 4, split_k=8),
        GemmConfig(128, 256, 64, 256, 3, swizzle=16, smem_epilogue=True, async_mma=True),
        GemmConfig(128, 256, 64, 256, 3, swizzle=8, smem_epilogue=True, stream_k=132),
        GemmConfig(256, 128, 64, 256, 4, policy="col", stream_k=7),
        replace(
            GemmConfig(128, 256, 64, 256, 3, swizzle=16, smem_epilogue=True, stream_k=132),
            async_mma=True,
            multicast="b",
            fixup=True,
        ),
        GemmConfig(128, 256, 64, 256, 4, swizzle=16, async_mma=True, multicast="b"),
        GemmConfig(256, 128, 64, 256, 4, smem_epilogue=True, async_mma=True, multicast="a"),
        GemmConfig(192, 192, 64, 384, 4, policy="row", async_mma=True, multicast="ab"),
        GemmConfig(64, 16, 128, 128, 6, swap_ab=True),
        GemmConfig(64, 96, 64, 128, 8, async_mma=True, multicast="a", swap_ab=True),
        GemmConfig(128, 16, 128, 128, 6, split_k=2, swap_ab=True),
        GemmConfig(128, 192, 64, 256, 4, 8, policy="row", smem_epilogue=True, cp_async=True),
        GemmConfig(64, 64, 64, 128, 4, split_k=8, pad=True),
        GemmConfig(64, 64, 64, 128, 4, split_k=16, cp_async=True, pad=True),
    ],
    ids=lambda c: c.id,
)
def test_config_id_round_trips(config):
    assert GemmConfig.from_id(config.id) == config


@pytest.mark.parametrize(
    "text",
    [
        "b128x256x64_t256_s3_e_w8",
        "b128x256x64_t256_s3_pq",
        "b128x256x64_t256",
        "x",
        "b128x256x64_t256_s3_sk132_e",  # options out of order
        "b128x256x64_t256_s3_sk",
        "b64x16x128_t128_s6_x_k2",  # the exchange comes last
        "b64x64x64_t128_s4_pad_k8",  # the padding comes last
    ],
)
def test_config_id_rejects_malformed(text):
    with pytest.raises(ValueError, match="must look like"):
        GemmConfig.from_id(text)


def test_shape_layout_and_work():
    nt = GemmShape(64, 32, 16, layout="NT")
    assert (nt.a_shape, nt.b_shape, nt.c_shape) == ((64, 16), (32, 16), (64, 32))
    assert GemmShape(64, 32, 16).b_shape == (16, 32)
    assert nt.flops == 2 * 64 * 32 * 16


# --- argument checks (a stand-in kernel, so they run on the CPU) ---------------------


class _Recorder:
    def __init__(self):
        self.calls = 0

    def __call__(self, *args):
        self.calls += 1


@pytest.mark.parametrize(
    "a_shape, b_shape, dtype, message",
    [
        ((64, 32), (16, 32), torch.float16, "a.shape=(64, 32)"),
        ((64, 16), (16, 32), torch.float16, "b.shape=(16, 32)"),  # NN shape given to NT
        ((64, 16), (32, 16), torch.float32, "a.dtype=torch.float32"),
        ((64, 16), (32, 16), torch.float16, "a.device=cpu"),
    ],
)
def test_kernel_rejects_bad_tensors(a_shape, b_shape, dtype, message):
    shape = GemmShape(64, 32, 16, layout="NT")
    fake = _Recorder()
    kernel = GemmKernel(shape, GemmConfig(), fake)
    a = torch.randn(a_shape).to(dtype)
    b = torch.randn(b_shape).to(dtype)
    out = torch.empty(shape.c_shape, dtype=dtype)
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        kernel(a, b, out)
    assert fake.calls == 0


@pytest.mark.parametrize("name, operand", [("a", "A"), ("b", "B"), ("out", "C")])
def test_kernel_rejects_a_view_off_the_16_byte_boundary(name, operand):
    """A view one fp16 element into its storage is contiguous and the right shape, but
    its data pointer is 2 bytes off: TileLang's TMA descriptor would refuse it."""
    shape = GemmShape(64, 32, 16)
    fake = _Recorder()
    kernel = GemmKernel(shape, GemmConfig(), fake)
    sizes = {"a": shape.a_shape, "b": shape.b_shape, "out": shape.c_shape}
    args = {n: torch.empty(s, dtype=torch.float16) for n, s in sizes.items()}
    rows, cols = sizes[name]
    args[name] = torch.empty(rows * cols + 1, dtype=torch.float16)[1:].view(rows, cols)
    assert args[name].is_contiguous()
    rule = rf"^{name} \({operand}\): data pointer 0x[0-9a-f]+ must be 16-byte aligned"
    with pytest.raises(ValueError, match=rule):
        kernel(args["a"], args["b"], args["out"])
    assert fake.calls == 0


def test_kernel_alignment_rule_is_16_bytes():
    # 8 fp16 elements in: aligned, so the check passes on to the device rule.
    shape = GemmShape(64, 32, 16)
    kernel = GemmKernel(shape, GemmConfig(), _Recorder())
    a = torch.empty(64 * 16 + 8, dtype=torch.float16)[8:].view(64, 16)
    b = torch.empty(shape.b_shape, dtype=torch.float16)
    with pytest.raises(ValueError, match="a.device=cpu"):
        kernel(a, b, torch.empty(shape.c_shape, dtype=torch.float16))


def test_kernel_rejects_non_tensor():
    kernel = GemmKernel(GemmShape(8, 8, 8), GemmConfig(), _Recorder())
    with pytest.raises(TypeError, match="a: expected a torch.Tensor"):
        kernel([[1.0]], None)


# --- codegen for sm_90a (no GPU needed) ----------------------------------------------


@requires_nvcc
@pytest.mark.parametrize(
    "shape, config",
    [
        (GemmShape(4096, 4096, 4096), GemmConfig()),
        (GemmShape(4096, 4096, 4096, "bfloat16", "NT"), GemmConfig(128, 256, 64, 256, 3)),
    ],
    ids=lambda v: v.id,
)
def test_sm90a_codegen_uses_hopper_path(shape, config):
    src = compile_gemm(shape, config, arch="sm_90a").source
    assert "tma_load" in src, "expected TMA bulk copies for 16-byte aligned rows"
    assert "GmmaDescriptor" in src or "wgmma" in src, "expected wgmma on sm_90a"
    assert "C_local" in src


@requires_nvcc
@pytest.mark.parametrize(
    "shape, config, expect",
    [
        # The shared-memory epilogue writes C with one TMA store per tile.
        (
            GemmShape(4096, 4096, 4096),
            GemmConfig(128, 256, 64, 256, 3, smem_epilogue=True),
            "tma_store",
        ),
        # Split-K adds each partial tile into C with a TMA reduce-add, over a 3-D grid.
        (GemmShape(16, 8192, 8192), GemmConfig(64, 256, 64, 128, 4, split_k=4), "tma_store_add"),
        # A persistent grid loops over tiles inside one launch of 132 blocks.
        (
            GemmShape(4096, 4096, 4096),
            GemmConfig(128, 256, 64, 256, 3, persistent=132),
            "blockIdx.x",
        ),
        # The operands exchanged: B's tile is the wgmma's first operand, C's tile is
        # stored transposed from registers (no TMA store); under split-K it is
        # transposed into shared memory and reduce-added by TMA where C's rows are
        # 16-byte aligned, added from registers where they are not (N = 7161).
        (
            GemmShape(16, 8192, 8192, "bfloat16"),
            GemmConfig(64, 16, 128, 128, 6, swap_ab=True),
            "wgmma",
        ),
        (
            GemmShape(96, 7168, 2048, "float16", "NT"),
            GemmConfig(128, 96, 64, 128, 4, split_k=2, swap_ab=True),
            "tma_store_add",
        ),
        (
            GemmShape(96, 7161, 2048, "float16", "NT"),
            GemmConfig(128, 96, 64, 128, 4, split_k=2, swap_ab=True),
            "AtomicAdd(",
        ),
        # Stream-K through shared memory: whole tiles by TMA store, partial ones by TMA
        # reduce-add.
        (
            GemmShape(4096, 4096, 4096, "bfloat16"),
            GemmConfig(128, 256, 64, 256, 3, smem_epilogue=True, stream_k=132),
            "tma_store_add",
        ),
    ],
    ids=lambda v: v.id if hasattr(v, "id") else v,
)
def test_sm90a_codegen_of_options(shape, config, expect):
    src = compile_gemm(shape, config, arch="sm_90a").source
    assert expect in src
    if config.split_k > 1:
        assert "blockIdx.z" in src
    if config.persistent or config.stream_k:
        assert "blockIdx.y" not in src  # one grid dimension; tiles come from the loop


@requires_nvcc
@pytest.mark.filterwarnings("error::DeprecationWarning")
def test_sm90a_codegen_of_cp_async_loads():
    """``cp_async``: the same tile's loads by cp.async from every thread (no tensor map,
    no producer warpgroup), the wgmma kept; without it, TMA under warp specialisation.
    Asked per copy (``disable_tma``), not by TileLang's deprecated global option."""
    shape = GemmShape(2096, 2728, 1304, "float16", "NT")
    config = GemmConfig.from_id("b128x192x64_t256_s4_pr_e_c")
    assert config.cp_async and config.id.endswith("_c")
    src = compile_gemm(shape, config, arch="sm_90a").source
    tma = compile_gemm(shape, replace(config, cp_async=False), arch="sm_90a").source
    assert "cp_async" in src and "wgmma" in src and "CUtensorMap" not in src
    assert "__launch_bounds__(256" in src  # the consumers alone
    assert "cp_async" not in tma and "CUtensorMap" in tma and "__launch_bounds__(384" in tma


def test_padded_shape_rounds_up_the_rows_tma_cannot_take():
    from kernels.gemm import check_combination, kernel_shape, padded

    assert padded(GemmShape(42, 1085, 7498)) == GemmShape(42, 1088, 7504)
    # NT: B's rows are K's; N (C's rows) stays.
    assert padded(GemmShape(16, 127, 8085, "bfloat16", "NT")) == GemmShape(
        16, 127, 8088, "bfloat16", "NT"
    )
    config = GemmConfig(64, 64, 64, 128, 4, split_k=8, pad=True)
    assert kernel_shape(GemmShape(42, 1085, 7498), config) == GemmShape(42, 1088, 7504)
    assert kernel_shape(GemmShape(42, 1085, 7498), replace(config, pad=False)).k == 7498
    with pytest.raises(ValueError, match=r"GemmConfig\.pad=True: the rows of A and B"):
        check_combination(GemmShape(128, 128, 128), config)
    with pytest.raises(ValueError, match=r"GemmConfig\.pad='yes': must be a bool"):
        GemmConfig(pad="yes")


@pytest.mark.parametrize("layout", ["NN", "NT"])
def test_padded_operands_hold_the_inputs_and_zeros_around_them(layout):
    """The wrapper's side of ``pad`` (no kernel launched): fresh random operands land in
    the leading rows and columns of the padded buffers, zeros fill the rest, and a
    second launch's operands replace the first's; C goes to its padded buffer where N
    is padded (NN), to ``out`` itself where it is not (NT)."""
    from kernels.gemm import GemmKernel, kernel_shape

    shape = GemmShape(42, 1085, 7498, "float16", layout)
    config = GemmConfig(64, 64, 64, 128, 4, split_k=8, pad=True)
    big = kernel_shape(shape, config)
    kernel = GemmKernel(shape, config, jit_kernel=None)
    out = torch.full(shape.c_shape, float("nan"), dtype=torch.float16)
    for seed in (45, 46):
        gen = torch.Generator().manual_seed(seed)
        a = torch.randn(shape.a_shape, generator=gen).half()
        b = torch.randn(shape.b_shape, generator=gen).half()
        a_pad, b_pad, c = kernel.pad_operands(a, b, out)
        assert a_pad.shape == big.a_shape and b_pad.shape == big.b_shape
        assert torch.equal(a_pad[:, : shape.k], a) and not a_pad[:, shape.k :].any()
        rows, cols = shape.b_shape
        assert torch.equal(b_pad[:rows, :cols], b)
        assert not b_pad[rows:].any() and not b_pad[:, cols:].any()
        assert (c is out) == (layout == "NT")
        assert c.shape == big.c_shape


@requires_nvcc
def test_sm90a_codegen_of_padded_rows():
    """``pad``: the kernel of the padded shape, both operands by TMA where neither's rows
    could be, and the grid, K steps and zeroed rows of that shape."""
    from harness.measure.resources import sm90a_resources

    shape = GemmShape(16, 127, 8085, "bfloat16", "NT")
    config = GemmConfig(64, 64, 64, 128, 4, split_k=8, pad=True)
    kernel = compile_gemm(shape, config, arch="sm_90a")
    unpadded = compile_gemm(shape, replace(config, pad=False), arch="sm_90a").source
    assert "tma_load(A_desc" in kernel.source and "tma_load(B_desc" in kernel.source
    assert "tma_load" not in unpadded
    assert kernel.added_from == 0 and kernel.blocks == 2 * 8
    assert sm90a_resources(kernel).spill_bytes == 0


# Only one operand's rows on 16 bytes (NN): B's rows of 3002 fp16 are 6004 bytes, A's of
# 3000 are 6000; or the other way round.
SPLIT_LOADS = {
    "b_off": GemmShape(4000, 3002, 3000, "float16"),
    "a_off": GemmShape(4000, 3000, 3002, "bfloat16"),
}


@requires_nvcc
@pytest.mark.parametrize("where", sorted(SPLIT_LOADS))
@pytest.mark.parametrize(
    "config_id, fits",
    [
        ("b128x192x64_t256_s4_w8_pr_e", True),  # 96 accumulators + 26 <= 128 registers
        ("b192x96x64_t384_s4_w8_pr_e", True),  # 48 + 26 <= 80
        ("b128x128x64_t128_s4_w8_e", True),  # 128 + 26 <= 255
        ("b128x208x64_t256_s4_w8_pr_e", False),  # 104 + 26 > 128: ptxas gives up
        ("b192x128x64_t384_s4_w8_pr_e", False),  # 64 + 26 > 80: ptxas gives up
        ("b128x256x64_t256_s3_w16_e", False),  # 128 + 26 > 128: spills in the K loop
    ],
)
def test_split_loads_rule_is_what_ptxas_builds(where, config_id, fits, monkeypatch):
    """Where TMA takes one operand's rows and not the other's, TileLang loads that one
    by a second set of as many threads as the consumers; ``check_combination`` accepts a
    tile exactly where its accumulators and a wgmma's working registers fit the halved
    share, and that is where ptxas builds it without spilling (checked here by building
    the rejected ones too, past the check)."""
    import kernels.gemm as gemm
    from harness.measure.resources import sm90a_resources

    shape, config = SPLIT_LOADS[where], GemmConfig.from_id(config_id)
    try:
        gemm.check_combination(shape, config)
        accepted = True
    except ValueError as err:
        accepted = False
        assert f"GemmConfig.threads={config.threads}:" in str(err)
        assert f"each of {2 * config.threads} gets" in str(err)
    assert accepted == fits
    monkeypatch.setattr(gemm, "check_combination", lambda shape, config: None)
    try:
        kernel = compile_gemm(shape, config, arch="sm_90a")
    except Exception as err:  # ptxas: "Insufficient registers"
        assert not fits, err
        return
    assert f"__launch_bounds__({2 * config.threads}, 1)" in kernel.source
    assert (sm90a_resources(kernel).spill_bytes == 0) == fits


@requires_nvcc
@pytest.mark.parametrize("k, copy_bytes", [(2617, None), (3050, 4), (2516, 8)])
def test_sm90a_cp_async_tile_loads_odd_k_rows_in_its_own_k_loop(k, copy_bytes):
    """The premise of ``kernels.tuned.scalar_a``: where K is odd, A's rows are whole only
    in 2-byte steps, under cp.async's 4, and the cp.async tile loads A by plain loads in
    the consumers' K loop; where K is even, by cp.async of 4 or 8 bytes. The tile the
    rule takes there loads B by TMA and A by its second set of threads, without spills."""
    import re

    from harness.measure.resources import sm90a_resources

    shape = GemmShape(3136, 6432, k, "bfloat16")
    source = compile_gemm(shape, tuned.THREAD_LOADS_TILE, arch="sm_90a").source

    def copy_sizes(operand: str) -> set[str]:  # bytes per cp.async into its shared tile
        pattern = rf"cp_async_gs_conditional<(\d+)>\(\(&\(\(\(bfloat16_t\*\){operand}_"
        return set(re.findall(pattern, source))

    assert copy_sizes("B") == {"16"}
    assert copy_sizes("A") == (set() if copy_bytes is None else {str(copy_bytes)})
    assert ("= A[" in source) == (copy_bytes is None)  # a plain load of A
    assert (k * 2 % tuned.CP_ASYNC_MIN_BYTES != 0) == (copy_bytes is None)
    if copy_bytes is None:
        kernel = compile_gemm(shape, tuned.SCALAR_A_TILE, arch="sm_90a")
        assert "tma_load(B_desc" in kernel.source and "A_desc" not in kernel.source
        assert "__launch_bounds__(512" in kernel.source  # the consumers and A's loaders
        assert sm90a_resources(kernel).spill_bytes == 0


@pytest.mark.parametrize(
    "field, value",
    [("async_mma", True), ("persistent", 132), ("stream_k", 132), ("swap_ab", True)],
)
def test_cp_async_is_the_plain_grids_of_tilelangs_pipeline(field, value):
    with pytest.raises(ValueError, match=r"GemmConfig\.cp_async=True: needs async_mma=False"):
        GemmConfig(128, 128, 64, 128, 4, cp_async=True, **{field: value})
    with pytest.raises(ValueError, match=r"GemmConfig\.cp_async='yes': must be a bool"):
        GemmConfig(cp_async="yes")


@requires_nvcc
@pytest.mark.parametrize(
    "policy, slice_n",
    [("square", 96), ("row", 192)],
)
def test_sm90a_codegen_of_the_narrower_wide_tile(policy, slice_n):
    """128x192 over two warpgroups: 128x96 each (two 64-row wgmma), or 64x192 under the
    row policy; 5 stages of block_K 64 with the C tile in their memory, no spills."""
    from harness.measure.resources import sm90a_resources

    config = GemmConfig(128, 192, 64, 256, 5, smem_epilogue=True, policy=policy)
    kernel = compile_gemm(GemmShape(1536, 1536, 1536, "bfloat16", "NT"), config, arch="sm_90a")
    assert f", 64, {slice_n}, 16," in kernel.source  # the wgmma's M, N, K
    resources = sm90a_resources(kernel)
    assert resources.spill_bytes == 0 and resources.has_wgmma and resources.has_tma
    assert resources.smem_bytes >= config.smem_bytes


STREAM_K_CODEGEN = [
    (GemmShape(4096, 4096, 4096, dtype), GemmConfig.from_id(config))
    for dtype in ("float16", "bfloat16")
    for config in ("b128x256x64_t256_s3_w8_e_sk132", "b128x256x64_t256_s4_sk132")
] + [
    (GemmShape(3000, 5000, 7000, "bfloat16"), GemmConfig.from_id("b128x256x64_t256_s3_w8_e_sk132")),
    (GemmShape(3000, 5000, 7000, "float16"), GemmConfig.from_id("b256x128x64_t256_s4_sk132")),
]


@requires_nvcc
@pytest.mark.parametrize("layout", ["NN", "NT"])
def test_sm90a_codegen_of_the_async_stream_k(layout):
    """The hand-written pipeline's stream-K: the whole tiles' loop as the persistent
    form's (a constant 64 K steps, every stage freed before the write-back), then the
    segments', a trip-dependent count added into C by a TMA reduce-add; no spills."""
    from harness.measure.resources import sm90a_resources

    shape = GemmShape(4096, 4096, 4096, "float16", layout)
    config = GemmConfig.from_id("b128x256x64_t256_s3_w4_e_sk132_a")
    kernel = compile_gemm(shape, config, arch="sm_90a")
    src = kernel.source
    plan = StreamK.plan(shape, config)
    consumer = src[src.index("warpgroup_reg_alloc<240>") :]
    assert f"u_1 < {plan.dp_waves}; ++u_1" in consumer
    assert f"j_1 < {plan.segments}; ++j_1" in consumer
    whole, segments = consumer.split(f"j_1 < {plan.segments}")
    assert "ko_2 < 64; ++ko_2" in whole and "tl::tma_store(" in whole
    assert "tma_store_add" in segments and "warpgroup_wait<0>" not in src
    assert kernel.blocks == 132 and sm90a_resources(kernel).spill_bytes == 0
    assert sm90a_resources(kernel).smem_bytes >= config.smem_bytes


@requires_nvcc
@pytest.mark.parametrize("shape, config", STREAM_K_CODEGEN, ids=lambda v: v.id)
def test_sm90a_codegen_of_stream_k(shape, config):
    """One grid dimension of ``stream_k`` blocks; TMA loads and wgmma in the K loop, which
    runs a trip-dependent number of steps; whole tiles written, partial ones added: by a
    TMA reduce-add from shared memory, or by vectorised atomic adds from registers."""
    kernel = compile_gemm(shape, config, arch="sm_90a")
    src = kernel.source
    assert "tma_load" in src and "wgmma_ss" in src
    assert "blockIdx.y" not in src and "blockIdx.z" not in src
    assert f"u < {StreamK.plan(shape, config).units}; ++u" in src  # whole tiles, segments
    if config.smem_epilogue:
        assert "tma_store_add" in src and "tl::tma_store(" in src
        assert "AtomicAdd" not in src
    else:
        assert "AtomicAddx2" in src and "tma_store" not in src
    assert kernel.blocks == config.stream_k


# Stream-K with its shared tiles summed in the kernel (``GemmConfig.fixup``): in pairs
# sharing B with a wave joined to the remainder (3896x2392x1184), under a wave in pairs
# (1432x1888x2568), and 192x192 over three warpgroups on a large shape.
FIXUP_CODEGEN = [
    (GemmShape(3896, 2392, 1184, "bfloat16"), "b128x256x64_t256_s4_w16_e_sk132f_a_mb"),
    (GemmShape(1432, 1888, 2568, "bfloat16"), "b128x192x64_t256_s4_w8_pr_e_sk132f_a_mb"),
    (GemmShape(8296, 7520, 2264, "bfloat16", "NT"), "b192x192x64_t384_s3_w8_pr_e_sk132f_a"),
]


@requires_nvcc
@pytest.mark.parametrize("shape, config_id", FIXUP_CODEGEN)
def test_sm90a_codegen_of_stream_k_summed_in_the_kernel(shape, config_id):
    """Nothing added into C (no TMA reduce-add, no zeroing before the launch): a share
    goes to the workspace and counts in on its tile's flag by a release; the tile's last
    K steps wait on the flag by acquire and set it back to zero; no spills."""
    from harness.measure.resources import sm90a_resources

    config = GemmConfig.from_id(config_id)
    kernel = compile_gemm(shape, config, arch="sm_90a")
    src = kernel.source
    assert "tma_store_add" not in src and kernel.added_from is None
    assert re.search(r"tl_fixup_signal\(\(&\(F\[.*\]\)\)\);", src)
    assert re.search(r"tl_fixup_wait\(\(&\(F\[.*\]\)\), ", src)
    for ptx in ("fence.acq_rel.gpu", "ld.acquire.gpu.global", "st.relaxed.gpu"):
        assert ptx in src
    assert src.count("__sync_thread_partial(15, ") == 2  # around the flag, both sides
    resources = sm90a_resources(kernel)
    assert resources.spill_bytes == 0 and kernel.blocks == config.stream_k


PINGPONG_CODEGEN = [
    (GemmShape(2096, 2728, 1304, "float16", "NT"), "b128x192x64_t256_s4_p132_a_pp"),  # 2 trips
    (GemmShape(2632, 3136, 2912, "bfloat16", "NT"), "b128x176x64_t256_s5_p132_a_pp"),  # 3
    (GemmShape(4096, 4096, 4096, "float16"), "b128x128x64_t256_s6_w8_p132_a_pp"),  # 8 trips
]


@requires_nvcc
@pytest.mark.parametrize("shape, config_id", PINGPONG_CODEGEN, ids=lambda v: getattr(v, "id", v))
def test_sm90a_codegen_of_pingpong(shape, config_id):
    """Two consumer warpgroups of a whole tile each (every wgmma batch one warpgroup's,
    its accumulators the whole tile's), 240 registers each and no spills; each frees the
    stages it used (barriers of one warpgroup's threads) and writes back from registers."""
    from harness.measure.resources import sm90a_resources

    config = GemmConfig.from_id(config_id)
    kernel = compile_gemm(shape, config, arch="sm_90a")
    src = kernel.source
    tile = config.block_m * config.block_n // WARPGROUP
    assert src.count(f"float C_even[{tile}];") == 1 and src.count(f"float C_odd[{tile}];") == 1
    assert src.count("warpgroup_reg_alloc<240>") == 2 and "tma_store" not in src
    assert f"64, {config.block_n}, 16" in src  # one wgmma covers the tile's width
    assert f"empty[{config.num_stages - 1}].init({WARPGROUP});" in src
    assert kernel.blocks == config.persistent
    assert sm90a_resources(kernel).spill_bytes == 0


def test_pingpong_rules_name_the_field():
    good = GemmConfig.from_id("b128x192x64_t256_s5_p132_a_pp")
    assert good.pingpong and good.id == "b128x192x64_t256_s5_p132_a_pp"
    assert good.tile_threads == WARPGROUP and good.smem_bytes == 5 * (128 + 192) * 64 * 2
    for bad in (
        "b128x192x64_t256_s5_a_pp",  # not persistent
        "b128x192x64_t256_s5_p132_pp",  # not the hand-written pipeline
        "b128x192x64_t256_s4_e_p132_a_pp",  # a shared-memory epilogue
        "b128x192x64_t384_s4_p132_a_pp",  # three consumer warpgroups
        "b128x192x64_t256_s4_pr_p132_a_pp",  # a warp policy: one warpgroup takes the tile
        "b128x256x64_t256_s4_p132_a_pp",  # 256 accumulators a thread
        "b128x200x64_t256_s4_p132_a_pp",  # a width off wgmma's 16
        "b128x192x64_t256_s6_p132_a_pp",  # six stages: 240 KiB
    ):
        with pytest.raises(ValueError, match=r"GemmConfig\.\w+="):
            GemmConfig.from_id(bad)


LARGE_TILE_CODEGEN = [
    (GemmShape(2096, 2728, 1304, "float16", "NT"), "b192x192x64_t256_s3_w8_e_sk132_a"),
    (GemmShape(6288, 8440, 5192, "bfloat16"), "b192x192x64_t256_s3_w8_e_p132_a_mb"),
]


@requires_nvcc
@pytest.mark.parametrize("shape, config_id", LARGE_TILE_CODEGEN, ids=lambda v: getattr(v, "id", v))
def test_sm90a_codegen_of_large_tiles_over_two_warpgroups(shape, config_id):
    """192x192 over two consumer warpgroups: 144 accumulators a thread, held in the 240
    registers the consumers take, and no spills (the write-back is inside their branch)."""
    from harness.measure.resources import sm90a_resources

    config = GemmConfig.from_id(config_id)
    assert config.holds_large_tile
    assert config.block_m * config.block_n // config.threads == 144
    kernel = compile_gemm(shape, config, arch="sm_90a")
    assert kernel.source.count("warpgroup_reg_alloc<240>") == 1
    assert sm90a_resources(kernel).spill_bytes == 0


def test_large_tiles_only_where_the_consumers_write_back_in_their_branch():
    assert GemmConfig.from_id("b192x192x64_t256_s3_w8_e_sk132_a").holds_large_tile
    assert GemmConfig.from_id("b128x192x64_t256_s5_p132_a_pp").holds_large_tile
    assert not GemmConfig.from_id("b128x256x64_t256_s4_e_a_mb").holds_large_tile  # plain grid
    for bad in (
        "b192x192x64_t256_s3_e_a_mb",  # a plain grid: written back after the branches
        "b192x192x64_t256_s3_e_p132",  # TileLang's own pipeline
        "b256x256x64_t256_s2_e_p132_a",  # 256 accumulators a thread
    ):
        with pytest.raises(ValueError, match=r"GemmConfig\.threads=256: .* must be <= "):
            GemmConfig.from_id(bad)


MULTICAST_CODEGEN = [
    (GemmShape(4096, 4096, 4096, "float16"), "b128x256x64_t256_s4_w16_e_a_mb"),
    (GemmShape(3000, 5000, 7000, "bfloat16"), "b128x256x64_t256_s4_w8_a_mb"),  # 24 x 20
    (GemmShape(2500, 1800, 4000, "float16", "NT"), "b256x128x64_t256_s4_e_a_ma"),  # 10 x 15
]


@requires_nvcc
@pytest.mark.parametrize("shape, id", MULTICAST_CODEGEN, ids=lambda v: getattr(v, "id", v))
def test_sm90a_codegen_of_the_two_block_clusters(shape, id):
    """Clusters of two along the grid's x, which runs over the axis the pair differs on,
    rounded up to whole pairs; the shared tile by one multicast from the pair's first
    block; the stage released by one thread per consumer warp on both blocks; a cluster
    barrier before the exit; no spills."""
    from harness.measure.resources import sm90a_resources

    config = GemmConfig.from_id(id)
    kernel = compile_gemm(shape, config, arch="sm_90a")
    src = kernel.source
    shared, own = ("B_desc", "A_desc") if config.multicast == "b" else ("A_desc", "B_desc")
    assert f"tma_load_multicast({shared}" in src and f"tma_load_multicast({own}" not in src
    assert f"tl::tma_load({own}" in src
    assert f"empty[0].init({2 * config.threads // 32})" in src
    assert ".arrive((1 - tl::block_rank_in_cluster()))" in src
    assert src.rstrip().rstrip("}").rstrip().endswith("tl::cluster_sync();")
    if config.swizzle:
        assert f"rasterization2DRowWithCluster<{config.swizzle // 2}, 2>" in src
    tiles_m, tiles_n = -(-shape.m // config.block_m), -(-shape.n // config.block_n)
    along, across = (tiles_m, tiles_n) if config.multicast == "b" else (tiles_n, tiles_m)
    assert kernel.blocks == (along + along % 2) * across
    assert sm90a_resources(kernel).spill_bytes == 0


@requires_nvcc
def test_sm90a_codegen_of_the_four_block_clusters():
    """``multicast="ab"``: a 2 x 2 cluster over M and N tiles rounded up to even counts,
    each operand multicast by the lowest rank of the pair that shares it (A to ranks
    0 and 2 or 1 and 3, B to 0 and 1 or 2 and 3), never loaded alone; each stage released
    on all four blocks; no spills."""
    from harness.measure.resources import sm90a_resources

    shape = GemmShape(900, 500, 1304, "float16", "NT")
    config = GemmConfig.from_id("b192x192x64_t384_s4_pr_e_a_mab")
    kernel = compile_gemm(shape, config, arch="sm_90a")
    src = kernel.source
    assert kernel.blocks == 6 * 4  # 5 M tiles and 3 N tiles, each rounded up
    for operand, masks in (("A_desc", (5, 10)), ("B_desc", (3, 12))):
        for mask in masks:
            assert f"tma_load_multicast({operand}, " in src
            assert f"(uint16_t)({mask})" in src
    assert f"empty[0].init({4 * config.threads // 32})" in src
    for other in (1, 2, 3):
        assert f".arrive((tl::block_rank_in_cluster() ^ {other}))" in src
    assert sm90a_resources(kernel).spill_bytes == 0


@requires_nvcc
@pytest.mark.parametrize(
    "size, width",
    [
        ((1112, 1700, 2360), 160),
        ((1552, 1344, 2824), 176),
        ((1880, 1136, 2664), 192),
    ],
)
def test_sm90a_codegen_of_the_heuristics_four_block_clusters(size, width):
    """``kernels.tuned.quad_form``, as ``nt_quads`` picks it in NT: both tile counts
    rounded up to even, the wgmma as wide as the tile, no spills."""
    from harness.measure.resources import sm90a_resources

    shape = GemmShape(*size, "bfloat16", "NT")
    config = tuned.quad_form(width)
    assert tuned.heuristic(shape, 132) == config
    kernel = compile_gemm(shape, config, arch="sm_90a")
    tiles_m, tiles_n = -(-shape.m // 128), -(-shape.n // width)
    assert kernel.blocks == (tiles_m + tiles_m % 2) * (tiles_n + tiles_n % 2)
    assert f", 64, {width}, 16, " in kernel.source  # wgmma m64 n<width> k16
    assert sm90a_resources(kernel).spill_bytes == 0


def test_four_block_clusters_are_refused_off_their_grids():
    """Four-block clusters run on the plain grid or a persistent grid of whole clusters,
    without panels; stream-K is not built for them."""
    base = GemmConfig(192, 192, 64, 384, 4, policy="row", async_mma=True, multicast="ab")
    for fields in ({"persistent": 130}, {"stream_k": 132, "smem_epilogue": True}, {"swizzle": 8}):
        with pytest.raises(ValueError, match=r"GemmConfig\.multicast='ab': needs persistent"):
            replace(base, **fields)
    assert replace(base, persistent=132).id == "b192x192x64_t384_s4_pr_p132_a_mab"


CLUSTERED_PERSISTENT_CODEGEN = [
    (GemmShape(2096, 2728, 1304, "float16", "NT"), "b128x192x64_t256_s4_w8_pr_e_p132_a_mb"),
    (GemmShape(3168, 1560, 3648, "bfloat16"), "b256x128x64_t256_s3_e_sk132_a_ma"),
]


@requires_nvcc
@pytest.mark.parametrize(
    "shape, id", CLUSTERED_PERSISTENT_CODEGEN, ids=lambda v: getattr(v, "id", v)
)
def test_sm90a_codegen_of_clustered_persistent_grids(shape, id):
    """The persistent and stream-K grids in two-block clusters: the cluster's blocks take
    one unit per trip (the trip count and the unit index of the clusters, the block's
    own tile offset by its rank), the shared tile multicast by the first, the stages
    released on both blocks, a cluster barrier before the exit; no spills."""
    from harness.measure.resources import sm90a_resources

    config = GemmConfig.from_id(id)
    kernel = compile_gemm(shape, config, arch="sm_90a")
    src = kernel.source
    shared, own = ("B_desc", "A_desc") if config.multicast == "b" else ("A_desc", "B_desc")
    assert f"tma_load_multicast({shared}" in src and f"tl::tma_load({own}" in src
    assert f"empty[0].init({2 * config.threads // 32})" in src
    assert ".arrive((1 - tl::block_rank_in_cluster()))" in src
    assert src.rstrip().rstrip("}").rstrip().endswith("tl::cluster_sync();")
    rank_offset = config.block_m if config.multicast == "b" else config.block_n
    assert f"(tl::block_rank_in_cluster() * {rank_offset})" in src
    assert kernel.blocks == (config.persistent or config.stream_k)
    assert sm90a_resources(kernel).spill_bytes == 0


def test_async_pipeline_needs_aligned_rows_of_a_and_b():
    config = GemmConfig(128, 128, 64, 128, 4, async_mma=True)
    with pytest.raises(ValueError, match="A rows of 515 elements, B rows of 1031 elements"):
        make_gemm(GemmShape(4097, 1031, 515), config)


@requires_nvcc
@pytest.mark.parametrize("layout", ["NN", "NT"])
def test_sm90a_codegen_of_the_async_pipeline(layout):
    """One wgmma batch stays in flight: the consumers wait for all but the newest batch and
    then release the previous stage; nothing waits for every batch inside the K loop."""
    config = GemmConfig(128, 256, 64, 256, 3, smem_epilogue=True, async_mma=True)
    src = compile_gemm(GemmShape(4096, 4096, 4096, "float16", layout), config, arch="sm_90a").source
    loop = src[src.index("wait_wgmma<1>") - 2000 : src.index("wait_wgmma<0>")]
    assert "warpgroup_wait<0>" not in loop
    assert "empty[" in loop and ".arrive()" in loop
    assert "tma_load" in src and "wgmma_ss" in src and "tma_store" in src
    assert "warpgroup_reg_alloc<240>" in src and "warpgroup_reg_dealloc<24>" in src
    assert "__launch_bounds__(384" in src  # two consumer warpgroups and the producer
    # The TMA issue is elected within the whole producer warpgroup: an election inside a
    # branch that leaves one thread alive (tl_shuffle_elect<1>) hung the warp on the H200.
    assert "tl_shuffle_elect<128>()" in src and "tl_shuffle_elect<1>()" not in src
    assert "full[0].init(128)" in src  # every producer thread arrives


@requires_nvcc
@pytest.mark.parametrize("layout", ["NN", "NT"])
def test_sm90a_codegen_of_the_async_pipeline_with_the_operands_exchanged(layout):
    """C^T = op(B)^T A^T: B's tile is the wgmma's first operand, read transposed (MN-major)
    under NN; A's its second, K-major; the 256-column tile (along N) accumulates in two
    halves, each staged transposed (rows of C along M) and stored by TMA; no spills."""
    from harness.measure.resources import sm90a_resources

    config = GemmConfig.from_id("b256x160x64_t256_s3_pr_e_p132_a_x")
    assert config.c_parts == 2 and config.smem_bytes <= config.smem_limit
    shape = GemmShape(3792, 2728, 2256, "float16", layout)
    kernel = compile_gemm(shape, config, arch="sm_90a")
    src = kernel.source
    trans_a = "true" if layout == "NN" else "false"
    assert f"64, 160, 16, {trans_a}, false, 1, 1>" in src  # m64n160k16 wgmma
    assert src.count("tl::tma_store(") == 2  # one per half
    assert "tl::tma_load(A_desc" in src and "tl::tma_load(B_desc" in src
    assert sm90a_resources(kernel).spill_bytes == 0
    # The halves go to C's columns: the second one 128 columns on.
    assert ") + 128), (" in src


@requires_nvcc
@pytest.mark.parametrize("layout", ["NN", "NT"])
def test_sm90a_codegen_of_exchanged_operands_in_pairs_sharing_a(layout):
    """A skinny M with the operands exchanged, in two-block clusters of two N tiles: the
    pair's first block multicasts A's tile (all 88 rows of M, the wgmma's second operand)
    into both blocks' stage, each loads its own B tile; the grid runs x over N's 124
    tiles of 64, one pair per cluster; no spills."""
    from harness.measure.resources import sm90a_resources

    config = GemmConfig.from_id("b64x96x64_t128_s8_a_ma_x")
    shape = GemmShape(88, 7928, 4136, "bfloat16", layout)
    kernel = compile_gemm(shape, config, arch="sm_90a")
    src = kernel.source
    assert re.search(r"tma_load_multicast\(A_desc, [^;]*B_shared[^;]*\(uint16_t\)\(3\)", src)
    assert "tma_load_multicast(B_desc" not in src and "tl::tma_load(B_desc" in src
    assert "cluster_sync" in src and "blockIdx.y" not in src  # one M tile: a 1-D grid
    assert kernel.blocks == 124 and sm90a_resources(kernel).spill_bytes == 0


@requires_nvcc
@pytest.mark.parametrize("pair", ["a", "b"])
def test_sm90a_codegen_of_exchanged_persistent_pairs(pair):
    """The exchanged persistent form in two-block clusters: under "b" the first block
    multicasts B's tile (the wgmma's first operand, ``A_shared``) and each loads its own
    A tile; under "a" the reverse. Stages are released on both blocks, the pair's
    blocks offset along C^T's rows ("b": block_n, M's tiles) or columns ("a": block_m,
    N's tiles) by their rank, a cluster barrier before the exit; 132 blocks, no spills."""
    from harness.measure.resources import sm90a_resources

    config = GemmConfig.from_id(f"b256x160x64_t256_s3_pr_e_p132_a_m{pair}_x")
    shape = GemmShape(4080, 1224, 3640, "float16", "NT")
    kernel = compile_gemm(shape, config, arch="sm_90a")
    src = kernel.source
    shared, own = ("B_desc", "A_desc") if pair == "b" else ("A_desc", "B_desc")
    assert re.search(rf"tma_load_multicast\({shared}, [^;]*A_shared", src) or pair == "a"
    assert re.search(rf"tma_load_multicast\({shared}, [^;]*B_shared", src) or pair == "b"
    assert f"tma_load_multicast({own}" not in src and f"tl::tma_load({own}" in src
    assert f"empty[0].init({2 * config.threads // 32})" in src
    assert ".arrive((1 - tl::block_rank_in_cluster()))" in src
    assert src.rstrip().rstrip("}").rstrip().endswith("tl::cluster_sync();")
    rank_offset = config.block_n if pair == "b" else config.block_m
    assert f"(tl::block_rank_in_cluster() * {rank_offset})" in src
    assert kernel.blocks == 132 and sm90a_resources(kernel).spill_bytes == 0


@requires_nvcc
def test_exchanged_consumers_wait_for_the_last_batch_inside_the_k_loop():
    """With one batch in flight (4 stages), the wait for the last K step's batch is inside
    the K loop: after it, ptxas moved the transposed write-back's reads of the
    accumulators above that wait (sm_90a, wrong tiles on the H200)."""
    config = GemmConfig.from_id("b128x208x64_t256_s4_pr_e_p132_a_x")
    shape = GemmShape(2400, 4072, 1304, "float16", "NT")
    src = compile_gemm(shape, config, arch="sm_90a").source
    consumer = src[src.index("warpgroup_reg_alloc<240>") :]
    loop = consumer[consumer.index("for (int ko") : consumer.index("tma_store_wait")]
    assert "if (ko_1 == 20) {\n            tl::wait_wgmma<0>();" in loop  # 21 K steps
    assert "tl::wait_wgmma<1>();" in loop


@requires_nvcc
def test_sm90a_codegen_of_three_exchanged_warpgroups_of_64_columns():
    """192 columns of C by 112 rows: three consumer warpgroups, each m64n112k16 on 64
    columns (B's tile read transposed under NN), the whole tile staged once and stored by
    TMA, the last K step's wait inside the K loop (16 K steps of 1000), no spills."""
    from harness.measure.resources import sm90a_resources

    config = GemmConfig.from_id("b192x112x64_t384_s4_pr_e_p132_a_x")
    assert config.c_parts == 1 and config.smem_bytes <= config.smem_limit
    kernel = compile_gemm(GemmShape(1432, 1888, 1000, "bfloat16"), config, arch="sm_90a")
    src = kernel.source
    assert "64, 112, 16, true, false, 1, 1>" in src
    assert "warpgroup_reg_alloc<160>" in src and "full[0].init(128)" in src
    assert src.count("tl::tma_store(") == 1
    assert "if (ko_1 == 15) {\n          tl::wait_wgmma<0>();" in src
    assert sm90a_resources(kernel).spill_bytes == 0


@requires_nvcc
@pytest.mark.parametrize(
    "config",
    [
        GemmConfig(128, 256, 64, 256, 4, swizzle=16, persistent=132, async_mma=True),
        GemmConfig.from_id("b128x256x64_t256_s3_w16_e_p132_a"),
        GemmConfig.from_id("b128x256x64_t256_s4_w16_e_p132_a"),
    ],
    ids=lambda c: c.id,
)
def test_sm90a_codegen_of_the_persistent_async_pipeline(config):
    """The persistent form: both roles loop over the block's tiles; the consumers free
    every stage of a tile before they write the tile back, so the producer loads the next
    tile meanwhile; the accumulators stay in registers. With the C tile staged in halves
    (``c_parts`` 2), a K step is two batches and the tile two stores, the second after
    TMA has read the first out of the one staging buffer. A tile's store runs on under
    the next tile's K steps."""
    from harness.measure.resources import sm90a_resources

    kernel = compile_gemm(GemmShape(4096, 4096, 4096, "float16"), config, arch="sm_90a")
    src = kernel.source
    assert src.count("for (int u") == 2  # the producer's and the consumers' tile loops
    consumer = src[src.index("warpgroup_reg_alloc<240>") :]
    write = consumer.index("tma_store") if config.smem_epilogue else consumer.index("(C + ")
    loop = consumer[consumer.index("for (int ko") : write]
    assert "warpgroup_wait<0>" not in loop
    parts = config.c_parts
    assert consumer.count("tl::tma_store(") == (parts if config.smem_epilogue else 0)
    if config.smem_epilogue:
        # No store is waited for where it is issued: each part waits for the one before
        # to have read the staging buffer, then stages its own; the block waits for its
        # last store before it exits.
        loop_part, *staged, last = consumer.split("tma_store_wait<0, true>")
        assert len(staged) == parts and "stmatrix" not in loop_part
        for part in staged:
            assert part.index("stmatrix") < part.index("tl::tma_store(")
            assert "tma_store_arrive" in part
        assert "stmatrix" not in last and "tma_store" not in last
    if config.num_stages >= 4:
        # One step's batches in flight; the tile's last stage freed once its batches are
        # done, before the write-back.
        inner, tail = loop.split("wait_wgmma<0>")
        assert f"wait_wgmma<{parts}>" in inner and ".arrive()" in tail
        assert inner.count("warpgroup_commit_batch") == parts
    else:
        # Each batch waited for and its stage freed at once, inside the K loop.
        assert "wait_wgmma<1>" not in loop
        assert loop.index("wait_wgmma<0>") < loop.index("empty[")
    assert "__launch_bounds__(384" in src and "warpgroup_reg_dealloc<24>" in src
    assert sm90a_resources(kernel).spill_bytes == 0


# The shared-memory model against what TileLang's planner allocates: the C tile in the
# stages' memory (TileLang's pipeline, the hand-written one, split-K), on top of them under
# a persistent or stream-K grid.
SMEM_CASES = [
    GemmConfig(128, 256, 64, 256, 4, swizzle=16, smem_epilogue=True),
    GemmConfig(128, 256, 64, 256, 4, swizzle=16, smem_epilogue=True, async_mma=True),
    GemmConfig(128, 128, 64, 128, 3, split_k=3),
    GemmConfig(64, 96, 128, 128, 4, split_k=2, swap_ab=True),
    GemmConfig(128, 256, 64, 256, 3, smem_epilogue=True, persistent=132),
    GemmConfig(128, 256, 64, 256, 3, smem_epilogue=True, stream_k=132),
    GemmConfig(128, 256, 64, 256, 3, smem_epilogue=True, persistent=132, async_mma=True),
    # The C tile in halves on top of 4 stages (``c_parts``), persistent and stream-K.
    GemmConfig(128, 256, 64, 256, 4, smem_epilogue=True, persistent=132, async_mma=True),
    GemmConfig(128, 256, 64, 256, 4, smem_epilogue=True, stream_k=132, async_mma=True),
]


@requires_nvcc
@pytest.mark.parametrize("config", SMEM_CASES, ids=lambda c: c.id)
def test_smem_bytes_is_what_the_kernel_allocates(config):
    from harness.measure.resources import dynamic_smem

    kernel = compile_gemm(GemmShape(2048, 2048, 2048), config, arch="sm_90a")
    assert dynamic_smem(kernel.jit_kernel.get_host_source()) == config.smem_bytes


@requires_nvcc
def test_async_write_back_reuses_the_stages():
    """128x256x64 in 4 stages with the C tile staged: 192 KiB only because the tile sits
    in B's stages, which the write-back (after the producer/consumer branches) reuses."""
    config = GemmConfig(128, 256, 64, 256, 4, smem_epilogue=True, async_mma=True)
    src = compile_gemm(GemmShape(4096, 4096, 4096), config, arch="sm_90a").source
    b_at = src[src.index("void* B_shared") :].split(";")[0]
    c_at = src[src.index("void* C_shared") :].split(";")[0]
    assert b_at.split("+")[-1] == c_at.split("+")[-1]  # the same offset
    epilogue = src[src.index("wait_wgmma<0>") :]
    assert "stmatrix" in epilogue and "tma_store" in epilogue


# The hand-written pipeline's configs the tuner's --async-mma twins cover: one and two
# consumer warpgroups, the C tile staged or not, the tiles of the wide space.
ASYNC_SPILL_CASES = [
    GemmConfig(128, 256, 64, 256, 3, swizzle=16, async_mma=True),
    GemmConfig(128, 256, 64, 256, 4, swizzle=16, smem_epilogue=True, async_mma=True),
    GemmConfig(256, 128, 64, 256, 4, swizzle=8, smem_epilogue=True, async_mma=True),
    GemmConfig(128, 192, 64, 256, 4, smem_epilogue=True, async_mma=True),
    GemmConfig(128, 192, 64, 256, 4, policy="row", smem_epilogue=True, async_mma=True),
    GemmConfig(128, 128, 64, 128, 4, smem_epilogue=True, async_mma=True),
]


@requires_nvcc
@pytest.mark.parametrize("config", ASYNC_SPILL_CASES, ids=lambda c: c.id)
def test_async_pipeline_keeps_its_accumulators_in_registers(config):
    """The write-back after the branches runs at one register count for both roles
    (``epilogue_registers``): without it ptxas spilled 2-3 KB of accumulators there."""
    from harness.measure.resources import sm90a_resources
    from kernels.gemm_async import consumer_registers, epilogue_registers

    kernel = compile_gemm(GemmShape(4096, 4096, 4096, "bfloat16"), config, arch="sm_90a")
    assert sm90a_resources(kernel).spill_bytes == 0
    src = kernel.source
    meet = epilogue_registers(config.threads)
    assert f"warpgroup_reg_alloc<{meet}>" in src  # the producer, after its loads
    if meet < consumer_registers(config.threads):
        assert f"warpgroup_reg_dealloc<{meet}>" in src  # the consumers, after their products


def test_async_roles_meet_within_what_the_block_launches_with():
    """The producer's raise must be met by registers the launch gave the block: the
    consumers' lowering frees them, and the sum never passes the register file."""
    from kernels.gemm import register_cap
    from kernels.gemm_async import PRODUCER_THREADS, consumer_registers, epilogue_registers

    assert epilogue_registers(256) == 168 and epilogue_registers(128) == 240
    for consumers in (128, 256, 384):
        meet = epilogue_registers(consumers)
        assert meet % 8 == 0 and meet <= consumer_registers(consumers)
        assert meet <= register_cap(consumers)
        assert (consumers + PRODUCER_THREADS) * meet <= 65536


def test_async_consumers_share_one_register_file():
    from kernels.gemm_async import consumer_registers

    assert consumer_registers(128) == consumer_registers(256) == 240
    assert consumer_registers(384) == 160  # 3 x 128 x 160 + 128 x 24 <= 65536
    for consumers in (128, 256, 384, 512):
        assert consumers * consumer_registers(consumers) + 128 * 24 <= 65536


def test_the_persistent_async_form_through_shared_memory_needs_aligned_rows_of_c():
    """Its tiles are stored by TMA (TileLang: "TMA is not available for src=C_shared,
    dst=C" at N = 500 on the H200). TileLang's own persistent grid loads B's rows by
    threads there, beside A's by TMA: 128x128's accumulators fit the registers that
    leaves a thread, 128x256's do not (``check_combination``)."""
    config = GemmConfig.from_id("b128x256x64_t256_s3_e_p132_a")
    with pytest.raises(ValueError, match=r"persistent=132: with async_mma=True.*N=500"):
        make_gemm(GemmShape(2048, 500, 128), config)
    make_gemm(GemmShape(2048, 504, 128), config)
    with pytest.raises(ValueError, match=r"threads=256: with B rows of 500 elements"):
        make_gemm(GemmShape(2048, 500, 128), GemmConfig.from_id("b128x256x64_t256_s2_e_p132"))
    make_gemm(GemmShape(2048, 500, 128), GemmConfig.from_id("b128x128x64_t128_s2_e_p132"))


# 128x192: its accumulators fit where only one operand is loaded by TMA (128x256's do not).
def test_stream_k_through_shared_memory_needs_aligned_rows_of_c():
    config = GemmConfig(128, 192, 64, 256, 3, smem_epilogue=True, stream_k=132)
    with pytest.raises(ValueError, match=r"stream_k=132: with smem_epilogue=True.*N=1031"):
        make_gemm(GemmShape(4097, 1031, 512), config)
    # From registers, the partial tiles are added element by element: any N.
    make_gemm(GemmShape(4097, 1031, 512), GemmConfig(128, 192, 64, 256, 3, stream_k=132))


def test_stream_k_needs_one_operand_loaded_by_tma():
    config = GemmConfig(128, 192, 64, 256, 4, stream_k=132)
    with pytest.raises(ValueError, match="stream_k=132: needs the rows of A or of B 16-byte"):
        make_gemm(GemmShape(4097, 1031, 515), config)
    make_gemm(GemmShape(4097, 1031, 512), config)  # B's rows unaligned, A's not
    make_gemm(GemmShape(4096, 1032, 515), config)  # A's rows unaligned, B's not


def test_stream_k_kernel_zeroes_the_rows_it_adds_into(monkeypatch):
    """Stream-K adds partial tiles into C: the wrapper zeroes the stream-K tiles' rows
    (from tile row 24 at 4096^3 in 128x256 tiles on 132 blocks) before each launch and
    leaves the rows the data-parallel tiles write alone."""
    monkeypatch.setattr(GemmKernel, "check_args", lambda *a: None)  # another test's rule
    shape = GemmShape(4096, 4096, 4096)
    seen = []
    kernel = GemmKernel(
        shape,
        GemmConfig(128, 256, 64, 256, 3, stream_k=132),
        lambda a, b, out: seen.append(out.clone()),
    )
    out = torch.full((4096, 4096), float("nan"), dtype=torch.float16)
    kernel(None, None, out)
    assert torch.isnan(seen[0][: 24 * 128]).all()
    assert (seen[0][24 * 128 :] == 0).all()
    assert kernel.blocks == 132


def test_split_k_through_shared_memory_needs_aligned_rows_of_c():
    config = GemmConfig(64, 128, 64, 128, 4, split_k=4, smem_epilogue=True)
    want = r"split_k=4: with smem_epilogue=True needs N \* 2.*N=1031"
    with pytest.raises(ValueError, match=want):
        make_gemm(GemmShape(4097, 1031, 515), config)


@requires_nvcc
@pytest.mark.parametrize(
    "shape, config_id",
    [
        (GemmShape(300, 245, 20000), "b128x128x64_t128_s4_k4"),  # B's rows by TMA
        (GemmShape(140, 196, 28169, "bfloat16", "NT"), "b64x64x64_t128_s4_k8"),  # neither
    ],
    ids=lambda v: getattr(v, "id", v),
)
def test_sm90a_codegen_of_split_k_added_from_registers(shape, config_id):
    """Where C's rows are off TMA's 16-byte alignment, a split's partial tile is added
    into C atomically from registers (two elements at a time where N is even): no
    reduce-add by TMA, no C tile in shared memory, no spills."""
    from harness.measure.resources import sm90a_resources

    kernel = compile_gemm(shape, GemmConfig.from_id(config_id), arch="sm_90a")
    src = kernel.source
    atomic = "AtomicAddx2(" if shape.n % 2 == 0 else "AtomicAdd("
    assert atomic in src and "tma_store_add" not in src and "C_shared" not in src
    assert "blockIdx.z" in src
    assert sm90a_resources(kernel).spill_bytes == 0


@requires_nvcc
def test_compile_is_memoised():
    shape, config = GemmShape(256, 256, 256), GemmConfig()
    first = _compile_gemm(shape, config, "sm_90a")
    again = _compile_gemm(GemmShape(256, 256, 256), GemmConfig(), "sm_90a")
    assert again is first
    assert compile_gemm(shape, config, arch="sm_90a").jit_kernel is first


DELAY_CASES = [
    (GemmShape(128, 128, 128), GemmConfig(128, 128, 32, 128, 4)),
    (GemmShape(4096, 4096, 4096), GemmConfig.from_id("b128x256x64_t256_s3_e_sk132")),
    (GemmShape(8192, 8192, 8192), GemmConfig.from_id("b128x256x64_t256_s2_e_p132")),
    (GemmShape(16, 8192, 8192, "bfloat16"), GemmConfig.from_id("b64x256x64_t128_s4_k4")),
    # The hand-written pipeline: tuned configs use it, and the self-test injects into each.
    (GemmShape(4096, 4096, 4096, "bfloat16"), GemmConfig.from_id("b128x256x64_t256_s4_w16_e_a")),
    # Its persistent form, which the tuned squares, mlp_up and attn_qk_t use.
    (GemmShape(4096, 4096, 4096), GemmConfig.from_id("b128x256x64_t256_s3_w4_e_p132_a")),
]


@requires_nvcc
@pytest.mark.parametrize("shape, config", DELAY_CASES, ids=lambda v: v.id)
def test_test_only_delay_is_in_the_source_only_when_asked(shape, config):
    """The self-test's delay is compiled into the kernel: one spin on clock64 taking the
    cycles as a kernel argument, reached by every thread of the block (outside the
    producer/consumer branches), and absent from the kernel the suite tracks."""
    plain = compile_gemm(shape, config, arch="sm_90a")
    slowed = compile_gemm(shape, config, arch="sm_90a", delay=True)
    assert DELAY_FUNCTION not in plain.source and "clock64" not in plain.source
    src = slowed.source
    assert src.count(f"{DELAY_FUNCTION}(") == 2  # its definition and one call
    assert "clock64()" in src
    signature = next(line for line in src.splitlines() if "__global__" in line)
    assert "int64_t" in signature
    # The call sits at the kernel body's top level (two spaces in), before the
    # warp-specialised split: no branch skips it.
    call = [line for line in src.splitlines() if f"{DELAY_FUNCTION}(" in line][-1]
    assert call.startswith(f"  {DELAY_FUNCTION}(")
    assert plain.config == slowed.config and plain.config.id == slowed.config.id


def test_delayed_kernel_passes_its_cycles(monkeypatch):
    monkeypatch.setattr(GemmKernel, "check_args", lambda *a: None)  # another test's rule
    calls = []

    def record(*args):
        calls.append(args)

    shape = GemmShape(8, 8, 8)
    kernel = GemmKernel(shape, GemmConfig(), record, delay=True)
    kernel.delay_cycles = 1234
    args = [torch.empty(s, dtype=torch.float16) for s in (shape.a_shape, shape.b_shape)]
    out = torch.empty(shape.c_shape, dtype=torch.float16)
    kernel(*args, out)
    assert calls[-1][3] == 1234 and len(calls[-1]) == 4
    plain = GemmKernel(shape, GemmConfig(), record)
    plain(*args, out)
    assert len(calls[-1]) == 3


# --- correctness on a GPU ------------------------------------------------------------

CONFIGS = [
    GemmConfig(),
    GemmConfig(64, 128, 64, 128, 4),
    GemmConfig(128, 256, 64, 256, 3),
    GemmConfig(128, 128, 64, 256, 2, swizzle=8),
]
# The tuner's options: shared-memory epilogue, persistent grid, warp policy. Persistent
# blocks loop over more tiles than there are blocks, partial tiles included.
OPTION_CONFIGS = [
    GemmConfig(128, 256, 64, 256, 3, smem_epilogue=True, persistent=132),
    GemmConfig(256, 128, 64, 256, 3, policy="col", smem_epilogue=True, swizzle=8),
    GemmConfig(64, 128, 128, 128, 4, policy="row", smem_epilogue=True),
    # Split K: partial tiles reduce-added into C; with K=2048 over 3 splits or K=256 the
    # last split runs past K and must add nothing. The kernel zeroes C before the splits
    # add into it, so the NaN poison cannot flag an unwritten tile here; the error against
    # the float64 reference does (a missing tile stays zero).
    GemmConfig(64, 128, 64, 128, 4, split_k=4),
    GemmConfig(128, 128, 64, 128, 3, split_k=3),
    # The heuristic's wide tile for a skinny M (``kernels.tuned.WIDE_THIN``), split.
    GemmConfig(64, 256, 64, 128, 4, split_k=2),
    # The hand-written asynchronous pipeline (kernels/gemm_async.py), with and without the
    # shared-memory epilogue and swizzle, one and two consumer warpgroups.
    GemmConfig(128, 256, 64, 256, 3, swizzle=8, smem_epilogue=True, async_mma=True),
    GemmConfig(128, 128, 64, 128, 4, async_mma=True),
    # The C tile written back through the stages' memory: 4 stages of the wide tiles.
    GemmConfig(128, 256, 64, 256, 4, swizzle=16, smem_epilogue=True, async_mma=True),
    GemmConfig(256, 128, 64, 256, 4, swizzle=8, smem_epilogue=True),
    # The narrower wide tile (kernels.tuned.NARROW_WIDE): 5 stages with the C tile in
    # their memory, the row policy, and the hand-written pipeline.
    GemmConfig(128, 192, 64, 256, 5, swizzle=8, smem_epilogue=True),
    GemmConfig(128, 192, 64, 256, 4, policy="row"),
    GemmConfig(128, 192, 64, 256, 4, swizzle=8, policy="row", smem_epilogue=True),
    GemmConfig(128, 192, 64, 256, 4, policy="row", split_k=4),
    GemmConfig(128, 192, 64, 256, 4, smem_epilogue=True, async_mma=True),
    # Its persistent form: a few blocks loop over many tiles (partial ones included), the
    # stages counted over a block's tiles end to end (K steps per tile not a multiple of
    # the stages: 4 at K=256 over 3), the C tile from registers or through shared memory.
    GemmConfig(128, 128, 64, 128, 3, persistent=7, async_mma=True),
    GemmConfig(128, 256, 64, 256, 3, swizzle=8, smem_epilogue=True, persistent=132, async_mma=True),
    GemmConfig(128, 256, 64, 256, 4, swizzle=4, persistent=5, async_mma=True),
    GemmConfig(256, 128, 64, 256, 3, smem_epilogue=True, persistent=9, async_mma=True),
    # The operands exchanged (``swap_ab``): M on the wgmma's N side in tiles of 16 and 32
    # rows (partial where M is not a multiple: 4097, 2048 + 256 in 48), C written back
    # transposed; split K reduce-adds the transposed partial tiles by TMA from shared
    # memory where C's rows are 16-byte aligned, element by element from registers
    # where they are not (N = 1031).
    GemmConfig(64, 16, 128, 128, 6, swap_ab=True),
    GemmConfig(128, 32, 64, 128, 4, swap_ab=True),
    GemmConfig(128, 16, 64, 128, 4, split_k=3, swap_ab=True),
    GemmConfig(64, 96, 128, 128, 4, split_k=2, swap_ab=True),
    GemmConfig(128, 48, 128, 128, 3, swizzle=4, swap_ab=True),
    # The heuristic's swapped pick for 96x7168x2048 NT (``kernels.tuned.swap_for``).
    GemmConfig(64, 96, 128, 128, 4, swap_ab=True),
]
SIZES = [(1000, 1000, 1000), (4097, 1031, 515), (256, 512, 128), (16, 1024, 2048)]
OPTION_SIZES = [(4097, 1031, 515), (16, 1024, 2048), (2048, 2304, 256)]


def _supported(shape: GemmShape, config: GemmConfig) -> bool:
    """Split-K and stream-K reduce through shared memory, and the async pipeline loads,
    through TMA, which needs 16-byte aligned rows: of C for a reduce through shared
    memory; of A and B for the async pipeline, of A or B for stream-K. (From registers
    split-K and stream-K add into any C.) Padded rows only where some need padding."""
    if config.split_k > 1 and config.smem_epilogue and shape.n % 8:
        return False
    b_row = shape.k if shape.layout == "NT" else shape.n
    if config.stream_k and shape.k % 8 and b_row % 8:
        return False  # stream-K: one of them at least
    if config.stream_k and config.smem_epilogue and shape.n % 8:
        return False  # stream-K's reduce-add through shared memory
    if config.pad and shape.k % 8 == 0 and (shape.layout == "NT" or shape.n % 8 == 0):
        return False  # rows aligned already: nothing to pad
    return not (config.async_mma and (shape.k % 8 or b_row % 8))


# Split K over small outputs with a long K where C's rows are off TMA's alignment (N not
# a multiple of 8): the partial tiles added from registers, B's rows by TMA (NN) or
# neither operand's (K odd in NT), M and N partial tiles, the last split past K.
SPLIT_FROM_REGISTERS = [
    (GemmShape(300, 245, 20000, dtype, layout), GemmConfig.from_id(config))
    for dtype in ("float16", "bfloat16")
    for layout, config in (("NN", "b128x128x64_t128_s4_k4"), ("NT", "b64x64x64_t128_s4_k8"))
] + [(GemmShape(140, 196, 28169, "bfloat16", "NT"), GemmConfig.from_id("b64x64x64_t128_s4_k8"))]

GPU_CASES = [
    (GemmShape(*size, dtype, layout), config)
    for sizes, configs in ((SIZES, CONFIGS), (OPTION_SIZES, OPTION_CONFIGS))
    for size in sizes
    for dtype in ("float16", "bfloat16")
    for layout in ("NN", "NT")
    for config in configs
    if _supported(GemmShape(*size, dtype, layout), config)
] + SPLIT_FROM_REGISTERS


@pytest.mark.gpu
@requires_gpu
@pytest.mark.parametrize("shape, config", GPU_CASES, ids=[f"{s.id}-{c.id}" for s, c in GPU_CASES])
def test_matches_float64_reference(shape, config):
    kernel = compile_gemm(shape, config)
    for seed in (11, 12):  # fresh inputs and a fresh poisoned output each launch
        result = check_kernel(kernel, seed=seed)
        assert result.unwritten == 0, f"{result.unwritten} outputs never written"
        assert result.ok, str(result)


# Stream-K (kernels/schedules.py): uneven shares of the last wave (4096^3: 7424 K steps
# over 132 blocks), two-tile stream-K (1000^3 on 7 blocks, added from registers: a full
# wave joins the one leftover tile), a small remainder shared out alone (2500x1800x4000
# through shared memory: 18 tiles after one data-parallel wave), fewer tiles than blocks
# (blocks with no K step), the panel order, odd sizes with partial edge tiles, both
# partial-tile paths (TMA reduce-add through shared memory, atomic adds from registers).
STREAM_K_SIZES = {
    "b128x256x64_t256_s3_e_sk132": [(4096, 4096, 4096), (3000, 5000, 7000)],
    "b128x256x64_t256_s4_sk132": [(4096, 4096, 4096), (3000, 5000, 7000)],
    # One operand's rows unaligned: in 128x128 tiles over one warpgroup, whose accumulators
    # fit the registers left beside the threads that load it (128x256's do not:
    # ``check_combination``) with none spilled.
    "b128x128x64_t128_s4_sk132": [
        (4097, 1031, 512),  # C's and B's rows unaligned: the atomic adds from registers
        (1000, 1032, 515),  # A's rows unaligned: loaded without TMA
    ],
    "b256x128x64_t256_s3_w8_e_sk132": [(8192, 8192, 8192)],
    "b256x128x64_t256_s3_e_sk132": [(2500, 1800, 4000)],
    "b128x192x64_t256_s3_w8_e_sk132": [(1536, 1536, 1536), (3000, 5000, 7000)],
    "b128x128x64_t128_s4_sk7": [(1000, 1000, 1000)],
    "b128x128x64_t128_s3_w4_e_sk7": [(1000, 1000, 1000)],
    "b128x128x64_t128_s3_sk132": [(256, 512, 128)],
    "b64x128x64_t128_s4_e_sk132": [(16, 1024, 2048)],
    # The hand-written pipeline's stream-K (its persistent form with the last wave shared
    # out): the squares' 116 tiles over 132 blocks, a wave and a fraction, a few blocks
    # over many tiles (the two-tile variant: through shared memory the remainder alone),
    # fewer tiles than blocks, and 4 stages with one batch in flight.
    "b128x256x64_t256_s3_w4_e_sk132_a": [(4096, 4096, 4096), (2048, 2304, 1024)],
    "b256x128x64_t256_s3_e_sk132_a": [(2500, 1800, 4000)],
    # The heuristic's stream-K picks off the table: both operands' rows off a sector and
    # K not a multiple of 64; two waves and a fraction.
    "b128x256x64_t256_s3_e_sk132_a": [(2000, 3000, 3000), (3584, 2560, 2048)],
    "b128x128x64_t128_s4_w4_e_sk7_a": [(1000, 1000, 1024)],
    "b128x128x64_t128_s3_e_sk132_a": [(256, 512, 128)],
}


def cases_of(sizes_by_config: dict[str, list[tuple[int, int, int]]]) -> list[tuple]:
    """``(shape, config)`` for each config id and size, in both dtypes; NT only on the
    sizes below 4096 rows; the combinations TMA supports (``_supported``)."""
    return [
        (GemmShape(*size, dtype, layout), GemmConfig.from_id(config))
        for config, sizes in sizes_by_config.items()
        for size in sizes
        for dtype in ("float16", "bfloat16")
        for layout in ("NN", "NT")
        if layout == "NN" or size[0] < 4096
        if _supported(GemmShape(*size, dtype, layout), GemmConfig.from_id(config))
    ]


STREAM_K_CASES = cases_of(STREAM_K_SIZES)


def tile_errors(shape: GemmShape, config: GemmConfig, got, ref):
    """Relative Frobenius error of each tile of C (block_m x block_n, or block_n x
    block_m with the operands exchanged): a K segment lost or added twice in one tile of
    many barely moves the error over all of C."""
    import torch.nn.functional as F

    bm, bn = tuned.tile_of_c(config)
    tm, tn = -(-shape.m // bm), -(-shape.n // bn)
    pad = (0, tn * bn - shape.n, 0, tm * bm - shape.m)
    diff = F.pad(got.double() - ref, pad).reshape(tm, bm, tn, bn)
    norm = F.pad(ref, pad).reshape(tm, bm, tn, bn)
    return diff.square().sum((1, 3)).sqrt() / norm.square().sum((1, 3)).sqrt()


def test_tile_errors_flag_one_wrong_tile():
    """The per-tile check the stream-K test relies on, on the CPU: one tile missing a
    sixteenth of its K steps stands out, where the error over all of C stays small."""
    shape, config = GemmShape(1000, 1000, 1024), GemmConfig(128, 128, 64, 128, 3)
    a, b = (
        torch.randn(1000, 1024, dtype=torch.float64),
        torch.randn(1024, 1000, dtype=torch.float64),
    )
    ref = a @ b
    got = ref.clone()
    got[128:256, 896:] -= a[128:256, :64] @ b[:64, 896:]  # a partial edge tile lost a step
    errors = tile_errors(shape, config, got, ref)
    assert errors.shape == (8, 8) and float(errors[1, 7]) > 0.2
    assert float(errors.sum() - errors[1, 7]) == 0
    assert torch.linalg.norm(got - ref) / torch.linalg.norm(ref) < 0.05


def gpu_cases(cases: list[tuple]):
    """The GPU marks and the ``(shape, config)`` parametrisation over ``cases``."""

    def mark(test):
        ids = [f"{s.id}-{c.id}" for s, c in cases]
        test = pytest.mark.parametrize("shape, config", cases, ids=ids)(test)
        return pytest.mark.gpu(requires_gpu(test))

    return mark


@gpu_cases(STREAM_K_CASES)
def test_stream_k_matches_float64_reference_tile_by_tile(shape, config):
    # The wrapper zeroes only the stream-K tiles' rows: the rest keep the poison.
    check_tile_by_tile(shape, config, seeds=(21, 22))


def check_tile_by_tile(shape: GemmShape, config: GemmConfig, seeds: tuple[int, ...]) -> None:
    """Fresh inputs and a NaN-poisoned output for each seed: every output written, and
    every tile within the tolerance of the float64 reference (``tile_errors``)."""
    from harness.ops.gemm import GEMM

    kernel = compile_gemm(shape, config)
    for seed in seeds:
        inputs = GEMM.inputs(shape, seed)
        inputs.out.fill_(float("nan"))
        kernel(inputs.a, inputs.b, inputs.out)
        torch.cuda.synchronize()
        assert not torch.isnan(inputs.out).any(), "outputs never written"
        (ref,) = GEMM.reference(inputs)
        worst = float(tile_errors(shape, config, inputs.out, ref).max())
        assert worst <= GEMM.tolerance(shape), f"worst tile rel err {worst:.1e}"


# The heuristic's wave-fitting tiles (``kernels.tuned.FITTED``): widths of 144-224 columns
# in two warpgroups and 192 rows in three, each on the layouts it is scored on, partial
# edge tiles along M and N (1000 = 5 x 192 + 40 = 7 x 144 + 8), the dtype alternating.
FITTED_CASES = list(
    dict.fromkeys(
        (GemmShape(1000, 1000, 1000, ("float16", "bfloat16")[i % 2], layout), tile.config)
        for i, tile in enumerate(tuned.FITTED)
        for layout in tile.layouts
    )
)


@gpu_cases(FITTED_CASES)
def test_fitted_tiles_match_float64_reference_tile_by_tile(shape, config):
    check_tile_by_tile(shape, config, seeds=(41, 42))


# Two-block clusters (``GemmConfig.multicast``): both shared operands, the C tile staged
# or written from registers, one and two consumer warpgroups; pair axes of odd length
# (1152 / 128 = 9 M tiles, 1408 / 128 = 11 N tiles: a last pair with a block past C),
# a single tile along it (M = 16), many laps of the stages (K = 4096), NN and NT.
MULTICAST_SIZES = {
    "b128x256x64_t256_s4_w16_e_a_mb": [(1152, 1408, 1024), (16, 1024, 2048), (4096, 4096, 4096)],
    # Three consumer warpgroups in pairs, as ``kernels.tuned.off_sector_plain_pair`` picks
    # them (3688x1048x1896: 20 M tiles, 1048 = 5 x 192 + 88 columns, K = 29 x 64 + 40).
    "b192x192x64_t384_s4_pr_e_a_mb": [(3688, 1048, 1896)],
    # 128x160's pair in 5 stages, as ``kernels.tuned.narrower_nt_pair`` picks it in NT
    # (1760x1224x3288: 14 M tiles, 1224 = 7 x 160 + 104 columns, K = 51 x 64 + 24).
    "b128x160x64_t256_s5_pr_e_a_mb": [(1760, 1224, 3288)],
    "b128x256x64_t256_s4_w8_a_mb": [(1152, 1408, 1024), (3000, 5000, 7000)],
    "b256x128x64_t256_s4_w8_e_a_ma": [(1152, 1408, 1024), (2500, 1800, 4000)],
    "b128x128x64_t128_s4_a_ma": [(1152, 1408, 1024), (16, 1024, 2048)],
    # Four-block clusters sharing both operands: tile counts odd along both axes (900 =
    # 4 x 192 + 132 rows, 5 M tiles; 500 = 2 x 192 + 116 columns, 3 N tiles), and the
    # off-sector shape they are meant for (2096x2728x1304: 11 x 15 tiles of 192x192).
    "b192x192x64_t384_s4_pr_e_a_mab": [(900, 500, 1304), (2096, 2728, 1304)],
    "b128x256x64_t256_s4_e_a_mab": [(900, 500, 1304)],
    # 128x160, 128x176 and 128x192 in them as ``kernels.tuned.nt_quads`` picks them in
    # NT (128x192 in NN too, ``kernels.tuned.nn_exchanged``), and 128x208 (tried), partial
    # edge tiles on both axes, an odd count of M tiles on each (a last cluster row past
    # C: 1112 = 8 x 128 + 88, 1552 = 12 x 128 + 16, 1880 = 14 x 128 + 88, 2128 = 16 x 128
    # + 80) and of N tiles on 128x160's (1700 = 10 x 160 + 100; 1032 = 6 x 160 + 72, a
    # shape the rule gives to 128x176).
    "b128x160x64_t256_s5_pr_e_a_mab": [(1112, 1700, 2360), (1816, 1032, 2360)],
    "b128x176x64_t256_s5_pr_e_a_mab": [(1552, 1344, 2824)],
    "b128x192x64_t256_s4_pr_e_a_mab": [(1880, 1136, 2664)],
    "b128x208x64_t256_s4_pr_e_a_mab": [(2128, 1224, 2424)],
    # 128x192 in pairs of N tiles sharing A, as ``kernels.tuned.nn_exchanged`` picks it in
    # NN where four-block clusters pass 120 blocks: 7 N tiles (1320 = 6 x 192 + 168), the
    # last pair's second block past C; 1904 = 14 x 128 + 112 rows; K = 61 x 64 + 8.
    "b128x192x64_t256_s4_pr_e_a_ma": [(1904, 1320, 3912)],
}
MULTICAST_CASES = cases_of(MULTICAST_SIZES)

# The hand-written pipeline under the row and column warp policies (each consumer
# warpgroup 64x192 of a 128x192 tile, or 128x64 of a 256x128 one): data-parallel, in
# pairs, and stream-K on its persistent form, with partial edge tiles.
POLICY_SIZES = {
    "b128x192x64_t256_s4_w8_pr_e_a": [(1000, 1000, 1024)],
    "b128x192x64_t256_s4_w8_pr_e_a_mb": [(1152, 1408, 1024), (2000, 3000, 3000)],
    "b128x192x64_t256_s4_pr_e_sk132_a": [(2500, 1800, 4000)],
    "b256x128x64_t256_s3_pc_e_a": [(1000, 1000, 1024)],
}
POLICY_CASES = cases_of(POLICY_SIZES)


@gpu_cases(POLICY_CASES)
def test_async_pipeline_under_each_warp_policy_matches_float64_tile_by_tile(shape, config):
    check_tile_by_tile(shape, config, seeds=(51, 52))


# The C tile staged in row halves (``GemmConfig.c_parts``) on top of 4 stages: the
# persistent form over the squares' 4 trips and over many trips of a few blocks (partial
# edge tiles: 1000 = 7 x 128 + 104, so the last tiles' bottom halves lie partly or wholly
# past C), stream-K's shares added in halves, and 128x192 in 5 stages.
HALVES_SIZES = {
    "b128x256x64_t256_s4_w4_e_p132_a": [(4096, 4096, 4096)],
    "b128x256x64_t256_s4_w8_e_p5_a": [(1000, 1000, 1024), (4097, 1032, 512)],
    "b128x256x64_t256_s4_w4_e_sk132_a": [(4096, 4096, 4096), (2048, 2304, 1024)],
    "b128x192x64_t256_s5_w8_e_p7_a": [(1000, 1000, 1024)],
}
HALVES_CASES = cases_of(HALVES_SIZES)


@gpu_cases(HALVES_CASES)
def test_c_tile_in_halves_matches_float64_tile_by_tile(shape, config):
    assert config.c_parts == 2
    check_tile_by_tile(shape, config, seeds=(61, 62))


# The heuristic's grid for a short K (``kernels.tuned.small_k_grid``: each tile's store
# runs on under the next tile's K steps): one K step a tile (K = 64), a block's K steps
# not a multiple of the stages (K = 256 over 3), partial edge tiles (3000 = 23 x 128 +
# 56), and fewer tiles than blocks (1000^2: 32 tiles on 132 blocks). Its 192x192 form
# (``SMALL_K_SQUARE``) with partial edge tiles in both dimensions (2152 = 11 x 192 + 40,
# 4088 = 21 x 192 + 56; 2936x2952: two K steps, NT).
SHORT_K_CASES = [
    (shape, tuned.heuristic(shape, 132))
    for shape in (
        GemmShape(2048, 2048, 64, "float16", "NT"),
        GemmShape(3000, 5000, 256, "bfloat16"),
        GemmShape(1000, 1000, 128, "bfloat16", "NT"),
        GemmShape(2152, 4088, 64, "bfloat16"),
        GemmShape(2936, 2952, 128, "float16", "NT"),
    )
]


@gpu_cases(SHORT_K_CASES)
def test_short_k_grid_matches_float64_tile_by_tile(shape, config):
    assert config.async_mma and config.persistent
    check_tile_by_tile(shape, config, seeds=(71, 72))


# 128x192's persistent form as the heuristic runs it (``kernels.tuned.narrow_persistent``)
# on 132 SMs: two trips of tiles with partial edge tiles (3000x2000: 264 tiles; 3000 =
# 23 x 128 + 56, 2000 = 10 x 192 + 80) and a partial K step (1000 = 15 x 64 + 40); and on
# 7 blocks, many trips.
NARROW_PERSISTENT_CASES = cases_of(
    {
        replace(tuned.NARROW_PERSISTENT, persistent=132).id: [(3000, 2000, 1000)],
        replace(tuned.NARROW_PERSISTENT, persistent=7).id: [(1000, 1000, 1024)],
    }
)


@gpu_cases(NARROW_PERSISTENT_CASES)
def test_128x192_persistent_matches_float64_tile_by_tile(shape, config):
    check_tile_by_tile(shape, config, seeds=(81, 82))


# Ping-pong on 132 blocks: two trips (3000x2000 in 128x192 tiles: 24 x 11 = 264, each
# warpgroup one tile, edges partial, a partial K step) and an odd count of trips on 7
# blocks (1000x1000 in 128x176: 8 x 6 = 48 tiles, 7 trips: the even warpgroup takes 4).
PINGPONG_CASES = cases_of(
    {
        "b128x192x64_t256_s4_p132_a_pp": [(3000, 2000, 1000)],
        "b128x176x64_t256_s5_p7_a_pp": [(1000, 1000, 1024)],
    }
)


@gpu_cases(PINGPONG_CASES)
def test_pingpong_matches_float64_tile_by_tile(shape, config):
    """A warpgroup that reads a stage the other one's tile owns, or frees one early,
    spoils whole tiles: checked tile by tile, into a NaN-poisoned output."""
    check_tile_by_tile(shape, config, seeds=(91, 92))


@gpu_cases(MULTICAST_CASES)
def test_two_block_clusters_match_float64_reference_tile_by_tile(shape, config):
    """A pair that loads the wrong shared tile, or refills a stage its partner still
    reads, spoils whole tiles: checked tile by tile, into a NaN-poisoned output."""
    check_tile_by_tile(shape, config, seeds=(31, 32))


# Two-block clusters on the persistent and stream-K grids (``kernels.schedules.Units``):
# each cluster takes a pair of tiles at a time. Pair axes of odd length (2096 / 128 = 17
# M tiles: the last pair's second block lies past C; 1408 / 128 = 11 N tiles), partial
# edge tiles and K steps (1304 = 20 x 64 + 24), three trips a cluster on 132 blocks, many
# trips on 6, stream-K's shares of pairs added in, the C tile staged whole, in halves
# or written from registers; and 128x256's pairs over every SM, as the heuristic picks
# them where B's rows are off a sector (``kernels.tuned.clustered_pair``: 2184 columns,
# 23 M tiles, K = 19 x 64 + 16); and 256x128's stream-K pairs sharing A as the heuristic
# picks them in NN with both operands' rows off a sector (``kernels.tuned.off_sector_nn``:
# 2568x1752x1560, 14 N tiles paired, K = 24 x 64 + 24); and the pairs' stream-K forms
# that ``kernels.tuned.streamed_pair`` picks where their last trip is mostly idle
# (1560x3480x2408: 13 M tiles, the last pair's second block past C; 2168x3704x2640).
CLUSTERED_PERSISTENT_CASES = cases_of(
    {
        "b128x192x64_t256_s4_w8_pr_e_p132_a_mb": [(2096, 2728, 1304)],
        "b128x256x64_t256_s4_w16_e_p6_a_mb": [(1152, 1408, 1024)],
        "b128x256x64_t256_s4_w16_e_p132_a_mb": [(2912, 2184, 1232)],
        "b192x192x64_t384_s3_w8_pr_e_sk132_a_mb": [(2096, 2728, 1304)],
        # Forms the large lists' panel times (reports/offtable_large_nn_shapes.json): the
        # large-shape stream-K form in pairs sharing A; 256x128's in 4 stages, panels of 16.
        "b192x192x64_t384_s3_w8_pr_e_sk132_a_ma": [(2096, 2728, 1304)],
        "b256x128x64_t256_s4_w16_e_sk132_a_ma": [(2568, 1752, 1560)],
        "b256x128x64_t256_s3_e_sk132_a_ma": [(3168, 1560, 3648), (2568, 1752, 1560)],
        "b128x192x64_t256_s4_w8_pr_e_sk132_a_mb": [(1560, 3480, 2408)],
        "b128x256x64_t256_s4_w16_e_sk132_a_mb": [(2168, 3704, 2640)],
        "b128x128x64_t128_s4_p6_a_ma": [(1152, 1408, 1024)],
        # Four-block clusters over a persistent grid: 17 x 15 tiles of 128x192, 9 x 8
        # units of 2 x 2 over 33 clusters (three trips), and over one cluster (many; 8 x
        # 3 tiles, 520 = 2 x 192 + 136 columns).
        "b128x192x64_t256_s4_pr_e_p132_a_mab": [(2096, 2728, 1304)],
        "b128x192x64_t256_s4_pr_e_p4_a_mab": [(900, 520, 1304)],
    }
)


@gpu_cases(CLUSTERED_PERSISTENT_CASES)
def test_clustered_persistent_grids_match_float64_tile_by_tile(shape, config):
    """A cluster whose blocks take different units, or a pair's tile mapped to the wrong
    rows, spoils whole tiles (or hangs on the partner's releases)."""
    check_tile_by_tile(shape, config, seeds=(33, 34))


# Two consumer warpgroups holding 144 accumulators a thread (192x192 over 256 consumers,
# ``GemmConfig.holds_large_tile``), written back from inside their branch: the stream-K
# form (shares added in) and the persistent form in pairs, partial edge tiles along both
# axes and K (2096 = 10 x 192 + 176 rows, 2728 = 14 x 192 + 40 columns, 1304 = 20 x 64 +
# 24).
LARGE_TILE_CASES = cases_of(
    {
        "b192x192x64_t256_s3_w8_e_sk132_a": [(2096, 2728, 1304)],
        "b192x192x64_t256_s3_w8_e_p132_a_mb": [(2096, 2728, 1304)],
        "b192x192x64_t256_s3_w8_e_sk132_a_mb": [(2096, 2728, 1304)],
    }
)


@gpu_cases(LARGE_TILE_CASES)
def test_large_tiles_over_two_warpgroups_match_float64_tile_by_tile(shape, config):
    """A fragment that spilled or a write-back at the wrong register count would show as
    wrong tiles (or a hang)."""
    check_tile_by_tile(shape, config, seeds=(35, 36))


# Stream-K summing its shared tiles in the kernel (``GemmConfig.fixup``), partial edge
# tiles along M, N and K throughout: in pairs sharing B with a wave joined to the
# remainder, each tile shared by two blocks at most (3896x2392x1184: 31 x 10 tiles,
# 2392 = 9 x 256 + 88); under a wave in pairs, tiles shared by two or three
# (1432x1888x2568); unpaired under a wave in 128x256, three or four sharers to a tile
# (1056x1280x3384); 192x192 over three warpgroups, a wave and a quarter all shared out
# (2096x2728x1304), alone and in pairs sharing B; and seven blocks after eight whole
# waves (1000^3 in 128x128, K = 15 x 64 + 40).
FIXUP_CASES = cases_of(
    {
        "b128x256x64_t256_s4_w16_e_sk132f_a_mb": [(3896, 2392, 1184)],
        "b128x192x64_t256_s4_w8_pr_e_sk132f_a_mb": [(1432, 1888, 2568)],
        "b128x256x64_t256_s4_w16_e_sk132f_a": [(1056, 1280, 3384)],
        "b192x192x64_t384_s3_w8_pr_e_sk132f_a": [(2096, 2728, 1304)],
        "b192x192x64_t384_s3_w8_pr_e_sk132f_a_mb": [(2096, 2728, 1304)],
        "b128x128x64_t128_s4_e_sk7f_a": [(1000, 1000, 1000)],
    }
)


@gpu_cases(FIXUP_CASES)
def test_stream_k_summed_in_the_kernel_matches_float64_tile_by_tile(shape, config):
    """A share summed twice or never, or read before its writer counted in, spoils its
    tile; a flag not set back to zero spoils the next launch's (three launches, fresh
    inputs each); a wait on a share never counted in traps the kernel after about 8 s."""
    check_tile_by_tile(shape, config, seeds=(37, 38, 39))


# The hand-written pipeline with the operands exchanged (``swap_ab``: C^T = op(B)^T A^T,
# each tile stored transposed): 256 columns of C by 160 rows in halves of 128 columns on
# the persistent grid, over two whole trips (3792x2728: 11 x 24 tiles on 132 blocks) and
# over many trips of 7 blocks with partial edge tiles (1000 = 3 x 256 + 232 columns, so
# the last tile's second half lies partly past C; 1000 = 6 x 160 + 40 rows; 1304 = 20 x
# 64 + 24 of K); 128 columns by 208 rows whole on 132 blocks; the plain grid staged
# through shared memory and written from registers, element by element.
SWAPPED_ASYNC_CASES = cases_of(
    {
        "b256x160x64_t256_s3_pr_e_p132_a_x": [(3792, 2728, 2256)],
        "b256x160x64_t256_s3_pr_e_p7_a_x": [(1000, 1000, 1304)],
        "b128x208x64_t256_s4_pr_e_p132_a_x": [(2400, 4072, 1304)],
        "b128x160x64_t256_s4_pr_e_a_x": [(1000, 1000, 1304)],
        "b128x160x64_t256_s4_pr_a_x": [(1000, 1000, 1304)],
        # In pairs of N tiles sharing A's tile (multicast): a skinny M whole in one tile
        # (88 rows in 96), and 15 N tiles of 64 (904 = 14 x 64 + 8), the last pair's
        # second block past C, over one M tile and over four (300 = 3 x 80 + 60).
        "b64x96x64_t128_s8_a_ma_x": [(88, 7928, 4136)],
        "b64x80x64_t128_s8_a_ma_x": [(72, 904, 1304)],
        "b64x80x64_t128_s8_e_a_ma_x": [(72, 904, 1304), (300, 904, 1304)],
        # 192 columns by 96-128 rows in three warpgroups, one trip of 132 blocks or
        # fewer, as ``kernels.tuned.nn_exchanged`` picks them in NN (A's rows 16 bytes
        # off a sector: K = 8 mod 16), partial edge tiles on both axes (1048 = 9 x 112
        # + 40 rows, 2368 = 12 x 192 + 64 columns; 1040 = 10 x 96 + 80, 2048 = 10 x 192
        # + 128; 1376 = 10 x 128 + 96, 2096 = 10 x 192 + 176).
        "b192x112x64_t384_s4_pr_e_p132_a_x": [(1048, 2368, 1480)],
        "b192x96x64_t384_s5_pr_e_p132_a_x": [(1040, 2048, 1496)],
        "b192x128x64_t384_s4_pr_e_p132_a_x": [(1376, 2096, 1656)],
        # Persistent in two-block clusters: pairs of M tiles sharing B's tile (4080 = 25
        # x 160 + 80 rows: 26 M tiles, 13 pairs; 1224 = 4 x 256 + 200 columns), pairs of
        # N tiles sharing A's (5 N tiles: the last pair's second block past C), and over
        # many trips of 6 blocks (3 clusters; 1000 = 6 x 160 + 40 rows, 7 M tiles).
        "b256x160x64_t256_s3_pr_e_p132_a_mb_x": [(4080, 1224, 3640)],
        "b256x160x64_t256_s3_pr_e_p132_a_ma_x": [(4080, 1224, 3640)],
        "b256x160x64_t256_s3_w8_pr_e_p6_a_mb_x": [(1000, 1000, 1304)],
        "b256x176x64_t256_s3_pr_e_p6_a_ma_x": [(1000, 1000, 1304)],
    }
)


@gpu_cases(SWAPPED_ASYNC_CASES)
def test_exchanged_operands_on_the_async_pipeline_match_float64_tile_by_tile(shape, config):
    """A tile stored untransposed, at the wrong origin, or a half written over the other
    shows as wrong tiles of C (or NaN where nothing was written); in pairs, A's tile
    multicast to the wrong block, or a release missed, as wrong tiles (or a hang)."""
    check_tile_by_tile(shape, config, seeds=(37, 38))


# Tiles that fit one wave: the operands exchanged with 192 columns of C in three
# warpgroups of 64 and 128 in two, 256 by 64-96 rows, rows in steps of 16 past C's edge
# (1432 = 12 x 112 + 88, 1056 = 7 x 144 + 48, 1000 = 10 x 96 + 40); the unexchanged
# tiles' columns in steps of 16 (2176 = 13 x 160 + 96, 1200 = 15 x 80); a skinny M under
# one tile of 96 rows (88), on the plain grid staged and direct and persistent; K off
# a whole step (1000, 1288).
ONE_WAVE_CASES = cases_of(
    {
        "b192x112x64_t384_s4_pr_e_p132_a_x": [(1432, 1888, 1000)],
        "b256x96x64_t256_s4_pr_e_p132_a_x": [(1240, 2112, 1288)],
        "b128x144x64_t256_s5_pr_e_p132_a_x": [(1056, 1856, 1000)],
        "b192x64x64_t384_s6_pr_e_p132_a_x": [(1056, 1280, 1000)],
        "b128x96x64_t256_s6_pr_e_p132_a_x": [(1000, 1000, 1304)],
        "b256x64x64_t256_s5_pr_e_p132_a_x": [(1536, 1200, 1000)],
        "b192x112x64_t384_s4_e_p132_a": [(1136, 2176, 1000)],
        "b128x160x64_t256_s5_e_p132_a": [(1136, 2176, 1000)],
        "b192x80x64_t384_s5_e_p132_a": [(1536, 1200, 1000)],
        "b64x96x64_t128_s8_a_x": [(88, 7928, 1000)],
        "b64x96x128_t128_s5_a_x": [(88, 7928, 1000)],
        "b64x96x64_t128_s8_e_p132_a_x": [(88, 7928, 1000)],
        # exchanged tiles of one trip, timed in reports/one_wave_forms_h200.jsonl
        "b192x96x64_t384_s5_pr_e_p132_a_x": [(1056, 1856, 1624)],
        "b128x160x64_t256_s5_pr_e_p132_a_x": [(1104, 2128, 2560)],
    }
)


@gpu_cases(ONE_WAVE_CASES)
def test_one_wave_tiles_match_float64_tile_by_tile(shape, config):
    """Rows or columns in steps of 16 that end inside a tile: a row written past C, or a
    tile's rows taken from its neighbour, shows as wrong tiles or NaN."""
    check_tile_by_tile(shape, config, seeds=(39, 40))


# Loads by cp.async (``GemmConfig.cp_async``): rows of both operands off a 32-byte sector
# (1304 and 4088: 16 mod 32 bytes), partial edge tiles and K steps, panels, the C tile
# through shared memory or from registers, three warpgroups.
CP_ASYNC_CASES = cases_of(
    {
        "b128x192x64_t256_s4_pr_e_c": [(2096, 2728, 1304)],
        # kernels.tuned.thread_loads: B's rows unaligned (N = 3002), both (1707x1507x2783)
        "b128x256x64_t256_s3_w8_e_c": [(1776, 1472, 4088), (4000, 3002, 3000), (1707, 1507, 2783)],
        "b192x192x64_t384_s3_pr_e_c": [(1000, 1000, 1000)],
        "b128x128x64_t128_s4_c": [(1536, 1200, 1736)],
        # Split K: the partial tiles added from registers, rows of 4-byte (N = 550) and
        # 2-byte steps (N = 183, K = 8085), a last split running past K; reduce-added by
        # TMA where C's rows are aligned (N = 88).
        "b64x64x64_t128_s4_k16_c": [(107, 550, 14088), (475, 183, 10976), (392, 88, 15996)],
        "b64x64x64_t128_s3_k32_c": [(16, 127, 8085)],
    }
)


# Rows padded (``GemmConfig.pad``): K off a multiple of 8 and N odd (both operands and C
# padded in NN), K odd (NT: C's rows stay), split K, the two-warpgroup tile; the padding
# must add nothing.
PAD_CASES = cases_of(
    {
        "b64x64x64_t128_s4_k8_pad": [(42, 1085, 7498), (16, 127, 8085)],
        "b128x192x64_t256_s4_pr_e_pad": [(1707, 1507, 2783)],
        # kernels.tuned.PAD_TILE split as padded_split picks it: B's rows in 2-byte
        # steps (N = 183), A's (K odd) with B's in 4-byte ones (N = 38).
        "b64x64x128_t128_s6_k4_pad": [(475, 183, 10976)],
        "b64x64x128_t128_s6_k16_pad": [(264, 38, 18071)],
        # kernels.tuned.PAD_WIDE_TILE, where 64x64 would leave two splits: A's and B's
        # rows in 2-byte steps, partial tiles along M and N.
        "b128x128x64_t128_s4_k8_pad": [(312, 463, 13760)],
    }
)

# Split K where only C's rows are off 16 bytes (K a multiple of 8, N not; in NT both
# operands by TMA), as kernels.tuned.split_for takes it in 64x64 tiles: N = 50 in 4-byte
# steps, N = 101 in 2-byte ones, partial tiles along M and N.
SPLIT_C_ROWS_CASES = cases_of(
    {
        "b64x64x128_t128_s6_k8": [(76, 50, 15512), (435, 101, 19048)],
        "b64x64x128_t128_s6_k4": [(171, 420, 22000)],
    }
)


@gpu_cases(SPLIT_C_ROWS_CASES)
def test_split_k_onto_unaligned_c_rows_matches_float64_tile_by_tile(shape, config):
    check_tile_by_tile(shape, config, seeds=(45, 46))


@gpu_cases(PAD_CASES)
def test_padded_rows_match_float64_tile_by_tile(shape, config):
    check_tile_by_tile(shape, config, seeds=(43, 44))


@gpu_cases(CP_ASYNC_CASES)
def test_cp_async_loads_match_float64_tile_by_tile(shape, config):
    check_tile_by_tile(shape, config, seeds=(35, 36))


# kernels.tuned.scalar_a's tile (NN, K odd, N a multiple of 8): B by TMA, A's rows of
# 2-byte steps by a second set of threads; partial edge tiles and a partial last K step.
SCALAR_A_CASES = [
    (GemmShape(*size, dtype), tuned.SCALAR_A_TILE)
    for size in [(1000, 1032, 515), (3341, 4104, 1459)]
    for dtype in ("float16", "bfloat16")
]


@gpu_cases(SCALAR_A_CASES)
def test_odd_k_rows_by_threads_match_float64_tile_by_tile(shape, config):
    check_tile_by_tile(shape, config, seeds=(41, 42))


@pytest.mark.gpu
@requires_gpu
@pytest.mark.parametrize("shape, config", [*DELAY_CASES[:2], *DELAY_CASES[-2:]], ids=lambda v: v.id)
def test_delayed_kernel_matches_float64_reference(shape, config):
    kernel = compile_gemm(shape, config, delay=True)
    kernel.delay_cycles = 20_000
    result = check_kernel(kernel, seed=13)
    assert result.unwritten == 0 and result.ok, str(result)


@pytest.mark.gpu
@requires_gpu
def test_kernel_rejects_wrong_device_and_layout_on_gpu():
    shape = GemmShape(256, 128, 64)
    kernel = compile_gemm(shape, GemmConfig())
    a = torch.randn(shape.a_shape, device="cuda", dtype=torch.float16)
    b_t = torch.randn(shape.n, shape.k, device="cuda", dtype=torch.float16).t()  # strided view
    with pytest.raises(ValueError, match="contiguous"):
        kernel(a, b_t)
    with pytest.raises(ValueError, match="device"):
        kernel(a, b_t.contiguous().cpu())


@pytest.mark.gpu
@pytest.mark.tilelang
@requires_gpu
# Opt-in: the training stage runs this only when asked to.
@pytest.mark.skipif(not os.environ.get("RUN_TILELANG_SMOKE"), reason="set RUN_TILELANG_SMOKE=1")
def test_tilelang_smoke_128x128x32_baseline():
    kernel = compile_gemm(GemmShape(128, 128, 32), GemmConfig(128, 128, 32, 128, 3))
    result = check_kernel(kernel, seed=2024)
    assert result.ok, str(result)
