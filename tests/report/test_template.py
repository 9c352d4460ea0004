"""The report templates' syntax: values, conditional parts, pieces and comments."""

import pytest

from harness.report import template


def test_values_and_conditional_parts():
    text = "a $x<!-- if y --> y=$y<!-- else --> no y<!-- endif -->.\n"
    assert template.fill(text, {"x": 1, "y": 2}) == "a 1 y=2.\n"
    assert template.fill(text, {"x": 1, "y": None}) == "a 1 no y.\n"
    assert template.fill(text, {"x": 1, "y": ""}) == "a 1 no y.\n"


def test_markers_on_their_own_lines_take_their_line_breaks():
    text = "top\n<!-- if y -->\n- $y\n<!-- endif -->\nbottom\n"
    assert template.fill(text, {"y": "item"}) == "top\n- item\nbottom\n"
    assert template.fill(text, {"y": None}) == "top\nbottom\n"


def test_a_missing_value_is_an_error_not_a_blank():
    with pytest.raises(KeyError, match="x"):
        template.fill("$x", {})
    with pytest.raises(KeyError, match="template condition 'y'"):
        template.fill("<!-- if y -->a<!-- endif -->", {})


def test_pieces_and_comments():
    pieces = template.parse(
        "<!--# for the template's readers -->\n# $t\n\n<!-- define line -->\n- $x\n\n"
        "<!-- define other -->\nmore\n"
    )
    assert pieces == {template.MAIN: "# $t\n", "line": "- $x", "other": "more"}
    with pytest.raises(ValueError, match="defined twice"):
        template.parse("<!-- define a -->\nx\n<!-- define a -->\ny\n")


def test_the_stage04_template_has_its_pieces():
    pieces = template.load("stage04")
    for name in ("baseline_line", "correctness_checked", "tuned", "limits", "knob_line"):
        assert name in pieces
    assert pieces[template.MAIN].startswith("# $title\n")
