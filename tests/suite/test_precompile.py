"""The precompile command's stamp: a second run over the same grid compiles nothing."""

import re
import shutil

import pytest

from harness.suite import precompile
from harness.suite.discovery import Combination
from kernels import GemmConfig, GemmShape

PAIRS = [
    Combination("a", "gemm", GemmShape(256, 256, 256), GemmConfig()),
    Combination(
        "b", "gemm", GemmShape(512, 256, 128, "bfloat16"), GemmConfig(128, 256, 64, 256, 3)
    ),
]


@pytest.fixture
def pool(monkeypatch, tmp_path):
    """Stand-ins for the compile pool and the suite: ``pool(failures)`` installs a pool
    that fails those pairs and returns the list of what each run was asked to compile."""
    monkeypatch.setenv("TILELANG_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(
        precompile, "suite_combinations", lambda root, bench=None, device=None: list(PAIRS)
    )

    def install(failures=()):
        calls = []

        def fake(combos, device=None, workers=None, log=print):
            calls.append(list(combos))
            return {precompile._key(c): "ValueError: no" for c in failures}

        monkeypatch.setattr(precompile, "precompile", fake)
        return calls

    return install


@pytest.fixture
def compiled(pool):
    return pool()


def test_second_run_compiles_nothing(compiled, capsys):
    assert precompile.main([]) == 0
    assert precompile.main([]) == 0
    assert compiled == [PAIRS]
    assert "all 2 kernels already compiled" in capsys.readouterr().out


def test_force_and_a_changed_kernel_source_compile_again(compiled, monkeypatch):
    precompile.main([])
    precompile.main(["--force"])
    monkeypatch.setattr(precompile, "fingerprint", lambda: "another-kernel-source")
    precompile.main([])
    assert compiled == [PAIRS, PAIRS, PAIRS]


def test_failed_kernels_are_not_stamped(pool):
    calls = pool(failures=[PAIRS[1]])
    assert precompile.main([]) == 1
    assert precompile.main([]) == 1
    assert calls == [PAIRS, [PAIRS[1]]]  # the failure is retried, and fails loudly again


def test_a_corrupt_stamp_counts_as_none(tmp_path):
    path = tmp_path / "stamp.json"
    path.write_text("{not json")
    assert precompile.load_stamp(path, "x") == set()


def test_fingerprint_covers_every_kernel_module(monkeypatch, tmp_path):
    import kernels

    package = tmp_path / "kernels"
    package.mkdir()
    for name in ("__init__.py", "gemm.py", "gemm_async.py"):
        (package / name).write_text(f"# {name}\n")
    monkeypatch.setattr(kernels, "__file__", str(package / "__init__.py"))
    before = precompile.fingerprint()
    (package / "gemm_async.py").write_text("# changed\n")
    assert precompile.fingerprint() != before


def test_bench_selects_by_asv_name_or_gate_name_alike():
    from harness.suite import discovery

    listed = discovery.listing(precompile.ROOT)
    asv_name, (_, gate_name) = next(iter(listed["gemm.Stage"]["names"].items()))
    by_asv = precompile.suite_combinations(precompile.ROOT, "^" + re.escape(asv_name) + "$")
    by_gate = precompile.suite_combinations(precompile.ROOT, "^" + re.escape(gate_name) + "$")
    assert len(by_asv) == 1 and by_asv == by_gate


def test_on_a_host_without_the_gpu_the_target_is_the_tuned_tables_sm_count(monkeypatch, capsys):
    from harness.ops.contract import CompileTarget
    from kernels.tuned import recorded_sms

    monkeypatch.setattr(precompile, "no_gpu_reason", lambda: "no CUDA device visible")
    assert precompile.target(None, None) is None  # no --arch: the visible GPU, as ever
    got = precompile.target("sm_90a", "NVIDIA H200")
    assert got == CompileTarget(recorded_sms("NVIDIA H200"), "sm_90a", name="NVIDIA H200")
    with pytest.raises(ValueError, match="--gpu 'NVIDIA B9000': the tuned table .* no SM count"):
        precompile.target("sm_90a", "NVIDIA B9000")
    with pytest.raises(SystemExit) as exit_:
        precompile.main(["--arch", "sm_90a"])
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and "--arch sm_90a: no GPU is visible, so --gpu must" in err


def test_the_tuned_family_is_precompiled_with_the_named_gpus_configs(monkeypatch):
    from kernels.tuned import pick_config

    monkeypatch.setattr(precompile, "no_gpu_reason", lambda: "no CUDA device visible")
    device = precompile.target("sm_90a", "NVIDIA H200")
    combos = precompile.suite_combinations(
        precompile.ROOT, r"gemm\.Tuned\(square4096, f16\)", device
    )
    assert [c.name for c in combos] == ["gemm.Tuned(square4096, f16)"]
    assert combos[0].config == pick_config(combos[0].shape, "NVIDIA H200", device.sm_count)
    # Without a device the tuned config is unknown on a CPU host: nothing to build.
    assert precompile.suite_combinations(precompile.ROOT, r"gemm\.Tuned\(square4096") == []


# Codegen needs the CUDA compiler, not a GPU.
@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not found")
def test_precompile_builds_the_grouped_gemm_family_for_sm90a(monkeypatch):
    """The grouped GEMM family is built by the same walk as the GEMM's: every layout and
    dtype compiles for sm_90a on a CPU host."""
    monkeypatch.setattr(precompile, "no_gpu_reason", lambda: "no CUDA device visible")
    device = precompile.target("sm_90a", "NVIDIA H200")
    pattern = r"families\.GroupedGemm\(.*, 4096, .*, bf16\)"
    combos = precompile.suite_combinations(precompile.ROOT, pattern, device)
    assert {c.operator for c in combos} == {"grouped_gemm"}
    assert len(combos) == 4 and any(0 in c.shape.m_sizes for c in combos)
    lines = []
    assert precompile.precompile(combos, device, workers=4, log=lines.append) == {}
    assert lines[-1].startswith("compiled 4/4 kernels")
