"""Regressions on main: every benchmark (per parameter combination, per machine) whose
latest step in the stored asv history is a slowdown beyond that benchmark's own noise.

    python -m harness.suite.regressions [--results DIR] [--machine NAME ...] [--branch main]
        [-b REGEX] [--markdown FILE] [--json FILE] [--calibration FILE] [--fail-on-regression]
    nox -s regressions -- ...

It reads asv's results files through ``harness.suite.result_files`` (asv's loader, each
file checked; a commit stored as failed and a damaged file left out and named) and fits
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
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import re
import statistics
import subprocess
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from harness.cli import EXIT_FAILURE, EXIT_OK, EXIT_REGRESSION, fraction, output_file, regex
from harness.policy import POLICY
from harness.suite import discovery, result_files
from harness.suite import series as history_series
from harness.suite.series import Point, Series

ROOT = Path(__file__).resolve().parent.parent.parent
MIN_HISTORY = 8  # commits before the history's own spread is trusted (7 differences)
MIN_COMMITS = 2  # a segment of the fit must hold this many commits to count as a level
SOURCES = ("calibration", "history", "samples", "floor")


class InputError(ValueError):
    """A command-line input that cannot be used; the message names the argument."""


@dataclass(frozen=True, slots=True)
class Threshold:
    value: float  # the slowdown that counts, as a fraction (0.02 = 2%)
    spread: float | None  # run-to-run relative standard deviation it was derived from
    source: str  # one of SOURCES


@dataclass(frozen=True, slots=True)
class Step:
    """The latest change of a series beyond its threshold, by index into its points."""

    last_before: int
    first_after: int
    before: float
    after: float
    points_after: int

    @property
    def ratio(self) -> float:
        return self.after / self.before


@dataclass(frozen=True, slots=True)
class Regression:
    """A benchmark whose latest step is a slowdown beyond its threshold."""

    benchmark: str
    machine: str
    good: str
    bad: str
    before: float
    after: float
    unit: str
    threshold: float
    spread: float | None
    threshold_source: str
    commits_after: int
    # The branch's first-parent commits after good up to bad (None: git cannot say), and
    # bad's subject and author: what names the culprit when good and bad are adjacent.
    commits: tuple[str, ...] | None = None
    bad_subject: str = ""
    bad_author: str = ""

    @property
    def ratio(self) -> float:
        return self.after / self.before

    @property
    def range(self) -> str:
        return f"{self.good[:8]}..{self.bad[:8]}"

    def as_json(self) -> dict:
        return {
            "benchmark": self.benchmark,
            "machine": self.machine,
            "good": self.good,
            "bad": self.bad,
            "range": self.range,
            "before": self.before,
            "after": self.after,
            "unit": self.unit,
            "before_text": human(self.before, self.unit),
            "after_text": human(self.after, self.unit),
            "ratio": self.ratio,
            "threshold": self.threshold,
            "spread": self.spread,
            "threshold_source": self.threshold_source,
            "commits_after": self.commits_after,
            "commits": None if self.commits is None else list(self.commits),
            "bad_subject": self.bad_subject,
            "bad_author": self.bad_author,
        }


def human(value: float, unit: str) -> str:
    """asv's rendering for seconds (``1.23ms``, ``197μs``); anything else, a ratio, as is."""
    if unit == "seconds":
        from asv.util import human_value

        return human_value(value, unit)
    return f"{value:.4g}"


# --- where the history is, in which order ---------------------------------------------


def default_results_dir(root: Path = ROOT) -> Path:
    """``results_dir`` of ``root/asv.conf.json``."""
    conf = discovery.read_asv_conf(root)
    return (discovery.conf_path(root).parent / conf.get("results_dir", "results")).resolve()


