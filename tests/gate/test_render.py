"""The gate's markdown: order, escaping and the summary line, from decided verdicts."""

from __future__ import annotations

import numpy as np

from harness.gate.decide import BenchSamples, decide_all
from harness.gate.render import render_markdown
from tests.gate.test_decide import bench, verdict


def _table_rows(md: str) -> list[str]:
    return [line for line in md.splitlines() if line.startswith("| `")]


def test_markdown_fail_summary_order_and_escaped_error() -> None:
    rng = np.random.default_rng(2)
    samples = [
        bench(rng, 1.0, name="same_1"),
        bench(rng, 1 / 1.10, name="fast"),
        BenchSamples("broken", error="head: CompileError: a | b\nline <2> *x*"),
        bench(rng, 1.10, name="slow"),
        bench(rng, 1.0, name="same_2"),
    ]
    verdicts = decide_all(samples, threshold=0.05)
    md = render_markdown(
        verdicts,
        base_label="main@abc1234",
        head_label="pr@def5678",
        context={"GPU": "NVIDIA H200", "rounds": "20"},
    )
    lines = md.splitlines()
    assert lines[0] == (
        "**Performance gate: FAIL** — 1 regression, 1 failed, 1 improvement, 2 unchanged "
        "(threshold 5%)"
    )
    assert "- GPU: NVIDIA H200" in lines
    assert "- rounds: 20" in lines
    rows = _table_rows(md)
    assert [row.split(" | ")[0] for row in rows] == [
        "| `slow`",
        "| `broken`",
        "| `fast`",
        "| `same_1`",
        "| `same_2`",
    ]
    broken = rows[1]
    assert r"head: CompileError: a \| b<br>line &lt;2&gt; \*x\*" in broken
    assert "**failed**" in broken
    # Every row has the header's column count once escaped pipes are discounted.
    header = next(line for line in lines if line.startswith("| benchmark"))
    for row in rows:
        assert row.replace(r"\|", "").count("|") == header.count("|") == 10
    assert "abc1234" in header and "def5678" in header


def test_markdown_pass_and_latency_units() -> None:
    rng = np.random.default_rng(4)
    s = bench(rng, 1.0)
    milli = BenchSamples("milli", tuple(x * 2 for x in s.base), tuple(x * 2 for x in s.head))
    micro = BenchSamples("micro", tuple(x / 50 for x in s.base), tuple(x / 50 for x in s.head))
    verdicts = decide_all([milli, micro])
    md = render_markdown(verdicts, base_label="base", head_label="head")
    assert md.splitlines()[0].startswith("**Performance gate: PASS** — 0 regressions, 0 failed")
    assert "FAIL" not in md
    assert " ms |" in md and " µs |" in md
    assert "\n- " not in md  # no context given, no bullet list


def test_markdown_rows_from_hand_made_verdicts_sort_worst_first() -> None:
    verdicts = [
        verdict("u", "unchanged", 1.01),
        verdict("r_small", "regression", 1.06),
        verdict("i", "improvement", 0.8),
        verdict("r_big", "regression", 1.40),
        verdict("f", "failed", None, error="base: RuntimeError"),
    ]
    rows = _table_rows(render_markdown(verdicts, base_label="b", head_label="h"))
    assert [row.split("`")[1] for row in rows] == ["r_big", "r_small", "f", "i", "u"]


def test_ungated_benchmarks_are_listed_at_the_top() -> None:
    """A benchmark whose calibrated threshold is over the cap is named right under the
    summary line, before the context and the table, with its threshold and the cap."""
    rng = np.random.default_rng(3)
    samples = [bench(rng, 1.0, name="quiet"), bench(rng, 1.0, name="wild")]
    verdicts = decide_all(samples, threshold=0.01, thresholds={"wild": 0.066})
    md = render_markdown(verdicts, base_label="b", head_label="h", context={"GPU": "H200"})
    lines = md.splitlines()
    assert lines[2] == (
        "**Not gated: 1 benchmark** (a slowdown there passes unseen; calibration marked "
        "them too noisy):"
    )
    assert lines[3].startswith("- `wild`: calibration needs a 6.6% threshold, above the 5% cap")
    assert lines.index("- GPU: H200") > 3
    clean = render_markdown(verdicts[:1], base_label="b", head_label="h")
    assert "Not gated" not in clean
