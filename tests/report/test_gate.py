"""The gate's markdown (``harness.report.gate``): order, escaping and the summary line, from
decided verdicts; and the whole comment for fixed verdicts of every status."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from harness.gate.decide import BenchSamples, Verdict, decide_all, exit_code
from harness.report.gate import render_markdown
from tests.gate.test_decide import bench, verdict

EXPECTED = Path(__file__).with_name("expected")


def _render(verdicts, **kwargs) -> str:
    """The comment for ``verdicts``, PASS or FAIL as the gate decides it."""
    verdicts = list(verdicts)
    return render_markdown(verdicts, passed=not exit_code(verdicts), **kwargs)


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
    md = _render(
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
    md = _render(verdicts, base_label="base", head_label="head")
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
    rows = _table_rows(_render(verdicts, base_label="b", head_label="h"))
    assert [row.split("`")[1] for row in rows] == ["r_big", "r_small", "f", "i", "u"]


def test_ungated_benchmarks_are_listed_at_the_top() -> None:
    """A benchmark whose calibrated threshold is over the cap is named right under the
    summary line, before the context and the table, with its threshold and the cap."""
    rng = np.random.default_rng(3)
    samples = [bench(rng, 1.0, name="quiet"), bench(rng, 1.0, name="wild")]
    verdicts = decide_all(samples, threshold=0.01, thresholds={"wild": 0.066})
    md = _render(verdicts, base_label="b", head_label="h", context={"GPU": "H200"})
    lines = md.splitlines()
    assert lines[2] == (
        "**Not gated: 1 benchmark** (a slowdown there passes unseen; calibration marked "
        "them too noisy):"
    )
    assert lines[3].startswith("- `wild`: calibration needs a 6.6% threshold, above the 5% cap")
    assert lines.index("- GPU: H200") > 3
    clean = _render(verdicts[:1], base_label="b", head_label="h")
    assert "Not gated" not in clean


# --- the whole comment, for fixed verdicts ------------------------------------------------

HOSTILE = "a | b\nline <2> *x* _y_ [z](u) `c` \\ & done"


def _v(
    name: str,
    status: str,
    ratio: float | None = 1.0,
    *,
    reason: str = HOSTILE,
    threshold: float = 0.05,
    base: float | None = 1e-3,
    rel: float | None = None,
) -> Verdict:
    known = ratio is not None and base is not None
    return Verdict(
        name=name,
        status=status,
        base_median=base,
        head_median=base * ratio if known else None,
        ratio=ratio,
        rel_ratio=rel,
        p_value=1e-4 if known else None,
        ci_low=ratio * 0.98 if known else None,
        ci_high=ratio * 1.02 if known else None,
        threshold=threshold,
        reason=reason,
    )


# One verdict of every status (two regressions and two improvements, to show their order),
# names and reasons a table must hold inert, latencies from nanoseconds to seconds.
EVERY_STATUS = [
    _v("gemm.T(m1|n`2`)", "unchanged", 1.004, base=2.5),
    _v("gemm.T(r_small)", "regression", 1.06, threshold=0.03),
    _v("gemm.T(r_big)", "regression", 1.4),
    _v("gemm.T(i_small)", "improvement", 0.9, base=4e-8),
    _v("gemm.T(i_big)", "improvement", 0.5, rel=0.51),
    _v("gemm.T(broken)", "failed", None, base=None, reason="head: CompileError: " + HOSTILE),
    _v("gemm.T(wild)", "too noisy", 1.01, reason="calibration needs a 6.6% threshold"),
    _v("gemm.T(added)", "new", None, base=None, reason="added by head"),
    _v("gemm.T(gone)", "removed", None, reason="not in head any more"),
]
RESOURCES = {
    "base": {
        "gemm.T(r_big)": {
            "registers": 128,
            "smem_bytes": 1024,
            "spill_bytes": 0,
            "has_wgmma": True,
            "has_tma": True,
        },
        "gemm.T(r_small)": {"error": "CompileError: " + HOSTILE},
    },
    "head": {
        "gemm.T(r_big)": {
            "registers": 168,
            "smem_bytes": 1024,
            "spill_bytes": 8,
            "has_wgmma": False,
            "has_tma": True,
        },
        "gemm.T(r_small)": {"registers": 90},
        "gemm.T(head|only)": {"registers": None, "has_tma": False},
    },
}


@pytest.mark.parametrize(
    ("expected", "verdicts", "kwargs"),
    [
        (
            "gate_every_status.md",
            EVERY_STATUS,
            {
                "base_label": "main@abc1234 <b>",
                "head_label": "pr_7 | *x*",
                "context": {"GPU": "NVIDIA H200", "rounds": "3", "odd *key*": HOSTILE},
                "resources": RESOURCES,
            },
        ),
        (
            "gate_pass.md",
            [v for v in EVERY_STATUS if v.status in ("unchanged", "improvement", "new", "removed")],
            {"base_label": "b", "head_label": "h"},
        ),
        (
            "gate_empty.md",
            [],
            {"base_label": "b", "head_label": "h", "resources": {"base": {}, "head": {}}},
        ),
    ],
)
def test_the_whole_comment_for_fixed_verdicts(expected, verdicts, kwargs) -> None:
    """Every part of the comment, byte for byte: the summary line, the benchmarks not gated,
    the context, the table worst first with every cell escaped, the resources base -> head
    (a side that failed to build, a benchmark only head has), and the empty case."""
    assert _render(verdicts, **kwargs) == (EXPECTED / expected).read_text()


def test_the_outcome_is_the_gates_decision() -> None:
    """The renderer writes PASS or FAIL as it is told (the gate's exit code decides it);
    the statuses alone only fill the counts."""
    regressed = [_v("gemm.T(r)", "regression", 1.2)]
    told = render_markdown(regressed, passed=True, base_label="b", head_label="h")
    assert told.startswith("**Performance gate: PASS** — 1 regression,")
    assert _render(regressed, base_label="b", head_label="h").startswith(
        "**Performance gate: FAIL** — 1 regression,"
    )
