"""``benchmarks.tune_gemm --remeasure`` on the CPU: the recorded configs measured again
(the measurement faked), the rows' figures replaced and their configs kept."""

import argparse
import io
import json
from types import SimpleNamespace

import pytest
from rich.console import Console

from benchmarks import tune_gemm
from harness.suite import precompile as precompile_module
from kernels.tuned import case_shape

GPU = "NVIDIA H200"


def _table(path, rows):
    path.write_text(json.dumps({GPU: {"sm_count": 132, "configs": rows}}))


def test_remeasure_keeps_each_config_and_replaces_its_figures(monkeypatch, tmp_path):
    square = case_shape("square4096", "float16")
    out = tmp_path / "tuned.json"
    old = {
        "config": "b128x256x64_t256_s4_w16_e",
        "tilelang_ms": 0.2,
        "torch_ms": 0.19,
        "speedup": 0.95,
        "date": "2026-11-29",
        "candidates": 126,
        "runner_up": [{"config": "b128x256x64_t256_s3_w16_e", "speedup": 0.94}],
    }
    _table(out, {square.id: old})
    compiled, checked = [], []
    monkeypatch.setattr(
        precompile_module, "precompile", lambda combos, **kw: compiled.extend(combos) or {}
    )

    def case(shape):
        def check(config, seed):
            checked.append((shape.id, config.id, seed))
            return SimpleNamespace(ok=True, rel_error=1e-3)

        return SimpleNamespace(shape=shape, check=check)

    monkeypatch.setattr("harness.measure.cases.Case", case)
    monkeypatch.setattr("harness.measure.gpu_state.open_nvml", lambda: None)

    class Tuner(tune_gemm.Tuner):
        def measured(self, case, config):
            return {
                "config": config.id,
                "tilelang_ms": 0.18,
                "torch_ms": 0.18 * 0.97,
                "speedup": 0.97,
                "ratio_spread": [0.96, 0.98],
                "median_rsd": 0.001,
                "timer": "cupti",
                "sm_clock_mhz": None,
                "throttled": None,
            }

    args = argparse.Namespace(
        dtype=["float16"],
        case=["square4096", "decode16"],  # decode16 has no row: reported, left out
        workers=1,
        out=out,
        jsonl=tmp_path / "log.jsonl",
        remeasure=True,
        top=3,
        quick_repeat=10,
    )
    text = io.StringIO()
    spec = SimpleNamespace(name=GPU, sm_count=132, record=lambda: {"sm_count": 132})
    done, interrupted = Tuner(args, console=Console(file=text, width=200), spec=spec).remeasure()
    assert not interrupted and [s for s, _ in done] == [square]
    assert [c.config.id for c in compiled] == [old["config"]]
    assert checked == [(square.id, old["config"], 1)]
    row = json.loads(out.read_text())[GPU]["configs"][square.id]
    assert row["config"] == old["config"] and row["speedup"] == 0.97
    assert row["date"] == "2026-11-29" and row["measured"] != row["date"]
    assert row["runner_up"] == old["runner_up"] and row["rel_error"] == 1e-3
    assert "m16_n8192_k8192_f16: no row" in text.getvalue()
    assert "0.950 -> 0.970" in text.getvalue()
    log = [json.loads(line) for line in (tmp_path / "log.jsonl").read_text().splitlines()]
    assert log[0]["meta"]["remeasure"] is True and "remeasured" in log[-1]


def test_remeasure_with_list_is_refused(capsys):
    try:
        tune_gemm.main(["--remeasure", "--list", "--sms", "132"])
    except SystemExit as exit:
        assert exit.code == 2
    assert "--remeasure: measures on a GPU" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("text", "rule"),
    [
        (None, "cannot read the tuned-config table"),
        ("{not json", "not valid JSON"),
        ('{"NVIDIA H200": {"sm_count": 132, "configs": {"x": {"config": "b1"}}}}', "missing"),
    ],
)
def test_remeasure_names_a_damaged_or_missing_table_before_any_gpu_work(
    tmp_path, capsys, text, rule
):
    table = tmp_path / "tuned.json"
    if text is not None:
        table.write_text(text)
    with pytest.raises(SystemExit) as exit:
        tune_gemm.main(["--remeasure", "--out", str(table)])
    assert exit.value.code == 2
    err = capsys.readouterr().err
    assert "--remeasure:" in err and str(table) in err and rule in err


def test_remeasure_goes_in_the_suites_order(monkeypatch, tmp_path):
    """Rows are measured as asv's ``gemm.Tuned`` measures its combinations, case by case
    and both dtypes of each, whatever order the command line gives."""
    import itertools

    from asv_bench.gemm import Tuned

    cases, dtypes = ["attn_qk_t", "square4096", "decode16"], ["bfloat16", "float16"]
    shapes = [case_shape(c, d) for c in cases for d in dtypes]
    out = tmp_path / "tuned.json"
    _table(out, {s.id: {"config": "b128x128x32_t128_s3", "speedup": 1.0} for s in shapes})
    monkeypatch.setattr(precompile_module, "precompile", lambda combos, **kw: {})
    check = SimpleNamespace(ok=True, rel_error=1e-3)
    monkeypatch.setattr(
        "harness.measure.cases.Case",
        lambda shape: SimpleNamespace(shape=shape, check=lambda config, seed: check),
    )
    monkeypatch.setattr("harness.measure.gpu_state.open_nvml", lambda: None)
    order = []

    class Tuner(tune_gemm.Tuner):
        def measured(self, case, config):
            order.append(case.shape.id)
            return {"config": config.id, "tilelang_ms": 0.1, "speedup": 1.0, "timer": "cupti"}

    args = argparse.Namespace(
        dtype=dtypes,
        case=cases,
        workers=1,
        out=out,
        jsonl=None,
        remeasure=True,
        top=3,
        quick_repeat=10,
    )
    spec = SimpleNamespace(name=GPU, sm_count=132, record=lambda: {"sm_count": 132})
    Tuner(args, console=Console(file=io.StringIO()), spec=spec).remeasure()
    suite = [case_shape(c, d).id for c, d in itertools.product(*Tuned.params)]
    assert order == [s for s in suite if s in order] and len(order) == len(shapes)
