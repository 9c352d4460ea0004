"""Where the rules' pick ran slower than another config timed beside it.

    python3 -m benchmarks.misses                                  # reports/*.jsonl
    python3 -m benchmarks.misses --gpu "NVIDIA H200" --min-gain 0.05
    python3 -m benchmarks.misses --records reports/two_byte_h200.jsonl --all
    python3 -m benchmarks.misses --gpu "NVIDIA H200" --by-change    # changes, over shapes

Reads sweeps recorded by ``python3 -m benchmarks.bench_gemm --jsonl`` (each run a meta
line, then its rows, tagged with the run's id). For each run, each shape it timed, and
the GPU it ran on (the meta's name and SM count): the config
``kernels.tuned.pick_config`` chooses today (the tuned table's row, else the heuristic)
and, where the run timed it, its kernel time against the fastest config timed in the same
run (times from two runs differ by a few percent alone, so a comparison never spans two).
A line per shape where another config beat the pick by ``--min-gain`` or more, the
largest gains first; then on how many shapes the pick was timed, and on how many it was
not (a panel drawn before a rule changed the pick, or one that timed other configs).

``--by-change`` turns the listing around: for each change to the pick (another tile,
options added or dropped, in a layout, under a wave of blocks or not) that runs timed
beside the pick ``--min-count`` times or more, the median gain over those comparisons and
its range. A change with a high median and a narrow range is a lead for a rule; none
above 0 means the records favour no single change to the rules as they stand.

A rule read off these lines is a lead, not a result: the repository's convention is to
draw fresh shapes where the rule would change the pick, commit them, and time them.

Records are read as ``bench_gemm --replay`` reads them: a torn line (an interrupted write)
is skipped with a note; a file that is not a sweep record is refused when named, and
skipped among the default ``reports/*.jsonl`` (the tuning logs there).

Exit status: 0 whether or not there are misses; 2 bad input (a file that is missing or
not a sweep record, a bad option).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import warnings
from dataclasses import dataclass
from pathlib import Path

from harness.cli import fraction, positive_int
from harness.report.records import RecordError, read_runs
from kernels import GemmConfig, GemmShape
from kernels.schedules import grid_blocks
from kernels.tuned import UntunedGpuWarning, pick_config

PROG = "python3 -m benchmarks.misses"
ROOT = Path(__file__).resolve().parent.parent
DEFAULT_RECORDS = sorted((ROOT / "reports").glob("*.jsonl"))


@dataclass(frozen=True, slots=True)
class Sweep:
    """One shape as one run timed it: where, on which GPU, and each config's kernel times
    (ms; the rows that ran and were correct)."""

    record: str
    gpu: str
    sms: int
    shape: GemmShape
    times: dict[str, list[float]]


@dataclass(frozen=True, slots=True)
class Miss:
    sweep: Sweep
    pick: str
    pick_ms: float
    best: str
    best_ms: float

    @property
    def gain(self) -> float:
        """The pick's time over the fastest config's, less one."""
        return self.pick_ms / self.best_ms - 1


def read_sweeps(path: Path) -> tuple[list[Sweep], list[str]]:
    """The sweeps of one ``--jsonl`` file as the project reads records back
    (``harness.report.records.read_runs``: torn lines skipped with a note, a row off the
    schema refused with its line as RecordError), and its notes. A run whose meta line
    lacks the GPU's name or SM count is left out, and so is a row that failed or gave a
    wrong result."""
    try:
        runs, notes = read_runs(path)
    except OSError as err:
        raise RecordError(f"{path}: cannot read ({err.strerror})") from None
    sweeps = []
    for run in runs:
        gpu, sms = run.meta.get("gpu"), run.meta.get("sm_count")
        if not gpu or not sms:
            continue
        times: dict[GemmShape, dict[str, list[float]]] = {}
        for row in run.rows:
            if row.failed or row.tilelang_ms is None or (row.check and not row.check.ok):
                continue
            times.setdefault(row.shape, {}).setdefault(row.config.id, []).append(row.tilelang_ms)
        sweeps += [Sweep(path.name, gpu, sms, shape, t) for shape, t in times.items()]
    return sweeps, notes


def pick_of(sweep: Sweep) -> GemmConfig:
    """The config ``pick_config`` chooses today for ``sweep``'s shape and GPU."""
    with warnings.catch_warnings():
        # A GPU the table has no row for takes the heuristic: what is asked here.
        warnings.simplefilter("ignore", UntunedGpuWarning)
        return pick_config(sweep.shape, sweep.gpu, sweep.sms)


def miss_of(sweep: Sweep) -> Miss | None:
    """The pick against the fastest config of ``sweep``; None where the run did not time
    the pick."""
    pick = pick_of(sweep).id
    if pick not in sweep.times:
        return None
    median = {config: statistics.median(ms) for config, ms in sweep.times.items()}
    best = min(median, key=median.__getitem__)
    return Miss(sweep, pick, median[pick], best, median[best])


