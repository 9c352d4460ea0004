"""The grouped GEMM: shape and config rules, the tile table and sm_90a codegen on the
CPU; correctness against float64 per expert, with a poisoned output, on a GPU.

pytest tests/families/grouped_gemm/   # CPU part; GPU part skips
"""

import pytest

from families.grouped_gemm.kernel import (
    GroupedGemmKernel,
    GroupedGemmShape,
    candidates,
    check_config,
    check_shape_config,
    compile_grouped_gemm,
    heuristic,
    tile_table,
)
from families.grouped_gemm.op import MATMUL_LOOP, matmul_loop
from families.grouped_gemm.op import OPERATOR as GROUPED_GEMM
from harness.measure.correctness import check_built
from harness.ops.contract import CompileTarget
from kernels import GemmConfig
from tests.conftest import requires_gpu, requires_nvcc


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(m_sizes=(), n=64, k=64), r"m_sizes=\(\): must name at least one expert \(G >= 1\)"),
        (dict(m_sizes=[64, 64], n=64, k=64), r"m_sizes=\[64, 64\]: must be a tuple"),
        (dict(m_sizes=(64, -1), n=64, k=64), r"m_sizes\[1\]=-1: must be >= 0"),
        (dict(m_sizes=(64, 1.5), n=64, k=64), r"m_sizes\[1\]=1.5: must be an integer"),
        (dict(m_sizes=(0, 0), n=64, k=64), r"m_sizes=\(0, 0\): must sum to > 0"),
        (dict(m_sizes=(8,), n=0, k=64), r"GroupedGemmShape.n=0: must be >= 1"),
        (dict(m_sizes=(8,), n=64, k=64, dtype="float32"), r"dtype='float32': must be one of"),
    ],
)
def test_shape_rejects(kwargs, message):
    with pytest.raises(ValueError, match=message):
        GroupedGemmShape(**kwargs)


def test_shape_work_and_layout():
    shape = GroupedGemmShape((100, 0, 28), 256, 512)
    assert shape.groups == 3 and shape.total_m == 128
    assert shape.offsets == (0, 100, 100, 128)
    assert shape.a_shape == (128, 512) and shape.b_shape == (3, 512, 256)
    assert shape.c_shape == (128, 256)
    assert shape.flops == 2 * 128 * 256 * 512
    # The empty expert's weight is never read.
    assert shape.min_bytes == 2 * (128 * 512 + 2 * 512 * 256 + 128 * 256)
    assert shape.id == "g3_m100-0-28_n256_k512_f16"


def test_tiles_never_straddle_experts():
    shape = GroupedGemmShape((130, 0, 64, 1), 128, 128)
    groups, rows, counts = tile_table(shape, 64)
    assert groups == [0, 0, 0, 2, 3]
    assert rows == [0, 64, 128, 130, 194]
    assert counts == [64, 64, 2, 64, 1]
    assert shape.tiles(64) == 5 and shape.tiles(128) == 4


@pytest.mark.parametrize(
    "field, value",
    [
        ("swizzle", 8),
        ("smem_epilogue", True),
        ("split_k", 2),
        ("stream_k", 132),
        ("swap_ab", True),
        ("cp_async", True),
    ],
)
def test_config_refuses_what_the_grouped_kernel_lacks(field, value):
    import dataclasses

    config = dataclasses.replace(GemmConfig(128, 128, 64, 128, 3), **{field: value})
    with pytest.raises(ValueError, match=rf"GemmConfig.{field}={value!r}: must be"):
        check_config(config)


def test_config_space_and_first_choice_are_valid():
    space = candidates()
    assert {c.block_m for c in space} == {64, 128}
    for config in space:
        check_config(config)
    small, large = (
        GroupedGemmShape((40, 0, 20, 9), 4096, 4096),
        GroupedGemmShape((512,) * 8, 4096, 4096),
    )
    assert heuristic(small).block_m == 64 and heuristic(large).block_m == 128
    # 64 experts of exactly 128 rows: 128-row tiles waste nothing, so the large tile.
    assert heuristic(GroupedGemmShape((128,) * 64, 4096, 4096)).block_m == 128
    # Many experts of 1-64 rows: 128-row tiles would double the padded rows.
    assert heuristic(GroupedGemmShape((33, 64, 1, 50) * 16, 4096, 4096)).block_m == 64


