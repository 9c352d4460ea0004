"""The gate worker's resources mode on this tree: each combination's sm_90a kernel built
by its own family's operator (the build its static tracks read), on the CPU."""

from pathlib import Path

from harness.revisions import launch
from harness.revisions.records import Resources
from tests.conftest import requires_nvcc

ROOT = Path(__file__).resolve().parents[2]


@requires_nvcc
def test_resources_are_read_for_every_family_and_a_missing_config_is_named(tmp_path):
    gemm = "gemm.Stage(4096x4096x4096, 128, 3, f16)"
    grouped = "families.GroupedGemm(8, 4096, balanced, bf16)"
    tuned = "gemm.Tuned(square4096, f16)"
    got = launch.resources(ROOT, [gemm, grouped, tuned], tmp_path / "res.json")
    assert isinstance(got, Resources)
    for name in (gemm, grouped):
        entry = got.resources[name]
        assert entry.get("error") is None, entry
        assert entry["registers"] > 0 and entry["has_wgmma"] and entry["has_tma"]
    # No GPU here: Tuned's config comes from the GPU it runs on, so it is named, not built.
    assert "no config to build here" in got.resources[tuned]["error"]