def commit_order(branch: str = "main", cwd: Path | None = None) -> list[str] | None:
    """``branch``'s commits oldest first along first parents, as asv orders its graphs, in
    the repository at ``cwd`` (default: this checkout); None where git cannot say (no
    repository, no such branch)."""
    proc = subprocess.run(
        ["git", "rev-list", "--first-parent", "--reverse", branch, "--"],
        cwd=cwd or ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    return proc.stdout.split() if proc.returncode == 0 and proc.stdout.strip() else None


def with_commits(
    found: Sequence[Regression], commits: Sequence[str] | None, cwd: Path | None = None
) -> list[Regression]:
    """``found`` with each step's first-parent commits (from ``commits``, the branch
    oldest first) and its ``bad`` commit's subject and author (from git at ``cwd``)."""
    index = {sha: i for i, sha in enumerate(commits or ())}
    bads = sorted({r.bad for r in found})
    proc = subprocess.run(
        ["git", "log", "--no-walk=unsorted", "--format=%H%x00%an%x00%s", *bads, "--"],
        cwd=cwd or ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    about = {}
    if bads and proc.returncode == 0:
        for line in proc.stdout.splitlines():
            sha, _, rest = line.partition("\0")
            author, _, subject = rest.partition("\0")
            about[sha] = (subject, author)
    out = []
    for r in found:
        lo, hi = index.get(r.good), index.get(r.bad)
        span = tuple(commits[lo + 1 : hi + 1]) if lo is not None and hi is not None else None
        subject, author = about.get(r.bad, ("", ""))
        out.append(replace(r, commits=span or None, bad_subject=subject, bad_author=author))
    return out


def latest_values(series: Iterable[Series], machine: str) -> list[dict]:
    """The newest stored value of each of ``series`` (one machine's), as ``--json`` writes
    it under ``latest``."""
    out = []
    for s in series:
        if s.points:
            p = s.points[-1]
            out.append(
                {
                    "benchmark": s.name,
                    "machine": machine,
                    "commit": p.commit,
                    "value": p.value,
                    "text": human(p.value, s.unit),
                }
            )
    return out


def load_calibration(path: Path, missing_ok: bool = True) -> dict[str, dict]:
    """The ``benchmarks`` table of a calibration file; ``{}`` for a missing one when
    ``missing_ok``. ValueError (naming the file) when it cannot be used."""
    try:
        data = json.loads(Path(path).read_text())
    except FileNotFoundError:
        if missing_ok:
            return {}
        raise ValueError(f"{path}: no such calibration file") from None
    except (OSError, ValueError) as err:
        raise ValueError(f"{path}: not a calibration file ({err})") from None
    table = data.get("benchmarks") if isinstance(data, dict) else None
    if not isinstance(table, dict):
        raise ValueError(f"{path}: not a calibration file (no 'benchmarks' table)")
    for name, entry in table.items():
        value = entry.get("threshold") if isinstance(entry, dict) else None
        if not isinstance(value, (int, float)) or not 0 <= value < 10:
            raise ValueError(f"{path}: {name}: 'threshold' must be a fraction, got {value!r}")
    return table


# --- deciding --------------------------------------------------------------------------


def history_spread(values: Sequence[float]) -> float | None:
    """Run-to-run relative sd of one commit's value, from consecutive commits' log ratios
    (robust: a step moves one difference, the median does not follow it)."""
    if len(values) < MIN_HISTORY:
        return None
    diffs = [math.log(b / a) for a, b in itertools.pairwise(values)]
    mid = statistics.median(diffs)
    return POLICY.robust_sd(statistics.median(abs(d - mid) for d in diffs)) / math.sqrt(2)


def samples_spread(points: Iterable[Point]) -> float | None:
    """Median over commits of the relative standard error of each commit's median."""
    from harness.measure.metrics import median_rsd

    rsd = [median_rsd(p.samples) for p in points if len(p.samples) > 2]
    rsd = [x for x in rsd if math.isfinite(x)]
    return statistics.median(rsd) if rsd else None


def noise_threshold(spread: float) -> float:
    """The smallest significant step between two levels of ``MIN_COMMITS`` commits each,
    one commit's relative spread being ``spread``."""
    return POLICY.significant(math.sqrt(2 / MIN_COMMITS) * spread)


def threshold_for(
    series: Series, calibration: Mapping[str, Mapping], floor: float = POLICY.floor
) -> Threshold:
    """The benchmark's threshold, ``max(floor, calibration, noise_threshold(spread))``, and
    the term that set it (see the module's docstring)."""
    terms = [Threshold(floor, None, "floor")]
    entry = calibration.get(series.combination)
    if entry is not None:
        terms.append(Threshold(float(entry["threshold"]), entry.get("spread"), "calibration"))
    for source, spread in (
        ("history", history_spread([p.value for p in series.points])),
        ("samples", samples_spread(series.points)),
    ):
        if spread is not None:
            terms.append(Threshold(noise_threshold(spread), spread, source))
            break
    return max(terms, key=lambda t: t.value)  # a tie goes to the earlier term


def latest_step(
    values: Sequence[float],
    weights: Sequence[float | None] | None,
    threshold: float,
    min_commits: int = MIN_COMMITS,
) -> Step | None:
    """The latest change beyond ``threshold`` (either way) in asv's piecewise-constant fit
    of ``values``, once short segments and sub-threshold changes are merged away."""
    from asv.step_detect import solve_potts_approx, weighted_median

    if len(values) < 2:
        return None
    w = _fill_weights(weights, len(values))
    # One break costs what a change of `threshold` at one commit explains (the fit's cost
    # is the weighted L1 distance, weights normalised to 1): every change that could count
    # gets a break, and the merging below removes those that do not.
    gamma = max(threshold, 1e-6) * statistics.median(values)
    right, _, _ = solve_potts_approx(list(values), w, gamma=gamma)
    segs = [[left, r] for left, r in zip([0, *right[:-1]], right, strict=True)]

    def level(seg: list[int]) -> float:
        return weighted_median(values[seg[0] : seg[1]], w[seg[0] : seg[1]])

    def merge(i: int) -> None:  # segment i and i + 1 become one
        segs[i : i + 2] = [[segs[i][0], segs[i + 1][1]]]

    limit = math.log1p(threshold)
    while len(segs) > 1:
        levels = [level(s) for s in segs]
        short = [i for i, s in enumerate(segs) if s[1] - s[0] < min_commits]
        if short:
            i = short[0]
            if i == 0:
                merge(0)
            elif i == len(segs) - 1:
                merge(i - 1)
            else:
                closer_left = abs(math.log(levels[i] / levels[i - 1])) <= abs(
                    math.log(levels[i + 1] / levels[i])
                )
                merge(i - 1 if closer_left else i)
            continue
        changes = [abs(math.log(b / a)) for a, b in itertools.pairwise(levels)]
        i = min(range(len(changes)), key=changes.__getitem__)
        if changes[i] > limit:
            break
        merge(i)
    if len(segs) < 2:
        return None
    before, after = segs[-2], segs[-1]
    return Step(before[1] - 1, after[0], level(before), level(after), after[1] - after[0])


def _fill_weights(weights: Sequence[float | None] | None, n: int) -> list[float]:
    """asv's rule in ``detect_steps``: a missing weight is the median one, normalised."""
    if weights is None:
        return [1.0] * n
    valid = [x for x in weights if x is not None and math.isfinite(x) and x > 0]
    mid = statistics.median(valid) if valid else 1.0
    return [(x if x is not None and math.isfinite(x) and x > 0 else mid) / mid for x in weights]


def detect(
    series: Iterable[Series],
    machine: str,
    calibration: Mapping[str, Mapping] | None = None,
    floor: float = POLICY.floor,
    min_commits: int = MIN_COMMITS,
) -> list[Regression]:
    """The regressions among ``series`` of ``machine``."""
    found = []
    for s in series:
        limit = threshold_for(s, calibration or {}, floor)
        values = [p.value for p in s.points]
        step = latest_step(values, [p.weight for p in s.points], limit.value, min_commits)
        if step is None or step.ratio <= 1 + limit.value:
            continue
        found.append(
            Regression(
                benchmark=s.name,
                machine=machine,
                good=s.points[step.last_before].commit,
                bad=s.points[step.first_after].commit,
                before=step.before,
                after=step.after,
                unit=s.unit,
                threshold=limit.value,
                spread=limit.spread,
                threshold_source=limit.source,
                commits_after=step.points_after,
            )
        )
    return found


def select(series: Iterable[Series], bench: str | None) -> list[Series]:
    """The series whose asv name ``bench`` matches (``re.search``, as asv's ``-b``)."""
    if bench is None:
        return list(series)
    pattern = re.compile(bench)
    return [s for s in series if pattern.search(s.name)]


def find(
    results_dir: Path,
    machine: str,
    commits: Sequence[str] | None = None,
    *,
    bench: str | None = None,
    calibration: Mapping[str, Mapping] | None = None,
    floor: float = POLICY.floor,
    min_commits: int = MIN_COMMITS,
) -> list[Regression]:
    """The benchmarks of ``machine`` whose latest step in ``results_dir`` is a slowdown.

    ``commits``: the branch, oldest first (``commit_order()``); None orders by the results'
    dates. ``calibration``: the ``benchmarks`` table of the machine's calibration file
    (None: ``calibration/<machine>.json`` where it exists)."""
    if calibration is None:
        from harness.gate.revisions import calibration_path

        calibration = load_calibration(calibration_path(machine))
    series, _ = history_series.load_history(results_dir, machine, commits)
    return detect(select(series, bench), machine, calibration, floor, min_commits)


# --- rendering -------------------------------------------------------------------------


def _cell(text: str) -> str:
    return " ".join(text.splitlines()).replace("`", "'").replace("|", "\\|")


def render_markdown(
    regressions: Sequence[Regression],
    checked: int | None = None,
    machines: Sequence[str] = (),
    branch: str = "main",
) -> str:
    """The report: a table of the regressions, or a line saying there are none."""
    scope = ""
    if checked is not None:
        on = f" on {', '.join(machines)}" if machines else ""
        scope = f" ({checked} benchmarks checked{on})"
    title = f"## Performance regressions on {branch}\n\n"
    if not regressions:
        return f"{title}No benchmark's latest step is a slowdown beyond its noise{scope}.\n"
    rows = [
        f"{len(regressions)} benchmark(s) whose latest step is a slowdown beyond the "
        f"benchmark's noise threshold{scope}.",
        "",
        "| benchmark | machine | commits | before → after | ratio | threshold |",
        "|---|---|---|---|---|---|",
    ]
    for r in sorted(regressions, key=lambda r: (-r.ratio, r.benchmark, r.machine)):
        rows.append(
            f"| `{_cell(r.benchmark)}` | {_cell(r.machine)} | {r.range} "
            f"| {human(r.before, r.unit)} → {human(r.after, r.unit)} | {r.ratio:.3f} "
            f"| {r.threshold:.1%} ({r.threshold_source}) |"
        )
    rows += [
        "",
        "`good..bad`: the last measured commit before the step and the first after it; "
        "`nox -s bisect -- GOOD BAD -b REGEX` finds the culprit between them.",
    ]
    return title + "\n".join(rows) + "\n"


JSON_VERSION = 2


def render_json(regressions: Sequence[Regression], latest: Sequence[dict] = ()) -> str:
    """``--json``'s document (see the module's docstring)."""
    doc = {
        "version": JSON_VERSION,
        "regressions": [r.as_json() for r in regressions],
        "latest": list(latest),
    }
    return json.dumps(doc, indent=1) + "\n"


# --- command line ----------------------------------------------------------------------


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
        from harness.gate.revisions import calibration_path

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
    markdown = render_markdown(found, checked, chosen, args.branch)
    if unread:
        markdown += f"\n{len(unread)} results file(s) could not be read and were left out:\n\n"
        markdown += "".join(f"- `{_cell(line)}`\n" for line in unread)
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