@dataclass(frozen=True, slots=True)
class Change:
    """What another config timed beside the pick changes in it, and where: the layout,
    whether the pick's grid is under one wave of the GPU, the tile (``b128x192x64``, or
    ``b128x192x64->b192x112x64``) and the options of the config's id it adds and drops
    (``a``, ``mb``, ``w8``, ``t384``, ``s3``...)."""

    layout: str
    under_a_wave: bool
    tile: str
    added: tuple[str, ...]
    dropped: tuple[str, ...]

    @classmethod
    def of(cls, sweep: Sweep, pick: GemmConfig, other: str) -> Change:
        pick_tile, *pick_options = pick.id.split("_")
        tile, *options = other.split("_")
        return cls(
            sweep.shape.layout,
            grid_blocks(sweep.shape, pick) < sweep.sms,
            pick_tile if tile == pick_tile else f"{pick_tile}->{tile}",
            tuple(sorted(set(options) - set(pick_options))),
            tuple(sorted(set(pick_options) - set(options))),
        )

    def label(self) -> str:
        where = "under a wave" if self.under_a_wave else "a wave or more"
        edits = [f"+{o}" for o in self.added] + [f"-{o}" for o in self.dropped]
        return (
            f"{self.layout} {where:<14} {self.tile}: {' '.join(edits) or '(options as the pick)'}"
        )


def by_change(sweeps: list[Sweep], min_count: int) -> list[tuple[Change, list[float]]]:
    """Each ``Change`` to the pick that runs timed beside it at least ``min_count``
    times, with the gain of each time (the pick's time over the other config's, less
    one: above 0 the change ran faster), the largest median gain first. Over the records
    this says which change to the rules the records favour, and how steadily."""
    gains: dict[Change, list[float]] = {}
    for sweep in sweeps:
        pick = pick_of(sweep)
        if pick.id not in sweep.times:
            continue
        median = {config: statistics.median(ms) for config, ms in sweep.times.items()}
        for other, ms in median.items():
            if other != pick.id:
                change = Change.of(sweep, pick, other)
                gains.setdefault(change, []).append(median[pick.id] / ms - 1)
    found = [(c, g) for c, g in gains.items() if len(g) >= min_count]
    return sorted(found, key=lambda cg: -statistics.median(cg[1]))


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=PROG, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument(
        "--records",
        type=Path,
        nargs="+",
        default=DEFAULT_RECORDS,
        metavar="JSONL",
        help="bench_gemm --jsonl records to read (default: reports/*.jsonl)",
    )
    p.add_argument("--gpu", metavar="NAME", help="only runs on this GPU, e.g. 'NVIDIA H200'")
    p.add_argument(
        "--min-gain",
        type=fraction,
        default=0.03,
        help="list a shape where another config ran this much faster than the pick "
        "(0.03: the pick's time 3%% over its)",
    )
    p.add_argument(
        "--all", action="store_true", help="list every shape whose pick was timed, misses or not"
    )
    p.add_argument(
        "--by-change",
        action="store_true",
        help="instead of shapes, each change to the pick (tile, options) timed beside it "
        "--min-count times or more: its median gain and range over those comparisons",
    )
    p.add_argument(
        "--min-count",
        type=positive_int,
        default=4,
        help="with --by-change: comparisons a change needs to be listed",
    )
    return p


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    sweeps: list[Sweep] = []
    skipped = 0
    for path in args.records:
        try:
            found, notes = read_sweeps(path)
        except RecordError as err:
            if args.records is DEFAULT_RECORDS:  # reports/ holds tuning logs too
                skipped += 1
                continue
            parser.error(f"--records: {err}")
        sweeps += found
        for note in notes:
            print(note, file=sys.stderr)
    if args.gpu:
        gpus = sorted({s.gpu for s in sweeps})
        sweeps = [s for s in sweeps if s.gpu == args.gpu]
        if not sweeps:
            parser.error(f"--gpu {args.gpu!r}: no run in the records was on it; they hold {gpus}")
    if args.by_change:
        found = by_change(sweeps, args.min_count)
        for change, gains in found:
            print(
                f"{statistics.median(gains):+7.1%} median  {min(gains):+7.1%}..{max(gains):+.1%}"
                f"  {len(gains):>3} comparisons  {change.label()}"
            )
        print(
            f"{len(found)} changes to the pick timed beside it {args.min_count} times or more, "
            f"over {len(sweeps)} shapes as runs timed them; a gain above 0: the change ran faster"
        )
        return 0
    timed = [m for m in map(miss_of, sweeps) if m is not None]
    shown = [m for m in timed if args.all or m.gain >= args.min_gain]
    shown.sort(key=lambda m: -m.gain)
    for m in shown:
        s = m.sweep
        print(
            f"{m.gain:+7.1%}  {s.shape.id:<26} {s.gpu}  pick {m.pick} {m.pick_ms * 1e3:.1f} us"
            f"  best {m.best} {m.best_ms * 1e3:.1f} us  ({s.record})"
        )
    misses = sum(m.gain >= args.min_gain for m in timed)
    print(
        f"{len(sweeps)} shapes as runs timed them, in {len(args.records) - skipped} records: "
        f"the pick timed on {len(timed)}, another config {args.min_gain:.0%} or more faster "
        f"on {misses}; the pick not timed on {len(sweeps) - len(timed)}"
        + (f"; {skipped} files not bench_gemm sweeps (tuning logs) skipped" if skipped else "")
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
