"""The grouped GEMM's asv classes as the suite binds them, on the CPU: asv's names and
discovery, MoE layouts (experts, K = N, routing), the static tracks, the gate's subset."""

import re
import subprocess
import sys
from pathlib import Path

import pytest
from asv_runner.benchmarks._base import get_setup_cache_key

import asv_bench
from asv_bench import families, static
from families.grouped_gemm import bench
from harness.suite import discovery

ROOT = Path(__file__).resolve().parents[3]


def test_asv_finds_the_classes_under_the_suite_modules_names():
    code = (
        "from asv_runner.discovery import disc_benchmarks\n"
        "names = sorted(b.name for b in disc_benchmarks('asv_bench') if 'GroupedGemm' in b.name)\n"
        "print('\\n'.join(names))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True
    )
    assert out.stdout.split() == [
        "families.GroupedGemm.track_latency",
        "families.GroupedGemm.track_vs_torch",
        "static.GroupedGemmCompileTime.track_compile_seconds",
        "static.GroupedGemmResources.track_hopper_missing",
        "static.GroupedGemmResources.track_registers",
        "static.GroupedGemmResources.track_smem_bytes",
        "static.GroupedGemmResources.track_spill_bytes",
    ]


def test_discovery_names_them_as_asv_does():
    found = {f.full: f for f in discovery.families(ROOT)}
    gpu = found["families.GroupedGemm"]
    assert gpu.is_gpu and discovery.unit_of(gpu) == "families.GroupedGemm"
    for name in ("static.GroupedGemmResources", "static.GroupedGemmCompileTime"):
        assert not found[name].is_gpu and discovery.unit_of(found[name]) == "static"
    name = families.GroupedGemm().combination_name((8, 4096, "skewed", "bf16"))
    assert name == "families.GroupedGemm(8, 4096, skewed, bf16)"


def test_each_bound_class_has_its_own_setup_cache_read_from_the_family_source():
    keys = {
        get_setup_cache_key(cls().setup_cache)
        for cls in (families.GroupedGemm, static.GroupedGemmResources, static.Sm90aResources)
    }
    assert len(keys) == 3
    assert get_setup_cache_key(families.GroupedGemm().setup_cache).startswith("grouped_gemm.bench:")
    assert families.GroupedGemm.tracks() == ["track_latency", "track_vs_torch"]


@pytest.mark.parametrize("experts", [8, 64])
def test_routing_is_top2_of_4096_tokens_balanced_or_skewed(experts):
    even = bench.routed_rows(experts, "balanced")
    skewed = bench.routed_rows(experts, "skewed")
    assert sum(even) == sum(skewed) == 4096 * 2
    assert set(even) == {8192 // experts}
    assert list(skewed) == sorted(skewed, reverse=True)  # the hot expert first
    assert skewed[0] > 2 * 8192 // experts and skewed[-1] == 0  # hot and empty experts
    with pytest.raises(ValueError, match=r"routing='zipf': must be one of"):
        bench.routed_rows(experts, "zipf")


def test_the_grid_covers_moe_shapes_in_both_dtypes():
    fam = families.GroupedGemm()
    shapes = {
        fam.case(*p)[0] for p in discovery.Family("f", "G", families.GroupedGemm).combinations()
    }
    assert {s.groups for s in shapes} == {8, 64}
    assert {(s.k, s.n) for s in shapes} == {(4096, 4096), (7168, 7168)}
    assert {s.dtype for s in shapes} == {"float16", "bfloat16"} and len(shapes) == 16


def test_the_gate_default_subset_takes_the_named_combinations():
    names = [
        families.GroupedGemm().combination_name(p)
        for p in discovery.Family("f", "G", families.GroupedGemm).combinations()
    ]
    picked = [n for n in names if re.search(asv_bench.GATE_SUBSET, n)]
    assert picked == [
        "families.GroupedGemm(8, 4096, balanced, bf16)",
        "families.GroupedGemm(8, 4096, skewed, bf16)",
    ]


def test_static_tracks_build_through_the_operator(monkeypatch):
    built = []
    monkeypatch.setattr(static, "_precompile", lambda combos, *a, **k: built.extend(combos))
    monkeypatch.setattr(static.shutil, "which", lambda name: "/usr/bin/nvcc")
    monkeypatch.setattr(static, "_sm90a_resources", lambda kernel: ("resources of", kernel))
    op = static._registry.operator("grouped_gemm")
    monkeypatch.setattr(op, "kernel", lambda shape, config, device: (shape.groups, config.id))
    cache = static.GroupedGemmResources().build_all()
    assert set(cache) == {(8, "f16"), (8, "bf16"), (64, "f16"), (64, "bf16")}
    assert cache[(64, "f16")] == ("resources of", (64, "b128x256x64_t256_s3"))
    assert {c.operator for c in built} == {"grouped_gemm"} and len(built) == 4
