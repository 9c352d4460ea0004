"""Where the seconds of one ``asv run`` go: its phases, read from asv's output and the time
each line of it began to arrive (``harness.suite.run`` prints them as a ``timing`` line per
run, ``phases_line``).

asv (0.6.6, ``asv_runner.console.Log``) writes each message without its line break and
flushes it; the line break comes when the next message starts, and a message that waits
on work (``Setting up <module>:<line>``, a benchmark's line) gets its ``ok`` (or its
result) when the work is done. So the time a line *begins* to arrive is when its step
began, and ``stamp_lines`` stamps each line so, from the chunks a pipe delivers. From
those stamps ``phases`` reads, in seconds from the start of the ``asv run`` process:

- ``start-up``: to ``Discovering benchmarks`` (the interpreter, asv, its configuration);
- ``discovery``: to ``Building for`` (a process imports the suite and lists it);
- ``build``: to ``Benchmarking`` (nothing to build in an existing environment);
- ``import``: to the first setup or benchmark (the forkserver imports the suite);
- ``setup_cache``: every ``Setting up`` line to the next message (a family's process:
  CUDA context, kernel loads, every combination's samples);
- ``tracks``: every benchmark's line (and its earlier rounds' ``Running (...)``) to the
  next message (a process per track reads the cached samples back);
- ``save``: from the result printed last to the end (asv writes the results file and
  exits); a run whose last benchmark prints its result on its own line (no table) counts
  this in ``tracks``.

Pure: no IO, no clock.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator

PHASES = ("start-up", "discovery", "build", "import", "setup_cache", "tracks", "save")

# A message's first line: asv's progress (once it knows the count), its indent dots (``-``
# where the output cannot encode ``·``), a space, the text. Other lines continue a message.
_MESSAGE = re.compile(r"^(?:\[\s*[\d.]+%\] )?[·-]+ (?P<text>.*)$")
# The phase a message starts, by how its text begins; any other message (a result table,
# an error, a count) leaves the phase as it is.
_STARTS = (
    (re.compile(r"Discovering benchmarks"), "discovery"),
    (re.compile(r"Building for "), "build"),
    (re.compile(r"Benchmarking "), "import"),
    (re.compile(r"Setting up "), "setup_cache"),
    (re.compile(r"Running \("), "tracks"),  # a benchmark's rounds before its last
    (re.compile(r"[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)+(?:\s|$)"), "tracks"),  # gemm.Stage.track_x
)
_PHASES_LINE = re.compile(r"^timing (\S+)(?: (\S+))? phases: (.*)$")
_PHASE = re.compile(r"^(\S+) ([\d.]+) s$")


def stamp_lines(chunks: Iterable[tuple[float, str]]) -> Iterator[tuple[float, str]]:
    """``(seconds, line)`` of every line (without its line break) in a stream delivered as
    ``(seconds, text)`` chunks, ``seconds`` being when the line's first character came; a
    last line without a break is yielded at the end."""
    part, began = "", None
    for seconds, text in chunks:
        while text:
            if began is None:
                began = seconds
            head, newline, text = text.partition("\n")
            part += head
            if newline:
                yield began, part
                part, began = "", None
    if began is not None:
        yield began, part


def _starts(text: str) -> str | None:
    return next((phase for pattern, phase in _STARTS if pattern.match(text)), None)


def phases(stamped: Iterable[tuple[float, str]], end: float) -> dict[str, float]:
    """Seconds per phase (``PHASES``, in order) of one ``asv run`` that ended at ``end``,
    from its output's ``stamp_lines``; they add up to ``end``."""
    out = dict.fromkeys(PHASES, 0.0)
    phase, since, result = PHASES[0], 0.0, False
    for seconds, line in stamped:
        found = _MESSAGE.match(line)
        if found is None:
            continue  # a table's rows, an error's lines: part of the message before
        out[phase] += max(0.0, seconds - since)
        since = seconds
        starts = _starts(found["text"])
        phase, result = (starts, False) if starts else (phase, True)
    last = "save" if phase == "tracks" and result else phase
    out[last] += max(0.0, end - since)
    return out


def phases_line(step: str, seconds: dict[str, float], lane: str = "") -> str:
    """The log line of one run's phases, beside its ``timing_line``
    (``harness.suite.run``): ``timing gemm.Stage gpu0 phases: start-up 1.2 s, ...``. Its
    form is not a ``timing_line``'s, so ``read_timings`` passes over it."""
    parts = ", ".join(f"{name} {value:.1f} s" for name, value in seconds.items())
    return f"timing {step}{' ' + lane if lane else ''} phases: {parts}"


def read_phases(lines: Iterable[str]) -> list[tuple[str, str, dict[str, float]]]:
    """``(step, lane, {phase: seconds})`` of every ``phases_line`` in a log (other lines
    ignored; ``lane`` is "" for a step that has none)."""
    out = []
    for line in lines:
        found = _PHASES_LINE.match(line.strip())
        if not found:
            continue
        parts = [_PHASE.match(part) for part in found.group(3).split(", ")]
        if all(parts):
            seconds = {p.group(1): float(p.group(2)) for p in parts}
            out.append((found.group(1), found.group(2) or "", seconds))
    return out
