"""The gate self-test's command line: its options, and the checks that refuse bad input
by name (exit 2) before any GPU work."""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from harness.cli import fraction, gate_options, gpu_list, positive_int
from harness.gate import inject
from harness.gate import run as gate


def parser(description: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="nox -s gate_selftest --",
        description=description,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--n", type=positive_int, default=20, help="comparisons of each kind")
    p.add_argument(
        "--slowdown",
        type=fraction,
        nargs="+",
        default=[0.02],
        metavar="FRACTION",
        help="injected, in (0, 1): 0.02 = 2%%. Several (0.02 0.01) share every worker: one "
        "injected side per slowdown beside base and head, one record each",
    )
    gate_options(p, "how the gate measures (its default for a kernel change: paired)")
    p.add_argument(
        "--rounds",
        type=positive_int,
        default=1,
        help="worker processes (paired) or rounds (process) per comparison",
    )
    p.add_argument(
        "--threshold",
        type=fraction,
        nargs="+",
        default=None,
        metavar="FRACTION",
        help="the gate's floor for this test, one for all or one per --slowdown (default: "
        "the gate's own for --method); each must sit below its slowdown to detect it",
    )
    p.add_argument(
        "--gpus",
        type=gpu_list,
        default=None,
        help="'all' or indices like 0,1: split the benchmarks over these GPUs",
    )
    p.add_argument(
        "--json",
        type=Path,
        nargs="+",
        default=None,
        metavar="FILE",
        help="also write the tally here, one file per --slowdown",
    )
    p.add_argument(
        "--calibration",
        type=Path,
        default=None,
        help="per-benchmark thresholds, as the gate applies them "
        "(default: calibration/<machine>.json when present; --threshold stays the floor)",
    )
    p.add_argument(
        "--inject-cycles",
        type=Path,
        action="append",
        default=None,
        metavar="FILE",
        help="the injected delay's cycles per benchmark from an earlier self-test (its "
        ".gate/selftest/inject-cycles*.json), one file per --slowdown: set them instead "
        "of calibrating",
    )
    p.add_argument(
        "--resume",
        type=Path,
        default=None,
        metavar="FILE",
        help="checkpoint: written after every iteration; run again with the same FILE and "
        "settings to add only the missing iterations (an n = 20 run over several sessions)",
    )
    p.add_argument(
        "--stop-after",
        type=positive_int,
        default=None,
        metavar="SECONDS",
        help="start no iteration that would end past this many seconds (judged by the "
        "last one that did not calibrate the delays); with --resume the rest runs next time",
    )
    return p


def parse(argv: list[str] | None, description: str) -> argparse.Namespace:
    """The parsed options, with ``thresholds`` (one per slowdown) and ``floors`` (the
    caller's own floor per slowdown, None where the gate's default applies) added."""
    p = parser(description)
    args = p.parse_args(argv)
    slowdowns = args.slowdown
    twice = sorted({s for s in slowdowns if slowdowns.count(s) > 1})
    if twice:
        p.error(f"--slowdown={twice[0]}: given twice; give each slowdown once")
    given = args.threshold
    if given is not None and len(given) not in (1, len(slowdowns)):
        p.error(
            f"--threshold: give one, or one per --slowdown ({len(slowdowns)}), got {len(given)}"
        )
    args.floors = (
        [None] * len(slowdowns) if given is None else given * (len(slowdowns) // len(given))
    )
    args.thresholds = [gate.THRESHOLDS[args.method] if f is None else f for f in args.floors]
    for slowdown, threshold in zip(slowdowns, args.thresholds, strict=True):
        if threshold >= slowdown:
            p.error(
                f"--slowdown={slowdown}: must exceed the threshold ({threshold}) to be "
                "detectable; lower --threshold or raise --slowdown"
            )
    if args.json is not None and len(args.json) != len(slowdowns):
        p.error(f"--json: one file per --slowdown ({len(slowdowns)}), got {len(args.json)}")
    if args.calibration is not None and not args.calibration.is_file():
        p.error(f"--calibration={args.calibration}: no such file")
    args.cycles_files = {}  # slowdown -> the --inject-cycles file that gives its cycles
    if args.inject_cycles is not None:
        found = inject.cycles_files(p, args.inject_cycles, slowdowns)
        args.cycles_files = {f: path.resolve() for f, (path, _) in found.items()}
    return args


@dataclass(frozen=True, slots=True)
class Arm:
    """One injected slowdown: the side that carries it, and the gate's floor and
    per-benchmark thresholds (calibration) its comparisons, A/A included, are decided at."""

    side: str
    slowdown: float
    threshold: float
    thresholds: Mapping[str, float] | None = None


def arm_side(index: int, slowdown: float) -> str:
    """The injected side of the ``index``-th slowdown."""
    return "injected" if index == 0 else f"injected@{slowdown:g}"


def one_or_all(values: list):
    """A checkpoint's setting of a list option: its one value, or the list."""
    return values[0] if len(values) == 1 else list(values)
