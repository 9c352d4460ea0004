"""The panels that wait for a GPU, and running them in one go.

    python3 -m benchmarks.panels                          # every panel and its state
    python3 -m benchmarks.panels --pending                # the ones not yet timed here
    python3 -m benchmarks.panels --run random9 short_k9 random8_losers --budget 500

A panel is a shapes file ``reports/offtable_NAME_shapes.json`` whose ``about`` gives the
``python3 -m benchmarks.bench_gemm --shapes ... --jsonl ...`` command that times it, so
that a person can paste it onto a GPU host (``PANEL_COMMAND`` finds it; the tests check
that each one parses and names configs its shapes can run). A panel's state on a card
reads its record: ``todo`` where the record is absent, ``partial`` where it holds rows for
some of the file's shapes, ``done`` where it holds rows for all of them. A shape cut short
within its configs has rows too; ``--run`` times it again whole, as ``bench_gemm --resume``
does with a shape that no one run timed whole.

The record is the one its command names for the H200 (``..._h200.jsonl``, or
``<card>`` in its name); on another card it is ``reports/CARD/..._CARD.jsonl``, the way
the repository keeps its H100 records, so one card's rows never land in another's file.
``--card`` names the card to list for (without it: the GPU present, else h200). A record
that holds rows of shapes its panel's file does not list is another run's (a panel named
like an older sweep): the panel's state there is ``clash``, and ``--run`` refuses it.

``--run`` times the named panels in the order given, each by its own command with
``--resume`` (a panel cut short keeps its rows, and running it again times only what is
missing), each bounded by what is left of ``--budget`` seconds; a panel that would start
with less than ``--min-left`` seconds left is not started. A line says when each starts
and how it ended. Exit status: 0 every panel ran to its end; 1 one failed or was cut
short, or was not started for lack of time (its rows so far are kept); 2 bad input (an
unknown panel, a bad option, a panel whose file cannot be read, a clash); 3 no GPU for
``--run``.
A shapes file that cannot be read as a panel (damaged JSON, a command bench_gemm
refuses) gets a line on stderr naming it and why, and the list goes on without it.

An off-table list is a panel too: a shapes file whose ``about`` names no bench_gemm
command but says it is measured by ``python3 -m benchmarks.offtable --shapes`` or was
drawn by ``benchmarks.draw_shapes`` (the random lists). Its record is
``reports/offtable_NAME_h200.json`` beside it (``reports/CARD/offtable_NAME_CARD.json`` on
another card), and ``--run`` measures it by ``python3 -m benchmarks.offtable --resume
--shapes FILE --json RECORD --markdown RECORD.md``, the pick of each shape against
torch.matmul, as the report's off-table standing reads it.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import re
import shlex
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from harness.cli import positive_int

PROG = "python3 -m benchmarks.panels"
ROOT = Path(__file__).resolve().parent.parent
REPORTS = ROOT / "reports"
# The command in a panel's ``about``: up to a ';', a '(' or the end of the text.
PANEL_COMMAND = re.compile(r"python3 -m benchmarks\.bench_gemm ([^;(]+?)\.?(?:;|\(|$)")
# An off-table list's ``about``: measured by benchmarks.offtable, or drawn by draw_shapes.
OFFTABLE_LIST = re.compile(r"python3 -m benchmarks\.offtable --shapes|benchmarks\.draw_shapes")
HOME_CARD = "h200"  # the card the committed commands name their records for


@dataclass(frozen=True, slots=True)
class Panel:
    name: str  # offtable_NAME_shapes.json -> NAME
    path: Path
    args: tuple[str, ...]  # bench_gemm's arguments, as the file gives them (offtable: none)
    named: str  # the record on the H200, as the file names it (``--jsonl``, or by rule)
    shapes: frozenset[str]  # the file's shape ids
    module: str = "benchmarks.bench_gemm"  # what measures it: bench_gemm, or offtable

    def record(self, card: str) -> Path:
        """Where this panel's rows on ``card`` are kept."""
        name = self.named.replace("<card>", HOME_CARD)
        if card == HOME_CARD:
            return ROOT / name
        stem = Path(name).name.replace(f"_{HOME_CARD}.", f"_{card}.")
        return REPORTS / card / stem

    def recorded(self, card: str) -> set[str]:
        """The shapes the record on ``card`` holds rows for (torn lines skipped); none
        where there is no record."""
        path = self.record(card)
        if not path.exists():
            return set()
        shapes = (row.get("shape") for row in _record_rows(path))
        return {s for s in shapes if isinstance(s, str)}

    def timed(self, card: str) -> set[str]:
        """The file's shapes the record on ``card`` holds a row for, whether or not one
        run timed all of the shape's configs."""
        return self.recorded(card) & self.shapes

    def foreign(self, card: str) -> set[str]:
        """Shapes the record on ``card`` holds rows for that the file does not list: the
        record is another run's (a panel named like an older sweep), and ``--run`` would
        append to it and read that run's rows as its own."""
        return self.recorded(card) - self.shapes

    def state(self, card: str) -> str:
        if not self.record(card).exists():
            return "todo"
        recorded = self.recorded(card)
        if recorded - self.shapes:
            return "clash"
        return "done" if recorded >= self.shapes else "partial"

    def command(self, card: str) -> list[str]:
        """The measuring command's arguments on ``card``: its record there, and
        ``--resume``."""
        record = self.record(card)
        if self.module != "benchmarks.bench_gemm":
            markdown = record.with_suffix(".md")
            return ["--resume", "--shapes", shown(self.path), "--json", shown(record),
                    "--markdown", shown(markdown)]  # fmt: skip
        args = list(self.args)
        at = args.index("--jsonl")
        args[at + 1] = shown(record)
        if "--resume" not in args:
            args.append("--resume")
        return args


