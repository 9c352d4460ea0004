"""The cost model's what-if, on a model small enough to split by hand: the best split of
the pieces over the GPUs, a cut made only where it pays its process start, the
what-if's refusals, and the runners doc's block kept as the command prints it."""

import math
import subprocess
import sys
from pathlib import Path

import pytest

from harness.suite import cost, whatif

ROOT = Path(__file__).resolve().parents[2]
GPU_FAMILIES = ("gemm.A", "gemm.B", "gemm.C")


def _model(process: float = 10.0) -> dict:
    """a = 1 s per asv run; the solo family L 5 s in a run of its own; A four combinations
    of 5 s, B and C two of 2 s each; the CPU unit S two of 3 s; 2 s of serial steps."""
    per = {
        "gemm.L": {"L1": [0.5, 0.5]},
        "gemm.A": {f"A{i}": [5.0, 5.0] for i in range(4)},
        "gemm.B": {"B0": [2.0, 2.0], "B1": [2.0, 2.0]},
        "gemm.C": {"C0": [2.0, 2.0], "C1": [2.0, 2.0]},
        "static": {"S0": [3.0, 3.0], "S1": [3.0, 3.0]},
    }
    return {
        "fit": {"a": 1.0, "b": 0.0, "c": 0.0, "points": 8, "process": process},
        "serial": {"precompile": 0.0, "publish": 2.0},
        "solo": {"gemm.L": 5.0},
        "cpu_lane": 7.0,
        "cores_per_gpu": 16,
        "sizes": {u: {"combinations": len(per[u]), "tflop": 0.0} for u in GPU_FAMILIES},
        "per_combination": per,
    }


def test_the_best_split_is_the_one_found_by_hand():
    m = _model()
    # One GPU: L's run (5 s), then A + B in a run (1 + 30 + 14 = 45 s, the budget) and C
    # in another (15 s); each piece 10 s of process start before its combinations.
    one = whatif.best_split(m, 1)
    assert one.busiest == pytest.approx(65.0) and one.wall == pytest.approx(67.0)
    # Two GPUs: A alone (31 s) beside L, B and C (5 + 1 + 28 = 34 s); cutting A pays
    # 10 s more than it balances, so nothing is cut. The CPU lanes: after L, 1 + 3 s each.
    two = whatif.best_split(m, 2)
    assert two.busiest == pytest.approx(34.0) and two.cpu == pytest.approx(9.0)
    assert two.wall == pytest.approx(36.0) and set(two.parts.values()) == {1}
    assert two.wall <= cost.wall(m, 2, cost.GROWTHS["as is"]) + 1e-9


def test_a_free_process_start_makes_the_cut_pay_and_the_ratio_fall():
    free = whatif.with_process(_model(), 0.0)
    two = whatif.best_split(free, 2)
    # A in two (10 s each) and B or C too: L, then A's half and 2 s (5 + 1 + 12) beside
    # the other half and 6 s (1 + 16); cutting A alone leaves 1 + 18 s on one GPU.
    assert two.busiest == pytest.approx(18.0) and two.parts["gemm.A"] == 2
    assert sorted(two.parts.values()) == [1, 2, 2]
    one = whatif.best_split(free, 1)
    assert one.wall == pytest.approx(2.0 + 5.0 + 1.0 + 28.0)
    # Both walls fall, the one-GPU wall by more: the speedup drops from 67/36.
    assert one.wall / two.wall < 67.0 / 36.0
    rows = whatif.rows(free, counts=(1, 2))
    assert rows[1]["best_x"] == pytest.approx(one.wall / two.wall)
    assert rows[1]["best_s"] <= rows[1]["plan_s"] + 1e-9


@pytest.mark.parametrize("seconds", [-1.0, math.inf, math.nan])
def test_a_process_start_that_is_no_duration_is_refused(seconds):
    with pytest.raises(ValueError, match=r"process=.*must be finite and >= 0"):
        whatif.with_process(_model(), seconds)


def _whatif(*args: str) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "harness.suite.whatif", *args]
    return subprocess.run(command, cwd=ROOT, capture_output=True, text=True)


def test_the_command_names_the_option_and_the_rule(tmp_path):
    run = _whatif("reports/cost_h200.json", "--process", "-2")
    assert run.returncode == 2 and "--process=-2.0: must be finite and >= 0" in run.stderr
    missing = tmp_path / "none.json"
    run = _whatif(str(missing))
    assert run.returncode == 2 and f"model {missing}" in run.stderr
    run = _whatif("reports/cost_h200.json", "--parts", "0")
    assert run.returncode == 2 and "--parts: 0 must be >= 1" in run.stderr


@pytest.mark.parametrize(
    "text, says",
    [
        ('{"fit": {"a": 1.0}}', "lacks ['serial', 'solo'"),
        (
            '{"fit": {}, "serial": {}, "solo": {}, "cores_per_gpu": 16, "sizes": {}, '
            '"per_combination": {}}',
            "lacks ['fit.a']",
        ),
        ("[1, 2]", "lacks ['fit', 'serial'"),
        ("not json", "JSONDecodeError"),
    ],
)
def test_a_damaged_model_is_refused_naming_what_it_lacks(tmp_path, text, says):
    damaged = tmp_path / "cost.json"
    damaged.write_text(text)
    run = _whatif(str(damaged))
    assert run.returncode == 2 and says in run.stderr and "Traceback" not in run.stderr


def test_the_runners_doc_shows_the_recorded_models_what_if_verbatim():
    doc = (ROOT / "docs" / "runners.md").read_text()
    block = doc.split("<!-- whatif: begin -->\n")[1].split("\n<!-- whatif: end -->")[0]
    run = _whatif("reports/cost_h200.json")
    assert run.returncode == 0, run.stderr
    assert block == run.stdout.strip()
