"""The MoE sweep of the grouped-GEMM command on the CPU: its layouts are the asv family's,
its table and exit status come from the rows it was given, and an interruption keeps the
finished rows."""

import types

import pytest

from families.grouped_gemm import cli
from families.grouped_gemm import cli_moe as moe
from families.grouped_gemm.bench import GroupedGemm
from harness.cli import EXIT_FAILED, EXIT_INCORRECT, EXIT_INTERRUPTED, EXIT_OK


def test_layouts_are_the_asv_familys_combinations():
    got = moe.layouts()
    sizes = [len(p) for p in GroupedGemm.params]
    assert len(got) == sizes[0] * sizes[1] * sizes[2] * sizes[3] == 16
    assert len(set(got)) == len(got)
    for lay in got:
        shape = lay.shape
        assert shape.groups == lay.experts and shape.n == shape.k == lay.size
        assert shape.total_m == 8192
    skewed = [lay for lay in got if lay.routing == "skewed"]
    assert all(0 in lay.shape.m_sizes for lay in skewed)


def _args(tmp_path, **kw):
    base = dict(warmup=2, repeat=3, backend="event", seed=0, markdown=str(tmp_path / "m.md"))
    return types.SimpleNamespace(**{**base, **kw})


def _fake(latency, correct="ok (rel err 1.0e-03, tol 1e-02)", fail_at=None, stop_at=None):
    """A measure_rows stand-in: baseline 1.0 ms (loop fallback for f16), kernel ``latency``
    ms; raises at the ``fail_at``-th call, KeyboardInterrupt at the ``stop_at``-th."""
    calls = []

    def measure_rows(args, shape, configs):
        calls.append(shape)
        if len(calls) == stop_at:
            raise KeyboardInterrupt
        if len(calls) == fail_at:
            raise RuntimeError("baseline launch failed\nmore")
        why = "" if shape.dtype == "bfloat16" else "torch._grouped_mm refused these inputs"
        name = "torch._grouped_mm" if not why else "torch.matmul per expert"
        (config,) = configs
        return cli.Row(name, 1.0), why, [cli.Row(config.id, latency, correct)], 0

    return measure_rows, calls


def test_sweep_writes_every_layout_with_speedup_and_fallback_reason(tmp_path):
    measure_rows, calls = _fake(0.8)
    args = _args(tmp_path)
    assert moe.main(args, "GPU X", measure_rows) == EXIT_OK
    assert len(calls) == 16
    text = (tmp_path / "m.md").read_text()
    rows = [r for r in text.splitlines() if r.startswith("| 8 ") or r.startswith("| 64 ")]
    assert len(rows) == 16
    assert all("| 1.25 |" in r for r in rows)  # 1.0 / 0.8
    assert "f16: torch._grouped_mm refused these inputs" in text
    assert "median 1.25, range 1.25-1.25" in text
    assert "Interrupted" not in text and "GPU X" in text


def test_wrong_result_and_failed_baseline_set_the_status(tmp_path):
    measure_rows, _ = _fake(0.8, correct="FAIL (rel err 3.0e-01, tol 1e-02)")
    assert moe.main(_args(tmp_path), "GPU X", measure_rows) == EXIT_INCORRECT
    measure_rows, _ = _fake(0.8, fail_at=3)
    assert moe.main(_args(tmp_path), "GPU X", measure_rows) == EXIT_FAILED
    text = (tmp_path / "m.md").read_text()
    assert "RuntimeError: baseline launch failed" in text and "more" not in text


def test_interrupt_keeps_the_finished_rows(tmp_path):
    measure_rows, _ = _fake(2.0, stop_at=6)
    assert moe.main(_args(tmp_path), "GPU X", measure_rows) == EXIT_INTERRUPTED
    text = (tmp_path / "m.md").read_text()
    assert "Interrupted: 5 of 16 layouts measured" in text
    assert text.count("| 0.50 |") == 5


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--markdown", "x.md"], "--markdown: writes the --moe sweep's table; add --moe"),
        (["--moe", "--config", "b128x128x64_t128_s3"], "--config: --moe times each layout"),
        # Checked before any GPU work, so a sweep's table is never lost at the end.
        (["--moe", "--markdown", "/proc/x.md"], "--markdown: '/proc/x.md'"),
    ],
)
def test_sweep_options_are_refused_with_the_rule(argv, message, capsys):
    with pytest.raises(SystemExit) as exit_info:
        cli.main(argv)
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err
