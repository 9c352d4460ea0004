"""Regressions on main: every benchmark (per parameter combination, per machine) whose
latest step in the stored asv history is a slowdown beyond that benchmark's own noise.

    python -m harness.suite.regressions [--results DIR] [--machine NAME ...] [--branch main]
        [-b REGEX] [--markdown FILE] [--json FILE] [--calibration FILE] [--fail-on-regression]
    nox -s regressions -- ...

It reads asv's results files (``asv.results``) and fits each benchmark's per-commit
values (asv's medians, weighted as ``asv publish`` weights them), in the branch's
first-parent order (``git rev-list --first-parent``; by the results' dates where git
cannot say), with asv's step detection: the Potts solver behind ``detect_steps``
(``asv.step_detect.solve_potts_approx``, the piecewise-constant fit of asv's graphs and
regressions.json).

What changes from ``asv publish`` is the threshold: asv applies one flat factor
(``regressions_thresholds``, 5%), too coarse for a 4096^3 GEMM that repeats to 0.3% and
too fine for a 128^3 one that wanders by several percent. Here each benchmark's threshold
comes from its own run-to-run noise, with the gate's rule (``harness.gate.calibrate``): a
shift counts when it clears ``(Z_ALPHA + Z_POWER) * sqrt(2) * spread`` (two runs' medians
apart at the gate's significance and 90% power), never below the gate's floor
(``harness.gate.decide.DEFAULT_THRESHOLD``). ``spread``, the relative standard deviation
of one run's median, comes from the first source that has it:

1. ``calibration``: the machine's calibration file (``nox -s calibrate``), whose threshold
   is taken as it stands; it was measured on one commit, run after run, so it is the noise
   alone. Its names are the gate's (``gemm.Stage(4096x4096x4096, 128, 3, f16)``) and cover
   every track of that combination.
2. ``history``: the stored history itself, as the median absolute deviation of the log
   ratios of consecutive commits' values (``1.4826 * MAD / sqrt(2)``). Each commit is its
   own run, so these differences hold exactly the run-to-run noise, and a median ignores
   the few differences that straddle a real step, so the steps being looked for do not
   inflate the threshold that judges them. Needs ``MIN_HISTORY`` commits.
3. ``samples``: a short history falls back to the spread within runs (the median over
   commits of the median's relative standard error of each commit's samples). It misses
   drift between runs, so it is the weakest source; the floor still applies.
4. ``floor``: no samples either (plain-number tracks): the floor alone.

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

Output: markdown on stdout (and ``--markdown FILE``), and with ``--json FILE`` a list of
objects, one per regression::

    {"benchmark": "gemm.Stage.track_latency('4096x4096x4096', 128, 3, 'f16')",
     "machine": "h200", "good": "<40 hex>", "bad": "<40 hex>", "range": "1a2b3c4d..5e6f7a8b",
     "before": 0.00123, "after": 0.00141, "unit": "seconds", "before_text": "1.23ms",
     "after_text": "1.41ms", "ratio": 1.146, "threshold": 0.02, "spread": 0.003,
     "threshold_source": "calibration", "commits_after": 5}

``good`` is the last measured commit before the step and ``bad`` the first after it, so
``git log good..bad`` holds the culprit; benchmark plus ``good..bad`` identifies a step
(``harness.suite.announce`` keys its issues on it). Exit 0 when the report was made,
found or not (1 with ``--fail-on-regression`` when something regressed), 2 on bad input.
"""

from __future__ import annotations

import argparse
import ast
import itertools
import json
import math
import re
import statistics
import subprocess
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from harness.cli import EXIT_FAILURE, EXIT_OK, EXIT_REGRESSION, fraction, output_file, regex
from harness.gate.calibrate import Z_ALPHA, Z_POWER
from harness.gate.decide import DEFAULT_THRESHOLD
from harness.suite import discovery, result_files

ROOT = Path(__file__).resolve().parent.parent.parent
MIN_HISTORY = 8  # commits before the history's own spread is trusted (7 differences)
MIN_COMMITS = 2  # a segment of the fit must hold this many commits to count as a level
# A normal's sigma from a median absolute deviation.
MAD_TO_SIGMA = 1.4826
SOURCES = ("calibration", "history", "samples", "floor")


