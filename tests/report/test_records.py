"""Recorded sweeps read back: runs told apart by id, legacy runs by their meta lines,
torn lines skipped and malformed rows refused by line number."""

import json
from pathlib import Path

import pytest

from harness.report.records import RecordError, pick_run, read_runs

RECORDED = Path(__file__).resolve().parent.parent.parent / "reports" / "stage04_gemm.jsonl"


def _lines():
    """The committed recording: its meta line and its first two rows, without run ids."""
    meta, *rows = RECORDED.read_text().splitlines()[:3]
    return json.loads(meta), [json.loads(r) for r in rows]


def _write(path, records):
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def test_rows_go_to_the_run_their_id_names(tmp_path):
    meta, rows = _lines()
    a, b = dict(meta, run="A"), dict(meta, run="B", gpu="Other GPU")
    records = [{"meta": a}, {"meta": b}, {**rows[0], "run": "A"}, {**rows[1], "run": "B"}]
    runs, notes = read_runs(_write(tmp_path / "x.jsonl", [*records, {**rows[1], "run": "A"}]))
    assert [(r.id, len(r.rows)) for r in runs] == [("A", 2), ("B", 1)] and notes == []
    assert runs[1].meta["gpu"] == "Other GPU" and runs[0].line == 1


def test_legacy_runs_are_split_by_their_meta_lines(tmp_path):
    meta, rows = _lines()
    path = _write(tmp_path / "x.jsonl", [{"meta": meta}, *rows, {"meta": meta}, rows[0]])
    runs, _ = read_runs(path)
    assert [(r.id, len(r.rows), r.line) for r in runs] == [("legacy-1", 2, 1), ("legacy-2", 1, 4)]
    one, _ = read_runs(_write(tmp_path / "y.jsonl", [{"meta": meta}, *rows]))
    assert [r.id for r in one] == ["legacy"]


def test_a_row_of_a_run_without_meta_line_is_kept_with_a_note(tmp_path):
    _, rows = _lines()
    runs, notes = read_runs(_write(tmp_path / "x.jsonl", [{**rows[0], "run": "A"}]))
    assert runs[0].id == "A" and runs[0].meta == {} and "has no meta line" in notes[0]


def test_launch_lines_are_not_rows(tmp_path):
    meta, rows = _lines()
    launch = {"shape": "m128_n128_k128_f16", "config": "torch.matmul", "launch_us": 8.0}
    runs, _ = read_runs(_write(tmp_path / "x.jsonl", [{"meta": meta}, launch, rows[0]]))
    assert len(runs[0].rows) == 1


def test_a_line_that_is_not_an_object_is_refused(tmp_path):
    path = tmp_path / "x.jsonl"
    path.write_text("[1, 2]\n")
    with pytest.raises(RecordError, match=r"x.jsonl:1: must be a JSON object"):
        read_runs(path)


def test_pick_run_by_id_or_prefix(tmp_path):
    meta, rows = _lines()
    records = [{"meta": dict(meta, run=run)} for run in ("20261129-a", "20261130-b")]
    records += [{**rows[0], "run": "20261129-a"}, {**rows[0], "run": "20261130-b"}]
    path = _write(tmp_path / "x.jsonl", records)
    runs, _ = read_runs(path)
    assert pick_run(path, runs, "20261130").id == "20261130-b"
    with pytest.raises(RecordError, match="matches several runs"):
        pick_run(path, runs, "2026")
    with pytest.raises(RecordError, match="holds 2 runs; choose one with --run ID"):
        pick_run(path, runs, None)
    with pytest.raises(RecordError, match="holds no measured rows"):
        pick_run(path, [r for r in runs if False], None)
