"""Callers of ``harness.suite.precompile.precompile`` outside the suite hand it the suite's
``Combination`` records (operator, shape, config) and read its failures by the same key:
the GPU tests' collection hook and the tuner, both of which only run on a GPU."""

from __future__ import annotations

import argparse
import io
from types import SimpleNamespace

import pytest
from rich.console import Console

from families.grouped_gemm.kernel import GroupedGemmShape
from harness.suite import precompile as precompile_module
from harness.suite.discovery import Combination
from kernels import GemmConfig, GemmShape


def _item(nodeid, **params):
    return SimpleNamespace(nodeid=nodeid, callspec=SimpleNamespace(params=params))


def test_the_gpu_tests_hook_precompiles_every_familys_kernels(monkeypatch):
    from tests import conftest

    seen = []
    monkeypatch.setattr(conftest, "NO_GPU", None)
    monkeypatch.delenv("GEMM_TESTS_PRECOMPILED", raising=False)
    monkeypatch.setattr(precompile_module, "precompile", lambda combos, log: seen.extend(combos))
    config = GemmConfig(128, 128, 32, 128, 3)
    grouped = GroupedGemmShape((64, 0, 200), 256, 128, "float16")
    session = SimpleNamespace(
        items=[
            _item("a", size=(256, 256, 128), dtype="float16", layout="NN", config=config),
            _item("b", shape=GemmShape(512, 256, 128), config=config),
            _item("c", shape=grouped, config=config),
            _item("d", field="swizzle", value=8),  # no kernel: left out
        ]
    )
    conftest.pytest_collection_finish(session)
    assert all(isinstance(c, Combination) for c in seen)
    assert [(c.operator, c.shape) for c in seen] == [
        ("gemm", GemmShape(256, 256, 128, "float16", "NN")),
        ("gemm", GemmShape(512, 256, 128)),
        ("grouped_gemm", grouped),
    ]


@pytest.mark.parametrize(
    "only",
    [
        None,
        [
            GemmConfig.from_id("b64x16x64_t128_s8_x"),
            GemmConfig.from_id("b64x16x64_t128_s8_x"),  # a repeat is ranked once
            GemmConfig.from_id("b64x64x128_t128_s4_e"),
        ],
    ],
    ids=["space", "only"],
)
def test_the_tuner_drops_the_configs_precompile_failed(monkeypatch, tmp_path, only):
    from benchmarks import tune_gemm

    compiled, ranked = [], []

    def fake_precompile(combos, workers=None, log=print):
        combos = list(combos)
        compiled.extend(combos)
        first = combos[0]
        return {(first.operator, first.shape, first.config): "boom"}

    class Tuner(tune_gemm.Tuner):
        def rank(self, case, configs, progress, task):
            ranked.extend(configs)
            return []

        def confirm(self, case, ranked):
            return None

    monkeypatch.setattr(precompile_module, "precompile", fake_precompile)
    monkeypatch.setattr("harness.measure.cases.Case", lambda shape: SimpleNamespace(shape=shape))
    monkeypatch.setattr("harness.measure.gpu_state.open_nvml", lambda: None)
    args = argparse.Namespace(
        dtype=["float16"],
        case=["decode16"],
        bf16_from=0,
        async_mma=False,
        workers=1,
        top=1,
        out=tmp_path / "t.json",
        jsonl=None,
        quick_repeat=5,
        remeasure=False,
        only=only,
    )
    spec = SimpleNamespace(name="NVIDIA H200", sm_count=132, record=lambda: {"sm_count": 132})
    Tuner(args, console=Console(file=io.StringIO()), spec=spec).run()
    assert compiled and all(c.operator == "gemm" for c in compiled)
    assert compiled[0].config not in ranked and len(ranked) == len(compiled) - 1
    if only:
        # --only: the configs given, each once, and nothing of the search space.
        assert [c.config for c in compiled] == [only[0], only[2]]


def test_the_timing_commands_compile_each_gemm_once_under_a_progress_task(monkeypatch):
    """``compile_gemms`` (bench_gemm's sweep, the off-table command): repeated pairs are
    one kernel, the failures come back by precompile's key, and its task is gone after."""
    from rich.progress import Progress

    seen = []

    def fake_precompile(combos, workers=None, log=print):
        seen.extend(combos)
        for i, c in enumerate(seen, 1):
            log(f"[{i}/{len(seen)}] {c.shape.id} {c.config.id}")
        return {(seen[0].operator, seen[0].shape, seen[0].config): "boom"}

    monkeypatch.setattr(precompile_module, "precompile", fake_precompile)
    shape, other = GemmShape(256, 256, 128), GemmShape(512, 256, 128)
    config = GemmConfig(128, 128, 32, 128, 3)
    progress = Progress(console=Console(file=io.StringIO()))
    with progress:
        failed = precompile_module.compile_gemms(
            [(shape, config), (other, config), (shape, config)], progress
        )
    assert [(c.operator, c.shape) for c in seen] == [("gemm", shape), ("gemm", other)]
    assert failed == {("gemm", shape, config): "boom"}
    assert not progress.tasks
