"""Tuned-config table, search space and heuristic (CPU), and the tuned kernels' results
against a float64 reference (GPU)."""

import json

import pytest

from kernels import GemmConfig, GemmShape, compile_gemm, tuned
from kernels.tuned import CASES, candidates, case_shape, heuristic, lookup, pick_config


@pytest.mark.parametrize("name", list(CASES))
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_search_space_is_valid_distinct_and_nonempty(name, dtype):
    shape = case_shape(name, dtype)
    space = candidates(shape)
    assert len(space) >= 20
    assert len(set(space)) == len(space)
    for config in space:  # every point passed GemmConfig's validation
        assert GemmConfig.from_id(config.id) == config
        assert config.smem_bytes <= config.smem_limit


def test_thin_shapes_search_split_k_and_wide_shapes_do_not():
    assert any(c.split_k > 1 for c in candidates(case_shape("decode16", "float16")))
    assert any(c.split_k > 1 for c in candidates(case_shape("attn_pv", "float16")))
    assert all(c.split_k == 1 for c in candidates(case_shape("square4096", "float16")))


@pytest.mark.parametrize(
    "size", [(16, 8192, 8192), (4096, 128, 4096), (4096, 4096, 4096), (300, 500, 70), (1, 1, 1)]
)
def test_heuristic_gives_a_valid_config(size):
    config = heuristic(GemmShape(*size))
    assert GemmConfig.from_id(config.id) == config


def test_unknown_case_is_named():
    with pytest.raises(ValueError, match="case='nope'"):
        case_shape("nope", "float16")


@pytest.fixture
def table(tmp_path):
    shape = GemmShape(4096, 4096, 4096)
    row = {
        "config": "b128x256x64_t256_s3_w8_e",
        "tilelang_ms": 0.19,
        "torch_ms": 0.2,
        "date": "2026-11-29",
    }
    path = tmp_path / "tuned.json"
    path.write_text(json.dumps({"NVIDIA H200": {shape.id: row}}))
    yield shape, path
    tuned._load.cache_clear()


def test_pick_config_prefers_the_table_then_the_heuristic(table):
    shape, path = table
    assert pick_config(shape, "NVIDIA H200", path).id == "b128x256x64_t256_s3_w8_e"
    hit = lookup(shape, "NVIDIA H200", path)
    assert hit.speedup == pytest.approx(0.2 / 0.19)
    # Another GPU, another dtype, no GPU at all: the heuristic.
    assert pick_config(shape, "NVIDIA H100", path) == heuristic(shape)
    bf16 = GemmShape(4096, 4096, 4096, "bfloat16")
    assert pick_config(bf16, "NVIDIA H200", path) == heuristic(bf16)
    assert pick_config(shape, None, path) == heuristic(shape)


def test_committed_table_parses():
    data = json.loads(tuned.TUNED_FILE.read_text())
    for gpu, rows in data.items():
        for shape_id, row in rows.items():
            GemmConfig.from_id(row["config"])
            assert row["tilelang_ms"] > 0 and row["torch_ms"] > 0, (gpu, shape_id)
            assert row["date"]


def _tuned_here():
    """(shape, config) of every tuned row for the visible GPU; empty without one."""
    from harness.measure import device

    if device.no_gpu_reason():
        return []
    gpu = device.gpu_name()
    return [
        (case_shape(name, dtype), lookup(case_shape(name, dtype), gpu).config)
        for name in CASES
        for dtype in ("float16", "bfloat16")
        if lookup(case_shape(name, dtype), gpu) is not None
    ]


TUNED_HERE = _tuned_here()


@pytest.mark.gpu
@pytest.mark.skipif(not TUNED_HERE, reason="needs a CUDA GPU with tuned configs in the table")
@pytest.mark.parametrize("shape, config", TUNED_HERE, ids=[f"{s.id}-{c.id}" for s, c in TUNED_HERE])
def test_tuned_config_matches_float64_reference(shape, config):
    from harness.measure.correctness import check_kernel

    result = check_kernel(compile_gemm(shape, config), seed=21)
    assert result.unwritten == 0, f"{result.unwritten} outputs never written"
    assert result.ok, str(result)


def test_async_twins_join_the_space_only_when_asked():
    shape = case_shape("square4096", "float16")
    plain, both = candidates(shape), candidates(shape, async_mma=True)
    assert not any(c.async_mma for c in plain)
    twins = [c for c in both if c.async_mma]
    assert twins and set(plain) <= set(both)
    for c in twins:  # never with the options the async pipeline does not take
        assert c.policy == "square" and c.persistent == 0 and c.split_k == 1