class InputError(ValueError):
    """A command-line input that cannot be used; the message names the argument."""


@dataclass(frozen=True, slots=True)
class Point:
    """One commit's stored result of one benchmark."""

    commit: str
    value: float  # asv's value: the median of the samples for this suite's tracks
    weight: float | None  # asv's data-point weight (2 / width of the 99% CI)
    samples: tuple[float, ...] = ()


@dataclass(frozen=True, slots=True)
class Series:
    """One benchmark's history on one machine, measured commits in branch order."""

    key: str  # asv's benchmark: gemm.Stage.track_latency
    params: tuple[str, ...]  # asv's stored parameter values (reprs): ("'4096x4096x4096'", ...)
    unit: str
    points: tuple[Point, ...]

    @property
    def name(self) -> str:
        """asv's name, as ``-b`` and ``asv publish`` give it."""
        return f"{self.key}({', '.join(self.params)})" if self.params else self.key

    @property
    def combination(self) -> str:
        """The gate's (and the calibration file's) name of this parameter combination."""
        family = self.key.rsplit(".", 1)[0]
        return discovery.combination_name(family, tuple(_literal(p) for p in self.params))


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
        }


def _literal(text: str):
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return text


def human(value: float, unit: str) -> str:
    """asv's rendering for seconds (``1.23ms``, ``197μs``); anything else, a ratio, as is."""
    if unit == "seconds":
        from asv.util import human_value

        return human_value(value, unit)
    return f"{value:.4g}"


# --- reading the stored history ------------------------------------------------------


def default_results_dir(root: Path = ROOT) -> Path:
    """``results_dir`` of ``root/asv.conf.json``."""
    conf = discovery.read_asv_conf(root)
    return (discovery.conf_path(root).parent / conf.get("results_dir", "results")).resolve()


def machines(results_dir: Path) -> list[str]:
    """The asv machines with a folder (and its machine.json) under ``results_dir``."""
    return sorted(p.parent.name for p in Path(results_dir).glob("*/machine.json"))


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


def _units(results_dir: Path) -> dict[str, str]:
    """``{benchmark: unit}`` from the benchmarks.json asv keeps beside the machines."""
    try:
        data = json.loads((Path(results_dir) / "benchmarks.json").read_text())
    except (OSError, ValueError):
        return {}
    if not isinstance(data, dict):
        return {}
    return {k: str(v.get("unit", "")) for k, v in data.items() if isinstance(v, dict)}


def _weight(stats) -> float | None:
    from asv import _stats

    return _stats.get_weight(stats)


@dataclass(frozen=True, slots=True)
class History:
    """One machine's stored history as read: its series, how many stored commits the
    branch does not hold, and what was left out unread (``result_files``)."""

    series: list[Series]
    ignored: int
    failed: tuple[result_files.Failure, ...]
    damaged: tuple[result_files.Damaged, ...]


def load_history(
    results_dir: Path, machine: str, commits: Sequence[str] | None = None
) -> tuple[list[Series], int]:
    """Every benchmark's series on ``machine``, and how many stored commits were left out
    because ``commits`` (the branch, oldest first) does not hold them (``read_history``)."""
    read = read_history(results_dir, machine, commits)
    return read.series, read.ignored


