"""An ``asv run``'s phases from its output (``harness.suite.asv_phases``): lines stamped
when they began, from a real run's recorded chunks; the phases read from them; asv's other
endings; the log line and its reader, which the cost model's reader passes over.

``recorded/asv_run_two_families.jsonl`` is asv 0.6.6's output of one run, as the runner's
pipe delivered it (``[seconds, text]`` per piece after a line ``{"end", "code"}``), on a
machine without a GPU (every value n/a):
``asv run -E existing:python --set-commit-hash HEAD --record-samples -b '^gemm\\.Stage128\\.'
-b '^gemm\\.Launch\\.'``; the environment's name is shortened.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.suite import cost
from harness.suite import run as suite_run
from harness.suite.asv_phases import PHASES, phases, phases_line, read_phases, stamp_lines

RECORDED = Path(__file__).with_name("recorded") / "asv_run_two_families.jsonl"


def _recorded() -> tuple[list[tuple[float, str]], float]:
    head, *chunks = RECORDED.read_text().splitlines()
    return [tuple(json.loads(c)) for c in chunks], json.loads(head)["end"]


def _messages(stamped):
    """The stamps of the lines that open a message, by the message's first words."""
    return [(s, line.split("··· ")[-1].split("  ")[0]) for s, line in stamped if "· " in line]


def test_a_line_is_stamped_when_its_first_character_came():
    """asv writes a message, waits for the work, then writes ``ok``: the line carries the
    time the work began, not the time it ended."""
    chunks, _ = _recorded()
    stamped = list(stamp_lines(chunks))
    text = "".join(t for _, t in chunks)
    assert [line for _, line in stamped] == text.split("\n")[:-1]
    found = dict((m, s) for s, m in _messages(stamped))
    assert found["Setting up gemm:359"] == 2.087  # its ok came at 4.702
    assert found["gemm.Launch.track_launch"] == 4.703  # its ok came at 4.899
    assert found["Setting up gemm:293"] == 4.9


def test_the_phases_of_a_recorded_run():
    chunks, end = _recorded()
    got = phases(stamp_lines(chunks), end)
    assert list(got) == list(PHASES)
    expected = {
        "start-up": 0.619,  # to Discovering benchmarks
        "discovery": 1.399 - 0.619,  # to Building for
        "build": 1.405 - 1.399,  # to Benchmarking
        "import": 2.087 - 1.405,  # to the first Setting up
        "setup_cache": (4.703 - 2.087) + (8.515 - 4.9),  # two families, one each
        "tracks": (4.9 - 4.703) + (9.119 - 8.515) + (9.851 - 9.119),  # results tables included
        "save": end - 9.851,  # after the last table
    }
    assert got == pytest.approx(expected, abs=1e-9)
    assert sum(got.values()) == pytest.approx(end)


def test_a_line_split_over_chunks_and_a_last_line_without_a_break():
    chunks = [
        (1.0, "· Disc"),
        (2.0, "overing benchmarks"),
        (3.0, "\n· Running 1 total\n  x"),
        (4.0, "y"),
    ]
    assert list(stamp_lines(chunks)) == [
        (1.0, "· Discovering benchmarks"),
        (3.0, "· Running 1 total"),
        (3.0, "  xy"),
    ]


@pytest.mark.parametrize(
    ("lines", "end", "expected"),
    [
        # A failed setup_cache: asv marks its benchmarks skipped, the run ends after them.
        (
            [
                (1.0, "· Discovering benchmarks"),
                (2.0, "[ 0.00%] ·· Benchmarking existing-py"),
                (3.0, "[50.00%] ··· Setting up gemm:293                failed"),
                (9.0, "[50.00%] ···· Traceback (most recent call last):"),
                (9.0, '                File "gemm.py", line 1'),
                (9.0, "[100.00%] ··· gemm.Stage.track_latency skipped (setup_cache failed)"),
            ],
            9.5,
            {"start-up": 1, "discovery": 1, "import": 1, "setup_cache": 6, "tracks": 0.5},
        ),
        # Earlier rounds, then the last one whose result sits on its own line: the tail
        # after it is the track's and the save's together. asv's fallback dots are ``-``.
        (
            [
                (0.5, "- Discovering benchmarks"),
                (1.0, "[ 0.00%] -- Building for existing-py"),
                (1.5, "[ 0.00%] -- Benchmarking existing-py"),
                (2.0, "[50.00%] --- Running (cpu.Good.track_value--)."),
                (4.0, "[100.00%] --- cpu.Good.track_value                  1.23"),
            ],
            7.0,
            {"start-up": 0.5, "discovery": 0.5, "build": 0.5, "import": 0.5, "tracks": 5.0},
        ),
        # The suite does not import: the run ends in discovery.
        (
            [(1.0, "· Discovering benchmarks"), (3.0, "· Error: cannot import suite")],
            4.0,
            {"start-up": 1.0, "discovery": 3.0},
        ),
        # No output at all: start-up only.
        ([], 2.0, {"start-up": 2.0}),
    ],
)
def test_other_endings(lines, end, expected):
    assert phases(lines, end) == pytest.approx({**dict.fromkeys(PHASES, 0.0), **expected})


def test_the_phases_line_reads_back_and_the_timing_readers_pass_over_it():
    got = {"start-up": 1.04, "discovery": 0.78, "setup_cache": 12.0, "save": 0.25}
    line = phases_line("gemm.Stage+gemm.Tuned[1/2]", got, "gpu1")
    assert line == (
        "timing gemm.Stage+gemm.Tuned[1/2] gpu1 phases: start-up 1.0 s, discovery 0.8 s, "
        "setup_cache 12.0 s, save 0.2 s"
    )
    log = ["noise", suite_run.timing_line("gemm.Stage", 14.0, "gpu1"), line]
    log += [phases_line("publish", {"save": 1.0}), "timing x y phases: start-up fast"]
    assert read_phases(log) == [
        ("gemm.Stage+gemm.Tuned[1/2]", "gpu1", {k: round(v, 1) for k, v in got.items()}),
        ("publish", "", {"save": 1.0}),
    ]
    assert suite_run.read_timings(log) == [("gemm.Stage", "gpu1", 14.0)]
    assert cost.Run.read(log).units == {"gemm.Stage": ("gpu1", 14.0)}