# Only one of A's rows (K elements) and B's (N) 16-byte aligned: the unaligned operand is
# loaded by a second set of as many threads as the consumers.
SPLIT_LOADS = [
    GroupedGemmShape((512,) * 4, 1002, 1024),  # B's rows off
    GroupedGemmShape((512,) * 4, 1024, 1002, "bfloat16"),  # A's rows off
]


@pytest.mark.parametrize("shape", SPLIT_LOADS, ids=lambda s: s.id)
def test_split_loads_take_the_tile_whose_accumulators_fit(shape):
    large = GemmConfig(128, 256, 64, 256, 3)
    with pytest.raises(ValueError, match=r"GemmConfig.threads=256: with [AB] rows of 1002"):
        check_shape_config(shape, large)
    assert heuristic(shape) == GemmConfig(64, 128, 64, 128, 4)
    space = GROUPED_GEMM.configs(shape, None)
    assert space and large not in space
    for config in space:
        check_shape_config(shape, config)
    with pytest.raises(ValueError, match="GemmConfig.threads=256"):
        GROUPED_GEMM.validate(shape, large)
    # Aligned rows keep the large tile and the whole space.
    aligned = GroupedGemmShape((512,) * 4, 1024, 1024)
    assert heuristic(aligned) == large and GROUPED_GEMM.configs(aligned, None) == candidates()


def test_matmul_loop_writes_every_expert_on_the_cpu():
    import torch

    shape = GroupedGemmShape((5, 0, 3), 16, 8, "bfloat16")
    inputs = GROUPED_GEMM.inputs(shape, 1, "cpu")
    inputs.out.fill_(float("nan"))
    matmul_loop(inputs)()
    for part, ref in zip(inputs.parts(), GROUPED_GEMM.reference(inputs), strict=True):
        assert torch.allclose(part.double(), ref, rtol=2e-2, atol=5e-2)


def test_baseline_names_itself_and_why_it_fell_back():
    shape = GroupedGemmShape((5, 0, 3), 16, 8)
    baseline = GROUPED_GEMM.baseline(GROUPED_GEMM.inputs(shape, 1, "cpu"))
    assert baseline.name in ("torch._grouped_mm", MATMUL_LOOP)
    # The first choice carries no reason; the fallback always says why.
    assert (baseline.name == MATMUL_LOOP) == bool(baseline.why)


# --- codegen for sm_90a (no GPU needed) ----------------------------------------------


@requires_nvcc
@pytest.mark.parametrize("shape", SPLIT_LOADS, ids=lambda s: s.id)
def test_sm90a_codegen_of_the_pick_where_the_loads_split(shape):
    """The heuristic's tile where one operand is loaded by threads: twice the consumers
    launched, and its accumulators kept in registers (128x256 spilled 1.2 KB a thread)."""
    from harness.measure.resources import sm90a_resources

    config = heuristic(shape)
    built = compile_grouped_gemm(shape, config, arch="sm_90a")
    assert f"__launch_bounds__({2 * config.threads}, 1)" in built.source
    assert sm90a_resources(built).spill_bytes == 0


@requires_nvcc
@pytest.mark.parametrize(
    "shape, config",
    [
        (GroupedGemmShape((128, 0, 300, 77), 1024, 512), GemmConfig(128, 128, 64, 128, 3)),
        (GroupedGemmShape((64, 17), 4096, 256, "bfloat16"), GemmConfig(64, 256, 64, 256, 4)),
    ],
    ids=lambda v: v.id,
)
def test_sm90a_codegen_uses_hopper_path(shape, config):
    built = compile_grouped_gemm(shape, config, arch="sm_90a")
    src = built.source
    assert "tma_load" in src, "expected TMA bulk copies of A and B[g]"
    assert "GmmaDescriptor" in src or "wgmma" in src, "expected wgmma on sm_90a"
    # Each block reads its expert, first row and row count from the tile table, and the
    # write-back is masked by the row count.
    for table in ("tile_group", "tile_row", "tile_rows"):
        assert f"{table}[((int)blockIdx.y)]" in src
    assert "< (rows" in src or "< rows" in src
    # One launch over all experts: the same build through the contract's one walk.
    from harness.ops.registry import build_combination

    assert callable(build_combination("grouped_gemm", shape, config, CompileTarget(sm_count=16)))


