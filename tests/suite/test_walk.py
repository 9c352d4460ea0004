"""Discovery's one walk from a combination to a built kernel: what it builds, its one
error policy, and that the suite and the gate reach kernels through the operators only."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from harness.ops import registry
from harness.ops.contract import CompileTarget
from harness.suite import discovery
from kernels import GemmConfig, GemmShape

HARNESS = Path(discovery.__file__).resolve().parent.parent
KERNEL_MODULES = ("kernels.gemm", "families.grouped_gemm.kernel")


class Family:
    """A suite family of three: a valid combination, a config the operator's validator
    rejects for its shape, and one whose params break the config's own rule."""

    params = (["ok", "mismatch", "invalid"],)

    def combination(self, what, device=None):
        if what == "invalid":
            raise ValueError("GemmConfig.block_m=100: must be a multiple of 16")
        if what == "mismatch":  # the TMA reduce-add of split-K: N=100 rows are unaligned
            return "gemm", GemmShape(256, 100, 128), GemmConfig(split_k=2, smem_epilogue=True)
        return "gemm", GemmShape(256, 256, 128), GemmConfig()


FAMILY = discovery.Family("fake", "Family", Family)


def test_a_combination_is_the_operator_shape_and_config_the_family_names():
    combo = discovery.combination(FAMILY, ("ok",))
    assert combo == discovery.Combination(
        "fake.Family(ok)", "gemm", GemmShape(256, 256, 128), GemmConfig()
    )
    assert discovery.operator_of(combo) is registry.GEMM


def test_an_invalid_combination_is_skipped_with_its_rule():
    with pytest.raises(discovery.Skipped, match=r"^GemmConfig.block_m=100: must be a multiple"):
        discovery.combination(FAMILY, ("invalid",))
    combo = discovery.combination(FAMILY, ("mismatch",))
    refused = r"^GemmConfig.split_k=2: with smem_epilogue=True needs N \* 2"
    with pytest.raises(discovery.Skipped, match=refused):
        discovery.build(combo)
    assert issubclass(discovery.Skipped, NotImplementedError)  # asv's skip


def test_a_failed_compile_is_an_error_naming_the_combination(monkeypatch):
    def compile_(op, shape, config, device=None):
        raise RuntimeError("tvm.error.InternalError: lowering failed\n(the rest of a long log)")

    monkeypatch.setattr(registry, "build_combination", compile_)
    combo = discovery.combination(FAMILY, ("ok",))
    with pytest.raises(discovery.BuildFailed) as failed:
        discovery.build(combo)
    assert str(failed.value) == (
        "fake.Family(ok) [gemm m256_n256_k128_f16 b128x128x32_t128_s3]: "
        "RuntimeError: tvm.error.InternalError: lowering failed"
    )
    assert not isinstance(failed.value, NotImplementedError)  # a failure, never a skip


def test_the_walk_hands_the_device_to_the_build(monkeypatch):
    seen = []
    monkeypatch.setattr(
        registry, "build_combination", lambda *args: seen.append(args) or (lambda inputs: None)
    )
    combo = discovery.combination(FAMILY, ("ok",))
    target = CompileTarget(sm_count=132)
    discovery.build(combo, target)
    assert seen == [(registry.GEMM, combo.shape, combo.config, target)]


def _kernel_imports(path: Path) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
        else:
            continue
        found += [
            f"{path.relative_to(HARNESS)}:{node.lineno} {n}" for n in names if n in KERNEL_MODULES
        ]
    return found


def test_the_suite_and_the_gate_reach_kernels_through_the_operators_only():
    offending = [
        hit
        for part in ("suite", "gate")
        for path in sorted((HARNESS / part).rglob("*.py"))
        for hit in _kernel_imports(path)
    ]
    assert offending == []
