"""Drawing off-table shapes from a seed (``python3 -m benchmarks.draw_shapes``), on the
CPU: the draw is fixed by its seed, keeps each category's rule, and writes a file the
off-table command takes."""

import json
import subprocess
import sys

import pytest

from benchmarks import draw_shapes, offtable, panels

MIX = {"mid": 3, "skinny_m": 2, "thin_n": 1, "long_k": 2, "large": 2, "short_k": 1}


def test_a_seed_fixes_the_draw_and_another_seed_changes_it():
    assert draw_shapes.draw(7, MIX) == draw_shapes.draw(7, MIX)
    assert draw_shapes.draw(7, MIX) != draw_shapes.draw(8, MIX)


@pytest.mark.parametrize("seed", range(20))
def test_every_shape_meets_its_categorys_rule_and_none_is_tuned(seed):
    shapes = draw_shapes.draw(seed, MIX)
    assert len(shapes) == sum(MIX.values()) and len(set(shapes)) == len(shapes)
    start = 0
    for category, n in MIX.items():
        rule, _ = offtable.CATEGORIES[category]
        assert all(rule(s) for s in shapes[start : start + n]), category
        start += n
    assert not set(shapes) & offtable.tuned_shapes()
    # Steps of 8 (skinny M aside): every operand's rows 16-byte aligned.
    assert all(s.n % 8 == 0 and s.k % 8 == 0 for s in shapes)


def test_both_dtypes_and_layouts_come_up():
    shapes = draw_shapes.draw(3, {"mid": 24})
    assert {s.dtype for s in shapes} == {"float16", "bfloat16"}
    assert {s.layout for s in shapes} == {"NN", "NT"}


def test_step_one_draws_rows_tma_cannot_load():
    shapes = draw_shapes.draw(5, {"mid": 12}, step=1)
    assert any(s.k % 8 or s.n % 8 for s in shapes)


def test_a_box_that_cannot_meet_its_rule_is_an_error_naming_the_category(monkeypatch):
    monkeypatch.setitem(draw_shapes.BOXES, "mid", draw_shapes.Box((8, 64), (8, 64), (8, 64)))
    with pytest.raises(ValueError, match=r"mid: no shape of its box meets its rule \(M, N, K"):
        draw_shapes.draw(1, {"mid": 1})


def test_the_file_is_what_offtable_takes_and_names_its_seed(tmp_path, capsys):
    out = tmp_path / "mine.json"
    assert draw_shapes.main(["--seed", "11", "--out", str(out)]) == 0
    shapes = offtable.load_shapes(out)
    assert [s.shape for s in shapes] == draw_shapes.draw(11, draw_shapes.MIX)
    about = json.loads(out.read_text())["about"]
    assert "--seed 11" in about and "random.Random(11)" in about and "6 mid" in about
    printed = capsys.readouterr().out
    assert f"--shapes {out} --resume" in printed
    assert f"--json {tmp_path / 'mine_h200.json'}" in printed


def test_the_suggested_record_drops_the_shapes_suffix(tmp_path, capsys):
    out = tmp_path / "list_shapes.json"
    assert draw_shapes.main(["--seed", "11", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert f"--json {tmp_path / 'list_h200.json'}" in printed
    assert f"--markdown {tmp_path / 'list_h200.md'}" in printed
    assert "benchmarks.panels" not in printed  # not a panel outside reports/


def test_a_list_drawn_into_reports_is_measured_into_the_record_panels_counts(
    tmp_path, monkeypatch, capsys
):
    monkeypatch.setattr(draw_shapes, "REPORTS", tmp_path)
    out = tmp_path / "offtable_fresh_shapes.json"
    assert draw_shapes.main(["--seed", "11", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    (panel,) = panels.find_panels(tmp_path)
    assert panel.name == "fresh"
    assert f"--json {panel.record(panels.HOME_CARD)}" in printed
    assert "python3 -m benchmarks.panels --run fresh" in printed
    other = tmp_path / "fresh_shapes.json"  # not a panel's name: panels does not list it
    assert draw_shapes.main(["--seed", "11", "--out", str(other)]) == 0
    assert "benchmarks.panels" not in capsys.readouterr().out


@pytest.mark.parametrize(
    "mix, message",
    [
        ("mid=2,foo=1", "'foo=1': must be CATEGORY=COUNT"),
        ("mid", "'mid': must be CATEGORY=COUNT"),
        ("mid=1,mid=2", "mid: given twice"),
        ("mid=0", "draws no shape"),
        ("mid=-1", "-1 must be >= 0"),
    ],
)
def test_a_bad_mix_names_the_rule(tmp_path, mix, message):
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "benchmarks.draw_shapes",
            "--seed",
            "1",
            "--mix",
            mix,
            "--out",
            str(tmp_path / "x.json"),
        ],
        capture_output=True,
        text=True,
    )
    assert out.returncode == 2 and "--mix" in out.stderr and message in out.stderr


def test_help_explains_itself():
    out = subprocess.run(
        [sys.executable, "-m", "benchmarks.draw_shapes", "--help"], capture_output=True, text=True
    )
    assert out.returncode == 0
    for word in ("--seed", "--mix", "--step", "offtable", "long_k", "rule"):
        assert word in out.stdout