def _record_rows(path: Path) -> list[dict]:
    """A record's rows: bench_gemm's JSON lines (``read_jsonl``: a torn line skipped), or
    an off-table record's ``rows``; a damaged record reads as none."""
    from harness.report.records import RecordError, read_jsonl

    if path.suffix != ".json":
        try:
            return [row for _, row in read_jsonl(path)[0]]
        except RecordError:
            return []
    try:
        rows = json.loads(path.read_text()).get("rows", [])
    except (json.JSONDecodeError, AttributeError):
        return []
    return [r for r in rows if isinstance(r, dict)] if isinstance(rows, list) else []


def shown(path: Path) -> str:
    """``path`` from the repository's root where it lies under it, else whole."""
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)


def panel_name(path: Path) -> str | None:
    """The panel a shapes file's name makes it (``offtable_NAME_shapes.json`` -> NAME), None
    for any other name."""
    named = re.fullmatch(r"offtable_(.+)_shapes\.json", path.name)
    return named[1] if named else None


def find_panels(reports: Path = REPORTS, problems: list | None = None) -> list[Panel]:
    """Every panel among ``reports/offtable_*_shapes.json``, by name. A file that cannot
    be read as one (damaged JSON, shapes that fail their rules, a command bench_gemm
    refuses) is left out, with ``(name, why)`` added to ``problems``."""
    from benchmarks.bench_gemm import build_parser

    parser = build_parser()
    panels = []
    for path in sorted(reports.glob("offtable_*_shapes.json")):
        name = panel_name(path)
        try:
            panel = _read_panel(path, name, parser)
        except ValueError as err:
            if problems is not None:
                problems.append((name, str(err)))  # names the file
            continue
        if panel is not None:
            panels.append(panel)
    return panels


def _read_panel(path: Path, name: str, parser) -> Panel | None:
    """The panel ``path`` holds, None where its about names no timed command; ValueError
    where it cannot be read."""
    from benchmarks.offtable import load_shapes

    shapes = frozenset(s.shape.id for s in load_shapes(path))  # ValueError on bad input
    about = json.loads(path.read_text()).get("about", "")
    commands = [c for c in PANEL_COMMAND.findall(about) if "--shapes" in c]
    if not commands:
        if not OFFTABLE_LIST.search(about):
            return None
        record = path.parent / f"offtable_{name}_{HOME_CARD}.json"
        return Panel(name, path, (), str(record), shapes, "benchmarks.offtable")
    args = shlex.split(commands[0])
    said = io.StringIO()
    try:
        with contextlib.redirect_stderr(said):
            parsed = parser.parse_args(args)
    except SystemExit:
        why = said.getvalue().strip().splitlines()[-1:] or ["bench_gemm refuses it"]
        raise ValueError(f"{path}: its command does not parse: {why[0]}") from None
    if parsed.jsonl is None:
        return None
    return Panel(name, path, tuple(args), str(parsed.jsonl), shapes)


def card_of(gpu: str) -> str:
    """The card's short name as records carry it: ``NVIDIA H100 80GB HBM3`` -> ``h100``."""
    words = gpu.lower().removeprefix("nvidia ").split()
    return words[0] if words else gpu.lower()


