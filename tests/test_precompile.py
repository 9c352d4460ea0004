"""The precompile command's stamp: a second run over the same grid compiles nothing."""

import pytest

from harness import precompile
from kernels import GemmConfig, GemmShape

PAIRS = [
    (GemmShape(256, 256, 256), GemmConfig()),
    (GemmShape(512, 256, 128, "bfloat16"), GemmConfig(128, 256, 64, 256, 3)),
]


@pytest.fixture
def compiled(monkeypatch, tmp_path):
    """Stand-ins for the compile pool and the suite: records what would be compiled."""
    monkeypatch.setenv("TILELANG_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(precompile, "suite_pairs", lambda module: list(PAIRS))
    calls = []

    def fake(pairs, arch=None, workers=None, log=print):
        calls.append(list(pairs))
        return {}

    monkeypatch.setattr(precompile, "precompile", fake)
    return calls


def test_second_run_compiles_nothing(compiled, capsys):
    assert precompile.main(["asv_bench.gemm"]) == 0
    assert precompile.main(["asv_bench.gemm"]) == 0
    assert compiled == [PAIRS]
    assert "all 2 kernels already compiled" in capsys.readouterr().out


def test_force_and_a_changed_kernel_source_compile_again(compiled, monkeypatch):
    precompile.main(["asv_bench.gemm"])
    precompile.main(["asv_bench.gemm", "--force"])
    monkeypatch.setattr(precompile, "fingerprint", lambda: "another-kernel-source")
    precompile.main(["asv_bench.gemm"])
    assert compiled == [PAIRS, PAIRS, PAIRS]


def test_failed_kernels_are_not_stamped(monkeypatch, tmp_path):
    monkeypatch.setenv("TILELANG_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(precompile, "suite_pairs", lambda module: list(PAIRS))
    calls = []

    def failing(pairs, arch=None, workers=None, log=print):
        calls.append(list(pairs))
        return {PAIRS[1]: "ValueError: no"}

    monkeypatch.setattr(precompile, "precompile", failing)
    assert precompile.main(["asv_bench.gemm"]) == 1
    assert precompile.main(["asv_bench.gemm"]) == 1
    assert calls == [PAIRS, [PAIRS[1]]]  # the failure is retried, and fails loudly again


def test_a_corrupt_stamp_counts_as_none(tmp_path):
    path = tmp_path / "stamp.json"
    path.write_text("{not json")
    assert precompile.load_stamp(path, "x") == set()
