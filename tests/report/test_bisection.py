"""Bisect's markdown (``harness.report.bisection``), byte for byte, for records of every
shape a search ends in: a culprit in the middle of the range or right after GOOD, a range
that skipped commits hide, an interrupted search (pinned or not), one commit only, and the
report of a bisect that stopped after GOOD against BAD. The expected files were written
by the renderer as it was when it lived in the gate."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.gate import decide as gd
from harness.gate import run as gate
from harness.gate.bisection_record import Record
from harness.gate.bisection_search import BAD, GOOD, SKIP, settle
from harness.report.bisection import render, render_stopped

EXPECTED = Path(__file__).with_name("expected")

NAMES = ["gemm.Stage(4096x4096x4096, 128, 3, f16)", "gemm.Tiles(b|c)"]
SHAS = [f"{i:02d}" + "abcdef0123456789" * 2 + "abcdef" for i in range(12)]
GOOD_SHA, *COMMITS = SHAS  # eleven commits after GOOD, the last one BAD
SUBJECTS = {sha: f"c{i}: change {i}" for i, sha in enumerate(SHAS)}
SUBJECTS[SHAS[3]] = "a | piped `subject` with $dollar and *stars*"
SUBJECTS[SHAS[4]] = ""  # a commit with an empty subject


def _verdict(name: str, status: str) -> gd.Verdict:
    return gd.Verdict(name, status, 1e-3, 1e-3, 1.0, 1.0, 0.5, 0.9, 1.1, 0.02, "why")


def _comparison(sha: str, statuses: list[str], report: str | None = None) -> gate.Comparison:
    verdicts = [_verdict(name, status) for name, status in zip(NAMES, statuses, strict=False)]
    report = f"| TABLE | base {GOOD_SHA[:10]} | head {sha[:10]} |\n" if report is None else report
    return gate.Comparison(verdicts, [], report)


def _record(outcomes: dict[int, str], commits=COMMITS, **kwargs) -> Record:
    """A record whose probes (commit index -> outcome, in probe order) each have their
    comparison: a regression where the commit is bad, unchanged where good, failed where
    skipped."""
    statuses = {
        BAD: [gd.REGRESSION, gd.UNCHANGED],
        GOOD: [gd.UNCHANGED, gd.IMPROVEMENT],
        SKIP: [gd.FAILED, gd.UNCHANGED],
    }
    probes = {commits[i]: outcome for i, outcome in outcomes.items()}
    search = settle(commits, probes)
    comparisons = {commits[-1]: _comparison(commits[-1], [gd.REGRESSION, gd.REGRESSION])}
    comparisons.update({sha: _comparison(sha, statuses[o]) for sha, o in probes.items()})
    fields = {
        "good": GOOD_SHA,
        "bad": commits[-1],
        "bench": "Stage",
        "commits": list(commits),
        "subjects": SUBJECTS,
        "rounds": 20,
        "threshold": 0.01,
        "regressed": [NAMES[0]],
        "comparisons": comparisons,
        "search": search,
        "wall_s": 1234.56,
        **kwargs,
    }
    return Record(**fields)


def _without(record: Record, sha: str) -> Record:
    record.comparisons.pop(sha)
    return record


CASES = {
    # The culprit (index 6) in the middle: five probes, a skipped one among them.
    "bisect_culprit.md": lambda: _record({5: GOOD, 8: BAD, 6: BAD, 3: SKIP, 7: BAD}),
    # The first commit after GOOD is the culprit: GOOD itself is the last good one.
    "bisect_culprit_first.md": lambda: _record(
        {5: BAD, 2: BAD, 0: BAD}, regressed=list(NAMES), threshold=0.025, rounds=3
    ),
    # Skipped commits hide which of three is the first bad one.
    "bisect_skipped.md": lambda: _record({5: GOOD, 8: BAD, 6: SKIP, 7: SKIP}, wall_s=59.4),
    # Interrupted after two probes: the untested candidates are marked so.
    "bisect_interrupted.md": lambda: _record({5: GOOD, 8: BAD}, interrupted=True),
    # Interrupted right after the probe that pinned the culprit: still said interrupted.
    "bisect_interrupted_pinned.md": lambda: _record({5: GOOD, 6: BAD}, interrupted=True),
    # One commit after GOOD: BAD is the culprit without a probe; the evidence has no
    # trailing line break and holds what a template must leave alone.
    "bisect_one_commit.md": lambda: _record(
        {},
        commits=COMMITS[-1:],
        comparisons={COMMITS[-1]: _comparison(COMMITS[-1], [gd.REGRESSION], "$head `x` | y")},
        wall_s=0.4,
    ),
    # A probe without a comparison has no row in the steps table.
    "bisect_probe_unrecorded.md": lambda: _without(
        _record({5: GOOD, 8: BAD, 6: BAD, 7: BAD}), COMMITS[8]
    ),
}


@pytest.mark.parametrize("expected", sorted(CASES))
def test_the_whole_report_for_every_outcome(expected) -> None:
    assert render(CASES[expected]()) == (EXPECTED / expected).read_text()


def test_the_report_of_a_bisect_stopped_after_good_against_bad() -> None:
    """No search ran: the message, then that one comparison's report as it is."""
    report = _comparison(COMMITS[-1], [gd.UNCHANGED]).report
    text = render_stopped("no regression between GOOD and BAD", report)
    assert text == (EXPECTED / "bisect_stopped.md").read_text()
