"""The tuner-against-asv check (harness.suite.agreement) on results written by asv's own
writer: fresh random samples around chosen speedups, read back through asv's reader."""

import json
import random

import pytest

from harness.suite import agreement
from tests.suite.test_regressions import store

TABLE_GPU = "NVIDIA H200"


def _table(tmp_path, rows):
    """A tuned table holding ``rows``: ``{shape id: (config id, speedup)}``."""
    configs = {
        sid: {
            "config": config,
            "tilelang_ms": 1.0,
            "torch_ms": speedup,
            "date": "2026-12-01",
            "speedup": speedup,
        }
        for sid, (config, speedup) in rows.items()
    }
    path = tmp_path / "tuned.json"
    path.write_text(json.dumps({TABLE_GPU: {"sm_count": 132, "configs": configs}}))
    return path


def _results(tmp_path, speedups, seed):
    """asv results of gemm.Tuned.track_vs_torch: 10 kernel/torch samples per case, spread
    0.2% around one over each speedup."""
    rng = random.Random(seed)
    rows = {
        (agreement.TRACK, f"'{case}'", f"'{dtype}'"): [
            (1 / s) * (1 + rng.gauss(0, 0.002)) for _ in range(10)
        ]
        for (case, dtype), s in speedups.items()
    }
    store(tmp_path / "results", "h200", "a" * 40, 1_700_000_000_000, rows, {agreement.TRACK: ""})
    return tmp_path / "results" / "h200"


ROWS = {
    "m4096_n4096_k4096_f16": ("b128x256x64_t256_s4_w16_e", 0.975),
    "m16_n8192_k8192_bf16": ("b64x256x64_t128_s4_k2", 0.941),
}


@pytest.mark.parametrize("seed", [1, 2])
def test_cases_within_one_percent_agree(tmp_path, capsys, seed):
    got = _results(tmp_path, {("square4096", "f16"): 0.978, ("decode16", "bf16"): 0.936}, seed)
    code = agreement.main([str(got), "--table", str(_table(tmp_path, ROWS))])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "outside 1%: none" in out and "2 cases" in out


def test_a_case_off_by_three_percent_fails_and_is_named(tmp_path, capsys):
    got = _results(tmp_path, {("square4096", "f16"): 0.975, ("decode16", "bf16"): 0.913}, 3)
    assert agreement.main([str(got), "--table", str(_table(tmp_path, ROWS))]) == 1
    out = capsys.readouterr().out
    assert "outside 1%: decode16 bf16" in out
    [line] = [line for line in out.splitlines() if line.startswith("decode16")]
    assert "-3.0" in line or "-2.9" in line or "-3.1" in line


def test_cases_the_table_lacks_are_left_out(tmp_path):
    got = _results(tmp_path, {("square4096", "f16"): 0.975, ("mlp_up", "f16"): 1.0}, 4)
    found = agreement.cases(
        agreement.asv_stats.load(got), agreement.table_speedups(_table(tmp_path, ROWS), TABLE_GPU)
    )
    assert [(c.case, c.dtype, c.config) for c in found] == [
        ("square4096", "f16", "b128x256x64_t256_s4_w16_e")
    ]
    assert found[0].samples == 10
    assert found[0].asv == pytest.approx(0.975, rel=0.005)


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--within", "0"], "must be a fraction between 0 and 1"),
        (["--gpu", "NVIDIA B200"], "no rows for GPU 'NVIDIA B200'"),
    ],
)
def test_bad_input_names_the_field(tmp_path, capsys, argv, message):
    got = _results(tmp_path, {("square4096", "f16"): 0.975}, 5)
    with pytest.raises(SystemExit) as exit_:
        agreement.main([str(got), "--table", str(_table(tmp_path, ROWS)), *argv])
    assert exit_.value.code == 2
    assert message in capsys.readouterr().err


def test_results_without_the_tuned_track_are_refused(tmp_path, capsys):
    store(tmp_path / "r", "h200", "b" * 40, 1, {("gemm.Stage.track_latency", "'1'"): [1.0]}, {})
    with pytest.raises(SystemExit):
        agreement.main([str(tmp_path / "r" / "h200"), "--table", str(_table(tmp_path, ROWS))])
    assert "no gemm.Tuned.track_vs_torch" in capsys.readouterr().err


@pytest.mark.parametrize("text", ['{"results": {', "{}", "[1]"])
def test_a_damaged_results_file_is_bad_input_not_a_disagreement(tmp_path, capsys, text):
    damaged = tmp_path / "abc-existing-py.json"
    damaged.write_text(text)
    with pytest.raises(SystemExit) as exit_:
        agreement.main([str(damaged), "--table", str(_table(tmp_path, ROWS))])
    assert exit_.value.code == 2
    assert f"{damaged}: not a readable asv results file" in capsys.readouterr().err
