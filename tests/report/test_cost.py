"""The suite's cost table (``harness.report.cost``), byte for byte, from a fixed model."""

from pathlib import Path

from harness.report import cost

EXPECTED = Path(__file__).with_name("expected")

# A model as ``harness.suite.cost`` writes it, its table's GPU counts as integers: serial
# steps, two solo units, counts from 2 up (the speed-up is against the first column).
MODEL = {
    "fit": {"a": 1.234, "b": 0.0, "c": 12.3456, "points": 7},
    "serial": {"precompile": 12.5, "publish": 3.0, "overhead": 0.4},
    "solo": {"gemm.Launch": 40.4, "grouped.Launch": 1.0},
    "cpu_lane": 87.6,
    "cores_per_gpu": 8,
    "table": [
        {"grid": "as is", "wall_s": {2: 50.0, 4: 30.0, 8: 20.0}},
        {"grid": "2x shapes", "wall_s": {2: 91.2, 4: 52.5, 8: 33.3}},
    ],
}


def test_the_table_of_a_fixed_model():
    assert cost.render(MODEL, cores_per_lane=16) + "\n" == (EXPECTED / "cost.md").read_text()


def test_one_gpu_count_is_one_column_and_no_solo_unit_leaves_its_list_empty():
    model = {**MODEL, "solo": {}, "table": [{"grid": "as is", "wall_s": {1: 100.0}}]}
    lines = cost.render(model, cores_per_lane=4).splitlines()
    assert "; first in its GPU's lane ; CPU lane 88 s" in lines[0]
    assert "one CPU lane per 4 cores (8 per GPU)." in lines[0]
    assert lines[2:] == ["| grid | 1 GPU |", "|---|---|", "| as is | 100 s (1.00x) |"]
