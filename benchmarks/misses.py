"""Where the rules' pick ran slower than another config timed beside it.

    python3 -m benchmarks.misses                                  # reports/*.jsonl
    python3 -m benchmarks.misses --gpu "NVIDIA H200" --min-gain 0.05
    python3 -m benchmarks.misses --records reports/two_byte_h200.jsonl --all

Reads sweeps recorded by ``python3 -m benchmarks.bench_gemm --jsonl`` (each run a meta
line, then its rows, tagged with the run's id). For each run, each shape it timed, and
the GPU it ran on (the meta's name and SM count): the config
``kernels.tuned.pick_config`` chooses today (the tuned table's row, else the heuristic)
and, where the run timed it, its kernel time against the fastest config timed in the same
run (times from two runs differ by a few percent alone, so a comparison never spans two).
A line per shape where another config beat the pick by ``--min-gain`` or more, the
largest gains first; then on how many shapes the pick was timed, and on how many it was
not (a panel drawn before a rule changed the pick, or one that timed other configs).

A rule read off these lines is a lead, not a result: the repository's convention is to
draw fresh shapes where the rule would change the pick, commit them, and time them.

Exit status: 0 whether or not there are misses; 2 bad input (a file that is missing or
not JSON lines, a bad option).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import warnings
from dataclasses import dataclass
from pathlib import Path

from harness.cli import fraction
from kernels import GemmShape
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


def read_sweeps(path: Path) -> list[Sweep]:
    """The sweeps of one ``--jsonl`` file. Rows of a run with no meta line, or a meta line
    without the GPU's name or SM count, are left out (older tuning logs). ValueError naming
    the file and the line where a line is not JSON."""
    try:
        lines = path.read_text().splitlines()
    except OSError as err:
        raise ValueError(f"{path}: cannot read ({err.strerror})") from None
    metas: dict[str, dict] = {}
    rows: list[dict] = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            item = json.loads(line)
        except json.JSONDecodeError as err:
            raise ValueError(f"{path}:{number}: not JSON: {err.msg}") from None
        if not isinstance(item, dict):
            raise ValueError(f"{path}:{number}: must be a JSON object")
        if isinstance(item.get("meta"), dict):
            meta = item["meta"]
            if "run" in meta:
                metas[meta["run"]] = meta
        elif item.get("tilelang_ms") and item.get("correct", True) and not item.get("error"):
            rows.append(item)
    grouped: dict[tuple, dict[str, list[float]]] = {}
    for row in rows:
        meta = metas.get(row.get("run"))
        if meta is None or not meta.get("gpu") or not meta.get("sm_count"):
            continue
        try:
            shape = GemmShape(row["m"], row["n"], row["k"], row["dtype"], row["layout"])
        except (KeyError, ValueError):
            continue
        key = (row["run"], meta["gpu"], meta["sm_count"], shape)
        grouped.setdefault(key, {}).setdefault(row["config"], []).append(row["tilelang_ms"])
    return [
        Sweep(path.name, gpu, sms, shape, times) for (_, gpu, sms, shape), times in grouped.items()
    ]


def miss_of(sweep: Sweep) -> Miss | None:
    """The pick against the fastest config of ``sweep``; None where the run did not time
    the pick."""
    with warnings.catch_warnings():
        # A GPU the table has no row for takes the heuristic: what is asked here.
        warnings.simplefilter("ignore", UntunedGpuWarning)
        pick = pick_config(sweep.shape, sweep.gpu, sweep.sms).id
    if pick not in sweep.times:
        return None
    median = {config: statistics.median(ms) for config, ms in sweep.times.items()}
    best = min(median, key=median.__getitem__)
    return Miss(sweep, pick, median[pick], best, median[best])


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
    return p


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    sweeps: list[Sweep] = []
    for path in args.records:
        try:
            sweeps += read_sweeps(path)
        except ValueError as err:
            parser.error(f"--records: {err}")
    if args.gpu:
        sweeps = [s for s in sweeps if s.gpu == args.gpu]
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
        f"{len(sweeps)} shapes as runs timed them, in {len(args.records)} records: the pick "
        f"timed on {len(timed)}, another config {args.min_gain:.0%} or "
        f"more faster on {misses}; the pick not timed on {len(sweeps) - len(timed)}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