@requires_nvcc
def test_sm90a_codegen_of_the_test_only_delay():
    """The self-test's injected delay, as in the dense GEMM: one spin on clock64 with the
    cycles as the kernel's last argument, reached by every thread before the K loop, and
    absent from the kernel the suite tracks."""
    from kernels.gemm import DELAY_FUNCTION

    shape = GroupedGemmShape((128, 0, 300, 77), 1024, 512, "bfloat16")
    config = GemmConfig(128, 256, 64, 256, 3)
    plain = compile_grouped_gemm(shape, config, arch="sm_90a")
    slowed = GROUPED_GEMM.delayed(shape, config, CompileTarget(sm_count=132))
    assert DELAY_FUNCTION not in plain.source and "clock64" not in plain.source
    src = slowed.source
    assert src.count(f"{DELAY_FUNCTION}(") == 2 and "clock64()" in src
    signature = next(line for line in src.splitlines() if "__global__" in line)
    assert signature.rstrip(" {;)").split(",")[-1].strip().startswith("int64_t")  # last
    call = [line for line in src.splitlines() if f"{DELAY_FUNCTION}(" in line][-1]
    assert call.startswith(f"  {DELAY_FUNCTION}(")  # no branch skips it
    assert slowed.delay and slowed.delay_cycles == 0 and not plain.delay
    # The grid: 1024 / 256 column tiles times 1 + 3 + 1 row tiles of 128.
    assert slowed.blocks == plain.blocks == 4 * 5


def test_the_delayed_kernel_passes_its_cycles_last(monkeypatch):
    import torch

    calls = []
    shape = GroupedGemmShape((5, 0, 3), 16, 8)
    config = GemmConfig(64, 128, 64, 128, 4)
    kernel = GroupedGemmKernel(shape, config, lambda *args: calls.append(args), delay=True)
    monkeypatch.setattr(GroupedGemmKernel, "check_args", lambda *a: None)
    kernel.delay_cycles = 777
    a = torch.randn(shape.a_shape)
    kernel(a, torch.randn(shape.b_shape), torch.empty(shape.c_shape))
    assert calls[-1][-1] == 777 and len(calls[-1]) == 7
    GroupedGemmKernel(shape, config, lambda *args: calls.append(args))(
        a, torch.randn(shape.b_shape), torch.empty(shape.c_shape)
    )
    assert len(calls[-1]) == 6  # the tracked kernel takes no cycles


# --- correctness on a GPU ------------------------------------------------------------

LAYOUTS = [
    (128, 0, 300, 77),  # ragged, with an empty expert
    (0, 0, 5, 0),  # one expert of 5 rows among empty ones
    (1, 63, 64, 65, 127, 128, 129, 0),  # around the 64- and 128-row tile edges
    (1024,),  # one expert: a plain GEMM
]
GPU_CASES = [
    (GroupedGemmShape(m_sizes, n, k, dtype), config)
    for m_sizes, n, k in (
        (LAYOUTS[0], 1024, 512),
        (LAYOUTS[1], 256, 1024),
        (LAYOUTS[2], 1000, 520),  # N past the last full column tile
        (LAYOUTS[3], 512, 768),
    )
    for dtype in ("float16", "bfloat16")
    for config in (GemmConfig(64, 128, 64, 128, 4), GemmConfig(128, 256, 64, 256, 3))
]


@pytest.mark.gpu
@requires_gpu
@pytest.mark.parametrize("shape, config", GPU_CASES, ids=[f"{s.id}-{c.id}" for s, c in GPU_CASES])
def test_matches_float64_reference_per_expert(shape, config):
    for seed in (21, 22):  # fresh inputs and a fresh NaN-poisoned output each launch
        result = check_built(GROUPED_GEMM, shape, config, seed=seed)
        assert result.unwritten == 0, f"{result.unwritten} outputs never written"
        assert result.ok, str(result)


@pytest.mark.gpu
@requires_gpu
def test_baseline_matches_float64_reference():
    import torch

    shape = GroupedGemmShape((128, 0, 300, 77), 1024, 512, "bfloat16")
    inputs = GROUPED_GEMM.inputs(shape, 7)
    baseline = GROUPED_GEMM.baseline(inputs)
    got = baseline.fn()
    got = inputs.out if got is None else got
    torch.cuda.synchronize()
    starts = shape.offsets
    for g, ref in enumerate(GROUPED_GEMM.reference(inputs)):
        if ref.numel():
            part = got[starts[g] : starts[g + 1]].double()
            assert (torch.linalg.norm(part - ref) / torch.linalg.norm(ref)) < 1e-2, baseline.name