def present_card() -> str | None:
    """The card here (``card_of``), or None without a GPU."""
    from harness.measure.device import cuda_available, gpu_name

    return card_of(gpu_name()) if cuda_available() else None


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=PROG, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--card", help="the card whose records to read and write, e.g. h100 (default: the "
        "GPU present, else h200)",
    )  # fmt: skip
    parser.add_argument(
        "--pending", action="store_true", help="list only the panels not done on the card"
    )
    parser.add_argument("--run", nargs="+", metavar="NAME", help="time these panels, in this order")
    parser.add_argument(
        "--budget", type=positive_int, default=540, metavar="SECONDS",
        help="seconds for all of --run together (default: %(default)s)",
    )  # fmt: skip
    parser.add_argument(
        "--min-left", type=positive_int, default=30, metavar="SECONDS",
        help="start no panel with fewer seconds left (default: %(default)s)",
    )  # fmt: skip
    return parser


def list_panels(panels: list[Panel], card: str, pending: bool) -> None:
    width = max((len(p.name) for p in panels), default=4)
    for panel in panels:
        state = panel.state(card)
        if pending and state == "done":
            continue
        timed = len(panel.timed(card))
        where = shown(panel.record(card))
        print(f"{panel.name:{width}}  {state:7}  {timed}/{len(panel.shapes)} shapes  {where}")


def run_panels(chosen: list[Panel], card: str, budget: int, min_left: int, runner) -> int:
    """Each panel's command by ``runner(argv, timeout)`` (its exit status, None where it
    ran out of time), bounded by what is left of ``budget``; 0 where all ran to their
    end, else 1."""
    start = time.monotonic()
    status = 0
    for number, panel in enumerate(chosen, 1):
        left = budget - (time.monotonic() - start)
        head = f"[{number}/{len(chosen)}] {panel.name}"
        if left < min_left:
            print(f"{head}: not started, {left:.0f} s left (--min-left {min_left})", flush=True)
            status = 1
            continue
        print(f"{head}: {len(panel.shapes)} shapes, {left:.0f} s left", flush=True)
        argv = [sys.executable, "-m", panel.module, *panel.command(card)]
        began = time.monotonic()
        code = runner(argv, left)
        took = time.monotonic() - began
        timed = len(panel.timed(card))
        if code is None:
            end = "cut short by the budget"
        else:
            end = "done" if code == 0 else f"exit {code}"
        print(f"{head}: {end} after {took:.0f} s, {timed}/{len(panel.shapes)} shapes "
              f"in {shown(panel.record(card))}", flush=True)  # fmt: skip
        if code != 0:
            status = 1
    return status


def subprocess_runner(argv: list[str], timeout: float) -> int | None:
    try:
        return subprocess.run(argv, cwd=ROOT, timeout=timeout).returncode
    except subprocess.TimeoutExpired:
        return None


def main(argv: list[str] | None = None, runner=subprocess_runner, reports: Path = REPORTS) -> int:
    args = build_parser().parse_args(argv)
    problems: list[tuple[str, str]] = []
    panels = find_panels(reports, problems)
    by_name = {p.name: p for p in panels}
    for _, why in problems:
        print(f"{PROG}: not a panel: {why}", file=sys.stderr)
    here = present_card()
    card = args.card or here or HOME_CARD
    if not re.fullmatch(r"[a-z0-9][a-z0-9-]*", card):
        print(f"{PROG}: --card {card!r}: must be a card's short name, e.g. h100", file=sys.stderr)
        return 2
    if not args.run:
        list_panels(panels, card, args.pending)
        return 0
    broken = dict(problems)
    if any(n in broken for n in args.run):
        print(f"{PROG}: --run: " + "; ".join(broken[n] for n in args.run if n in broken),
              file=sys.stderr)  # fmt: skip
        return 2
    unknown = [n for n in args.run if n not in by_name]
    if unknown:
        print(f"{PROG}: --run: no panel named {', '.join(unknown)} "
              f"(the list: {PROG} --pending)", file=sys.stderr)  # fmt: skip
        return 2
    clashes = {n: sorted(by_name[n].foreign(card)) for n in args.run}
    clashes = {n: foreign for n, foreign in clashes.items() if foreign}
    if clashes:
        for name, foreign in clashes.items():
            panel = by_name[name]
            print(f"{PROG}: --run: {panel.name}'s record {shown(panel.record(card))} holds "
                  f"rows of {len(foreign)} shapes its file does not list ({foreign[0]}...): "
                  "another run's record; rename the panel's file and its --jsonl",
                  file=sys.stderr)  # fmt: skip
        return 2
    if here is None:
        from harness.measure.device import no_gpu_reason

        print(f"{PROG}: --run times kernels on a GPU: {no_gpu_reason()}", file=sys.stderr)
        return 3
    chosen = [by_name[n] for n in args.run]
    return run_panels(chosen, card, args.budget, args.min_left, runner)


if __name__ == "__main__":
    sys.exit(main())
