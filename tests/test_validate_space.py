"""The config validator against TileLang: its warp partition (CPU, no build), a bounded
sample of accepted configs built for sm_90a, and the full sweep's command line.

pytest tests/test_validate_space.py
python3 -m benchmarks.validate_space      # the full sweep (nox -s codegen_sweep)
"""

import itertools
from dataclasses import replace

import pytest

from benchmarks import validate_space
from benchmarks.validate_space import RAGGED, SQUARE_NN, SQUARE_NT, check_pair, grid
from kernels import GemmConfig, tuned
from kernels.gemm import POLICIES, wgmma_partition
from tests.conftest import requires_nvcc

TILELANG_POLICY = {"square": 0, "row": 1, "col": 2}  # tl.GemmWarpPolicy's policy_type


def test_warp_partition_matches_tilelang():
    """Every tile and thread count up to the limits: the split the validator predicts is
    the one TileLang's ComputeWgmmaWarpPartition picks, and where it predicts none,
    TileLang fails the build."""
    from tilelang import tvm
    from tvm.target import Target

    target = Target({"kind": "cuda", "arch": "sm_90a"})
    mismatches = []
    for bm, bn, threads, policy in itertools.product(
        range(64, 257, 64), range(16, 257, 16), (128, 256, 384, 512), POLICIES
    ):
        node = tvm.ir.make_node(
            "tl.GemmWarpPolicy", policy_type=TILELANG_POLICY[policy], m_warp=0, n_warp=0
        )
        try:
            m_warps, n_warps = node.compute_warp_partition(bm, bn, threads, target, "cuda.wgmma")
            theirs = (m_warps // 4, n_warps)  # 4 warps of a warpgroup lie along M
        except Exception:  # TileLang's "No valid warp partition"
            theirs = None
        try:
            ours = wgmma_partition(bm, bn, threads, policy)
        except ValueError:
            ours = None
        if ours != theirs:
            mismatches.append((bm, bn, threads, policy, ours, theirs))
    assert not mismatches


def test_grid_is_distinct_accepted_and_reaches_the_boundaries():
    pairs = grid()
    assert len(pairs) == len(set(pairs)) > 300
    configs = {c for _, c in pairs}
    assert {c.threads for c in configs} == {128, 256, 384, 512}
    assert {c.block_m for c in configs} == {64, 128, 192, 256}
    assert {c.block_n for c in configs} == set(range(16, 257, 16))
    assert {c.block_k for c in configs} == set(range(16, 257, 16))
    assert {c.num_stages for c in configs} == set(range(1, 9))
    assert {c.policy for c in configs} == set(POLICIES)
    assert any(c.async_mma for c in configs) and any(c.split_k > 1 for c in configs)
    assert any(c.persistent for c in configs) and any(c.swizzle for c in configs)
    assert {s for s, _ in pairs} == {SQUARE_NN, SQUARE_NT, RAGGED}
    for _, config in pairs:
        assert GemmConfig.from_id(config.id) == config


# Drawn across the space: 3 and 4 warpgroups at the widest slice their registers allow,
# the narrowest tile, a policy that changes the split, both layouts, the async pipeline.
SAMPLE = [
    (SQUARE_NN, "b192x192x64_t384_s2"),
    (SQUARE_NN, "b256x128x64_t512_s2_pr"),
    (SQUARE_NT, "b256x48x64_t256_s2_pr_e"),
    (RAGGED, "b64x16x16_t128_s1"),
    (SQUARE_NT, "b64x48x256_t384_s1_k4"),
    (SQUARE_NN, "b192x128x64_t384_s3_w8_a"),
]


@requires_nvcc
@pytest.mark.parametrize("shape, config_id", SAMPLE, ids=[f"{s.id}-{c}" for s, c in SAMPLE])
def test_accepted_config_builds_on_the_hopper_path(shape, config_id):
    assert check_pair(shape, GemmConfig.from_id(config_id)) is None


@pytest.mark.parametrize(
    "source, problem",
    [
        ("tl::mma_sync<...>(...); tma_load", "no wgmma"),
        ("tl::wgmma_ss<...>(...); tl::mma_sync<...>(...); tma_load", "mma.sync"),
        ("tl::wgmma_ss<...>(...);", "no TMA load"),
        ("tl::wgmma_ss<...>(...); tl::tma_load(...);", None),
    ],
)
def test_hopper_path_problem(source, problem):
    found = validate_space.hopper_path_problem(SQUARE_NN, source)
    assert found == problem if problem is None else problem in found


def test_sweep_summarises_and_exits_nonzero_on_a_failure(monkeypatch, capsys):
    bad = GemmConfig(128, 128, 64, 128, 3)

    def fake(shape, config, arch="sm_90a"):
        return "InternalError: boom" if config == bad else None

    monkeypatch.setattr(validate_space, "check_pair", fake)
    assert validate_space.main(["--part", "stages", "--workers", "1"]) == 1
    out = capsys.readouterr().out
    n = len(grid(["stages"]))
    assert f"[{n}/{n}]" in out
    assert f"{n - 1}/{n} pairs built on the Hopper path" in out
    assert f"FAILED {SQUARE_NN.id} {bad.id}: InternalError: boom" in out

    monkeypatch.setattr(validate_space, "check_pair", lambda *a, **k: None)
    assert validate_space.main(["--part", "stages", "--workers", "1", "--sample", "3"]) == 0
    assert "3/3 pairs built" in capsys.readouterr().out


def test_sweep_lists_its_parts_without_building(capsys):
    assert validate_space.main(["--list"]) == 0
    out = capsys.readouterr().out
    assert all(f"{name}:" in out for name in validate_space.PARTS)


def test_tuner_space_loses_nothing_to_the_wgmma_rules(monkeypatch):
    """The tuner drops the points the validator refuses; only the shared-memory and
    register budgets it was written around may drop any."""
    refused = []
    valid = tuned._valid

    def recording(**fields):
        try:
            return GemmConfig(**fields)
        except ValueError as err:
            refused.append(str(err))
        return valid(**fields)

    def recording_twin(config):
        try:
            return replace(config, async_mma=True)
        except ValueError as err:
            refused.append(str(err))
        return None

    monkeypatch.setattr(tuned, "_valid", recording)
    monkeypatch.setattr(tuned, "_twin", recording_twin)
    for name in tuned.CASES:
        tuned.candidates(tuned.case_shape(name, "float16"), 132, async_mma=True)  # any SM count
    assert refused  # the budget rules do drop points
    budgets = ("shared memory", "accumulators", ">= 2 with async_mma")
    assert all(any(b in r for b in budgets) for r in refused), set(refused)
