"""The local first-use cache never changes what a tracked benchmark measures: with a
cache that names other configs for a tuned case and for an untuned shape,
``kernels.tuned.pick_config`` and the asv family ``Tuned`` (directly, and through
discovery's walk, which precompile, the gate's worker and the suite use) still pick the
committed table's config or the heuristic. Only the user-facing commands import the
cache."""

import ast
import warnings
from pathlib import Path

import pytest

from asv_bench import gemm as asv_gemm
from harness.measure import first_use
from harness.measure.first_use_cache import CacheFile, Entry, Tried
from harness.ops.contract import CompileTarget
from harness.suite import discovery
from kernels import GemmConfig, GemmShape
from kernels.tuned import UntunedGpuWarning, case_shape, heuristic, lookup, pick_config

ROOT = Path(__file__).resolve().parent.parent
H200, UNTUNED_GPU, SMS = "NVIDIA H200", "NVIDIA H100 80GB HBM3", 132
TUNED_CASE = case_shape("square4096", "float16")
OFF_TABLE = GemmShape(3000, 5000, 7000, "bfloat16")
# Valid for both shapes, and neither the table's nor the heuristic's pick for them.
CACHED = GemmConfig.from_id("b128x128x64_t128_s4_w4")
# The modules that may read the cache: the opt-in commands and the tuner itself.
READERS = {"benchmarks/bench_gemm.py", "benchmarks/offtable.py", "harness/measure/first_use.py"}
CACHE_MODULES = {"harness.measure.first_use", "harness.measure.first_use_cache"}


def _entry(shape):
    tried = (Tried(CACHED.id, 0.001),)
    return Entry(shape, CACHED, 0.001, tried, 60.0, 1.0, "2026-12-01", "any")


@pytest.fixture
def local_cache(tmp_path, monkeypatch):
    """A first-use cache in the default place (the environment's folder) whose entries
    name ``CACHED`` for the tuned case and the off-table shape, on the H200 and on a GPU
    the table lacks, recorded under the TileLang version of this process."""
    monkeypatch.setenv("TILELANG_GEMM_PERF_CACHE", str(tmp_path))
    monkeypatch.setattr(first_use, "_tilelang_version", lambda: "any")
    for gpu in (H200, UNTUNED_GPU):
        cache = CacheFile.for_gpu(gpu, SMS)
        for shape in (TUNED_CASE, OFF_TABLE):
            cache.put(_entry(shape))
    return tmp_path


def test_the_cache_is_there_for_the_commands_that_opt_in(local_cache):
    # The control: the entries are valid and found where the opt-in path looks.
    assert CACHED not in (lookup(TUNED_CASE, H200).config, heuristic(OFF_TABLE, SMS))
    assert first_use.peek(OFF_TABLE, H200, SMS).config == CACHED
    assert first_use.peek(TUNED_CASE, UNTUNED_GPU, SMS).config == CACHED
    assert first_use.peek(TUNED_CASE, H200, SMS).source == first_use.TABLE  # the table wins


def test_pick_config_never_reads_the_cache(local_cache):
    assert pick_config(TUNED_CASE, H200, SMS) == lookup(TUNED_CASE, H200).config
    assert pick_config(OFF_TABLE, H200, SMS) == heuristic(OFF_TABLE, SMS)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UntunedGpuWarning)
        assert pick_config(TUNED_CASE, UNTUNED_GPU, SMS) == heuristic(TUNED_CASE, SMS)


@pytest.mark.parametrize("gpu", [H200, UNTUNED_GPU])
def test_the_asv_tuned_family_never_reads_the_cache(local_cache, gpu):
    expected = lookup(TUNED_CASE, gpu)
    expected = heuristic(TUNED_CASE, SMS) if expected is None else expected.config
    device = CompileTarget(sm_count=SMS, name=gpu)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UntunedGpuWarning)
        assert asv_gemm.Tuned().combination("square4096", "f16", device=device)[2] == expected
        family = next(f for f in discovery.families(ROOT) if f.full == "gemm.Tuned")
        for params in family.combinations():
            combo = discovery.combination(family, params, device)
            assert combo.config != CACHED
            if params == ("square4096", "f16"):
                assert combo.config == expected


def _imports(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            names |= {node.module} | {f"{node.module}.{a.name}" for a in node.names}
    return names


def test_only_the_opt_in_commands_import_the_cache():
    readers = set()
    for folder in ("kernels", "harness", "asv_bench", "benchmarks"):
        for path in (ROOT / folder).rglob("*.py"):
            if _imports(path) & CACHE_MODULES:
                readers.add(path.relative_to(ROOT).as_posix())
    assert readers == READERS
