"""The precompile command's stamp: a second run over the same grid compiles nothing."""

import re

import pytest

from harness.suite import precompile
from kernels import GemmConfig, GemmShape

PAIRS = [
    (GemmShape(256, 256, 256), GemmConfig()),
    (GemmShape(512, 256, 128, "bfloat16"), GemmConfig(128, 256, 64, 256, 3)),
]


@pytest.fixture
def pool(monkeypatch, tmp_path):
    """Stand-ins for the compile pool and the suite: ``pool(failures)`` installs a pool
    that fails those pairs and returns the list of what each run was asked to compile."""
    monkeypatch.setenv("TILELANG_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(precompile, "suite_pairs", lambda root, bench=None: list(PAIRS))

    def install(failures=()):
        calls = []

        def fake(pairs, arch=None, workers=None, log=print):
            calls.append(list(pairs))
            return {p: "ValueError: no" for p in failures}

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
    by_asv = precompile.suite_pairs(precompile.ROOT, "^" + re.escape(asv_name) + "$")
    by_gate = precompile.suite_pairs(precompile.ROOT, "^" + re.escape(gate_name) + "$")
    assert len(by_asv) == 1 and by_asv == by_gate