def read_history(results_dir: Path, machine: str, commits: Sequence[str] | None = None) -> History:
    """Every benchmark's series on ``machine``, in the order of ``commits`` (the branch,
    oldest first; without it the results' own dates). A failed or skipped combination is
    a gap; a commit stored as failed and a damaged file are left out, and listed."""
    files = result_files.read_machine(results_dir, machine)
    runs = list(files.runs)
    if commits is None:
        runs.sort(key=lambda r: (r.date or 0, r.commit_hash))
        order = {}
        for r in runs:
            order.setdefault(r.commit_hash, len(order))
    else:
        order = {sha: i for i, sha in enumerate(commits)}
    ignored = {r.commit_hash for r in runs if r.commit_hash not in order}
    # (key, params) -> {position: (started_at, Point)}; of two environments' results for
    # one commit, the newer run wins.
    table: dict[tuple[str, tuple[str, ...]], dict[int, tuple[float, Point]]] = {}
    for run in runs:
        pos = order.get(run.commit_hash)
        if pos is None:
            continue
        for key in run.get_all_result_keys():
            params = run.get_result_params(key)
            combos = list(itertools.product(*params)) if params else [()]
            values = run.get_result_value(key, params)
            stats = run.get_result_stats(key, params)
            samples = run.get_result_samples(key, params)
            started = run.started_at.get(key) or 0
            for j, combo in enumerate(combos):
                value = values[j]
                if not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
                    continue  # failed (None), skipped (NaN): no measurement
                got = [float(x) for x in (samples[j] or []) if math.isfinite(x)]
                point = Point(run.commit_hash, float(value), _weight(stats[j]), tuple(got))
                slot = table.setdefault((key, tuple(combo)), {})
                if pos not in slot or slot[pos][0] <= started:
                    slot[pos] = (started, point)
    units = _units(results_dir)
    series = [
        Series(key, params, units.get(key, ""), tuple(slot[p][1] for p in sorted(slot)))
        for (key, params), slot in table.items()
    ]
    series.sort(key=lambda s: s.name)
    failed = sorted(files.failed, key=lambda f: (order.get(f.sha, len(order)), f.sha))
    return History(series, len(ignored), tuple(failed), files.damaged)


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
    return MAD_TO_SIGMA * statistics.median(abs(d - mid) for d in diffs) / math.sqrt(2)


def samples_spread(points: Iterable[Point]) -> float | None:
    """Median over commits of the relative standard error of each commit's median."""
    from harness.measure.metrics import median_rsd

    rsd = [median_rsd(p.samples) for p in points if len(p.samples) > 2]
    rsd = [x for x in rsd if math.isfinite(x)]
    return statistics.median(rsd) if rsd else None


def threshold_for(
    series: Series, calibration: Mapping[str, Mapping], floor: float = DEFAULT_THRESHOLD
) -> Threshold:
    """The benchmark's threshold and where it came from (see the module's docstring)."""
    entry = calibration.get(series.combination)
    if entry is not None:
        spread = entry.get("spread")
        return Threshold(float(entry["threshold"]), spread, "calibration")
    values = [p.value for p in series.points]
    for source, spread in (
        ("history", history_spread(values)),
        ("samples", samples_spread(series.points)),
    ):
        if spread is not None:
            mde = (Z_ALPHA + Z_POWER) * math.sqrt(2) * spread
            return Threshold(max(floor, mde), spread, source)
    return Threshold(floor, None, "floor")


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
    floor: float = DEFAULT_THRESHOLD,
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
    floor: float = DEFAULT_THRESHOLD,
    min_commits: int = MIN_COMMITS,
) -> list[Regression]:
    """The benchmarks of ``machine`` whose latest step in ``results_dir`` is a slowdown.

    ``commits``: the branch, oldest first (``commit_order()``); None orders by the results'
    dates. ``calibration``: the ``benchmarks`` table of the machine's calibration file
    (None: ``calibration/<machine>.json`` where it exists)."""
    if calibration is None:
        from harness.gate.revisions import calibration_path

        calibration = load_calibration(calibration_path(machine))
    series, _ = load_history(results_dir, machine, commits)
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


def render_json(regressions: Sequence[Regression]) -> str:
    return json.dumps([r.as_json() for r in regressions], indent=1) + "\n"


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
        default=DEFAULT_THRESHOLD,
        help=f"smallest threshold (default {DEFAULT_THRESHOLD})",
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
    known = machines(results)
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
        read = read_history(results, name, commits)
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
    found = []
    for name, series in histories.items():
        found += detect(series, name, tables.get(name), args.floor, args.min_commits)
    checked = sum(len(s) for s in histories.values())
    markdown = render_markdown(found, checked, chosen, args.branch)
    if unread:
        markdown += f"\n{len(unread)} results file(s) could not be read and were left out:\n\n"
        markdown += "".join(f"- `{_cell(line)}`\n" for line in unread)
    print(markdown, end="")
    if args.markdown:
        args.markdown.write_text(markdown)
    if args.json:
        args.json.write_text(render_json(found))
    if unread:
        return EXIT_FAILURE
    return EXIT_REGRESSION if found and args.fail_on_regression else EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
