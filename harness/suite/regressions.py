"""Regressions on main: every benchmark (per parameter combination, per machine) whose
latest step in the stored asv history is a slowdown beyond that benchmark's own noise.

    python -m harness.suite.regressions [--results DIR] [--machine NAME ...] [--branch main]
        [-b REGEX] [--markdown FILE] [--json FILE] [--calibration FILE] [--fail-on-regression]
    nox -s regressions -- ...

It reads asv's results files through ``harness.suite.series`` (asv's loader, each file
checked; a commit stored as failed and a damaged file left out and named) and fits
each benchmark's per-commit values (asv's medians, weighted as ``asv publish`` weights
them), in the branch's first-parent order (``git rev-list --first-parent``; by the
results' dates where git cannot say), with asv's step detection: the Potts solver behind
``detect_steps`` (``asv.step_detect.solve_potts_approx``, the piecewise-constant fit of
asv's graphs and regressions.json).

What changes from ``asv publish`` is the threshold: asv applies one flat factor
(``regressions_thresholds``, 5%), too coarse for a 4096^3 GEMM that repeats to 0.3% and
too fine for a 128^3 one that wanders by several percent. Here each benchmark's threshold
is, by the project's one statistical policy (``harness.policy.POLICY``)::

    max(floor, calibration, POLICY.k * sqrt(2 / MIN_COMMITS) * spread)

- ``floor``: ``POLICY.floor`` (``--floor`` may change it); nothing lowers it.
- ``calibration``: the machine's calibration file (``nox -s calibrate``), where it names
  this benchmark. Its names are the gate's (``gemm.Stage(4096x4096x4096, 128, 3, f16)``)
  and cover every track of that combination. It was measured for the gate (the paired
  gate's floor is lower than the history's), so it can raise the threshold, never lower it.
- ``spread``: the relative standard deviation of one commit's value, from the first of
  these that has it:

  1. ``history``: the stored history itself, as the median absolute deviation of the log
     ratios of consecutive commits' values (``POLICY.mad_to_sigma * MAD / sqrt(2)``).
     Each commit is its own run, so these differences hold exactly the run-to-run noise,
     and a median ignores the few differences that straddle a real step, so the steps
     being looked for do not inflate the threshold that judges them. Needs
     ``MIN_HISTORY`` commits.
  2. ``samples``: a short history falls back to the spread within runs (the median over
     commits of the median's relative standard error of each commit's samples). It misses
     drift between runs, so it is the weakest source; the floor still applies.

  A step is read between two levels of at least ``MIN_COMMITS`` commits each, whose
  difference has sd ``sqrt(2 / MIN_COMMITS) * spread``; it must clear ``POLICY.k`` (the
  significance quantile) of it. The power comes from the levels' length: a step with ten
  commits either side is read to a few tenths of the spread. (Setting the gate's
  minimum detectable effect here instead, ``z_alpha + z_power``, found a 3% step in
  0.5% noise in fewer than 9 of 10 synthetic histories of 30 commits.)

``threshold_source`` names the term that set the value (``floor``, ``calibration``,
``history`` or ``samples``), and ``spread`` is that term's spread where it has one.

asv's ``detect_steps`` picks the fit's penalty per break by a rough search on an
information criterion, and now and then returns no break at all for an obvious step
(tests/suite/test_regressions.py keeps one: 4% in 0.2% noise). The threshold says what a
break must explain, so it sets the penalty instead: a break costs what a change of
``threshold`` at one commit saves. Every change that could count then gets a break, and
the fit is cleaned with the threshold: segments shorter than ``--min-commits`` are merged
into their closer neighbour (one odd commit is not a level, and a step with one commit
after it is not confirmed yet), then adjacent segments whose levels differ by less than
the threshold are merged, smallest difference first. Every remaining boundary is a change
beyond the noise; a benchmark is reported when its latest one is a slowdown (lower is
better, as asv reads every track of this suite). Levels are weighted medians of the
per-commit values, as in asv's fit.

Output: markdown on stdout (and ``--markdown FILE``), and with ``--json FILE`` an object
(``"version": 2``; version 1 was the bare list of regressions) with one entry per
regression and the newest stored value of every benchmark checked::

    {"version": 2,
     "regressions": [
      {"benchmark": "gemm.Stage.track_latency('4096x4096x4096', 128, 3, 'f16')",
       "machine": "h200", "good": "<40 hex>", "bad": "<40 hex>", "range": "1a2b3c4d..5e6f7a8b",
       "before": 0.00123, "after": 0.00141, "unit": "seconds", "before_text": "1.23ms",
       "after_text": "1.41ms", "ratio": 1.146, "threshold": 0.02, "spread": 0.003,
       "threshold_source": "calibration", "commits_after": 5,
       "commits": ["<40 hex>", ...], "bad_subject": "...", "bad_author": "..."}],
     "latest": [{"benchmark": "...", "machine": "h200", "commit": "<40 hex>",
                 "value": 0.00124, "text": "1.24ms"}]}

``good`` is the last measured commit before the step and ``bad`` the first after it, so
``git log good..bad`` holds the culprit; benchmark plus ``good..bad`` identifies a step
(``harness.suite.announce`` keys its issues on it). ``commits`` are the branch's
first-parent commits after ``good`` up to ``bad`` (just ``[bad]`` when the two are
adjacent: then ``bad`` is the culprit), null where git cannot say; ``bad_subject`` and
``bad_author`` are read from git ("" where it cannot say). ``latest`` lets the announcer
see a benchmark back under its threshold. Exit 0 when the report was made,
found or not (1 with ``--fail-on-regression`` when something regressed), 2 on bad input.

This module is the command line; the detector is ``harness.suite.detector`` (inputs,
threshold, steps, find, records), the JSON file ``harness.suite.regressions_file`` and
the markdown ``harness.report.regressions``.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path

from harness.cli import EXIT_FAILURE, EXIT_OK, EXIT_REGRESSION, fraction, output_file, regex
from harness.policy import POLICY
from harness.report.regressions import render_markdown
from harness.suite import result_files
from harness.suite import series as history_series
from harness.suite.detector.find import detect
from harness.suite.detector.inputs import (
    commit_order,
    default_results_dir,
    load_calibration,
    select,
    with_commits,
)
from harness.suite.detector.threshold import MIN_COMMITS
from harness.suite.regressions_file import latest_values, render_json


class InputError(ValueError):
    """A command-line input that cannot be used; the message names the argument."""


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m harness.suite.regressions",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--results", type=Path, default=None, help="default: asv.conf.json's")
    p.add_argument(
        "--machine", action="append", default=None, help="asv machine (repeat; default: all)"
    )
    p.add_argument("--branch", default="main", help="whose first-parent history orders commits")
    p.add_argument("-b", "--bench", type=regex, default=None, help="regex on asv names")
    p.add_argument("--markdown", type=output_file, default=None, help="also write the markdown")
    p.add_argument("--json", type=output_file, default=None, help="write the regressions as JSON")
    p.add_argument(
        "--calibration",
        type=Path,
        default=None,
        help="calibration file (one machine; default calibration/<machine>.json)",
    )
    p.add_argument(
        "--floor",
        type=fraction,
        default=POLICY.floor,
        help=f"smallest threshold (default {POLICY.floor})",
    )
    p.add_argument(
        "--min-commits",
        type=int,
        default=MIN_COMMITS,
        help=f"commits a level must hold (default {MIN_COMMITS})",
    )
    p.add_argument(
        "--fail-on-regression", action="store_true", help="exit 1 when something regressed"
    )
    return p


def _resolve_inputs(args: argparse.Namespace) -> tuple[Path, list[str], dict[str, dict]]:
    """Results folder, machines and calibration tables; InputError names the argument."""
    if args.min_commits < 1:
        raise InputError(f"--min-commits={args.min_commits}: must be >= 1")
    if args.results is None:
        try:
            results = default_results_dir()
        except (OSError, ValueError) as err:
            raise InputError(f"--results: not given, and {err}") from None
        what = f"--results (default from asv.conf.json: {results})"
    else:
        results, what = args.results, f"--results={args.results}"
    if not results.is_dir():
        raise InputError(f"{what}: no such folder")
    known = result_files.machines(results)
    if not known:
        raise InputError(f"{what}: holds no asv machine (no */machine.json)")
    chosen = list(dict.fromkeys(args.machine or known))
    for name in chosen:
        if name not in known:
            raise InputError(
                f"--machine={name}: no results for it in {results} (known: {', '.join(known)})"
            )
    tables = {}
    if args.calibration is not None:
        if len(chosen) > 1:
            raise InputError(
                f"--calibration={args.calibration}: holds one machine's thresholds; "
                f"pick the machine with --machine (results hold {', '.join(chosen)})"
            )
        try:
            tables[chosen[0]] = load_calibration(args.calibration, missing_ok=False)
        except ValueError as err:
            raise InputError(f"--calibration: {err}") from None
    else:
        from harness.revisions.calibration import calibration_path

        for name in chosen:
            try:
                tables[name] = load_calibration(calibration_path(name))
            except ValueError as err:
                raise InputError(f"calibration of --machine={name}: {err}") from None
    return results, chosen, tables


def main(argv: list[str] | None = None, log: Callable[[str], None] | None = None) -> int:
    p = _parser()
    args = p.parse_args(argv)

    def note(line: str) -> None:
        (log or (lambda s: print(s, file=sys.stderr)))(f"regressions: {line}")

    try:
        results, chosen, tables = _resolve_inputs(args)
    except InputError as err:
        print(f"{p.prog}: error: {err}", file=sys.stderr)
        return EXIT_FAILURE
    commits = commit_order(args.branch)
    if commits is None:
        note(f"git has no branch {args.branch!r} here: commits ordered by their results' dates")
    histories = {}
    unread: list[str] = []  # files that could not be read: an error, exit 2 at the end
    for name in chosen:
        broken = result_files.check_machine(results, name)
        if broken:
            unread.append(f"{results / name / 'machine.json'}: damaged ({broken})")
            continue
        read = history_series.read_history(results, name, commits)
        unread += [f"{d.path}: damaged ({d.reason})" for d in read.damaged]
        if read.failed:
            shas = ", ".join(f.sha[:8] for f in read.failed)
            note(f"{name}: {len(read.failed)} commit(s) stored as failed left out: {shas}")
        if read.ignored:
            hint = "" if read.series else f" (none is: is {args.branch!r} the branch?)"
            note(f"{name}: {read.ignored} stored commit(s) not on {args.branch} left out{hint}")
        histories[name] = select(read.series, args.bench)
    for line in unread:
        print(f"{p.prog}: error: {line}; left out", file=sys.stderr)
    if args.bench is not None and not any(histories.values()) and not unread:
        print(
            f"{p.prog}: error: -b/--bench={args.bench!r}: matches no stored benchmark of "
            f"{', '.join(chosen)} in {results}",
            file=sys.stderr,
        )
        return EXIT_FAILURE
    found, latest = [], []
    for name, series in histories.items():
        found += detect(series, name, tables.get(name), args.floor, args.min_commits)
        latest += latest_values(series, name)
    checked = sum(len(s) for s in histories.values())
    markdown = render_markdown(found, checked, chosen, args.branch, unread)
    print(markdown, end="")
    if args.markdown:
        args.markdown.write_text(markdown)
    if args.json:
        args.json.write_text(render_json(with_commits(found, commits), latest))
    if unread:
        return EXIT_FAILURE
    return EXIT_REGRESSION if found and args.fail_on_regression else EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
