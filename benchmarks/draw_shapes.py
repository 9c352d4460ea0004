"""Draw a list of off-table shapes from a seed, for a measurement on shapes nobody chose.

    python3 -m benchmarks.draw_shapes --seed 4711 --out mine.json
    python3 -m benchmarks.offtable --list --sms 132 --gpu "NVIDIA H200" --shapes mine.json
    python3 -m benchmarks.offtable --shapes mine.json --resume --json mine_h200.json \\
        --markdown mine_h200.md

Whoever checks the off-table claim picks the seed; the draw is then fixed by it, and the
file records the seed, the mix and the command, so anyone can draw the same list again
and see it was not picked by hand. ``--mix`` sets how many shapes each category gets
(default: six mid, two skinny M, one long K, two large, one short K, the mix of the
committed random lists, ``reports/offtable_random*_shapes.json``). Each shape is drawn
uniformly from its category's box below and kept only where it meets the category's rule
(``benchmarks.offtable.CATEGORIES``, the rules ``--shapes`` checks), is no tuned case and
is not drawn twice; dtype and layout are drawn with it. Dimensions come in steps of 8
unless the box says otherwise (so that every operand's rows are 16-byte aligned, as
they are in the committed lists); ``--step 1`` draws any size, the class of rows TMA
cannot load.

Boxes (M, N, K ranges, inclusive):
mid 1000..4096 each; skinny_m M 1..128 (any), N 1024..8192, K 1024..16384;
thin_n M 1024..8192, N 8..128, K 1024..16384; long_k M 16..512, N 16..1024,
K 4096..49152; large M, N 4096..12288, K 1024..8192; short_k M, N 1024..8192, K 64..256.

The printed command measures the file into the record ``benchmarks.panels`` counts for it
(``mine_shapes.json`` -> ``mine_h200.json``); a file written as
``reports/offtable_NAME_shapes.json`` is a panel, and ``python3 -m benchmarks.panels --run
NAME`` measures it on any card, into that card's record.

The file takes the categories each shape meets (``non_multiple`` among them where it
applies). Exit status: 0 written; 2 bad input.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import random
import shlex
import sys
from dataclasses import dataclass
from pathlib import Path

from benchmarks.offtable import CATEGORIES, parse_shapes, tuned_shapes
from benchmarks.panels import HOME_CARD, REPORTS, panel_name
from harness.cli import count, output_file, positive_int
from kernels import DTYPES, LAYOUTS, GemmShape

PROG = "python3 -m benchmarks.draw_shapes"


@dataclass(frozen=True, slots=True)
class Box:
    """Where a category's shapes are drawn from: each dimension's range (inclusive) and
    step; a draw is kept only where it meets the category's rule."""

    m: tuple[int, int]
    n: tuple[int, int]
    k: tuple[int, int]
    m_step: int = 8
    step: int = 8  # N's and K's

    def draw(self, rng: random.Random, step: int | None) -> tuple[int, int, int]:
        def pick(lo_hi: tuple[int, int], s: int) -> int:
            lo, hi = lo_hi
            first = -(-lo // s) * s
            return first + s * rng.randrange((hi - first) // s + 1)

        n_step = step or self.step
        return pick(self.m, step or self.m_step), pick(self.n, n_step), pick(self.k, n_step)


BOXES: dict[str, Box] = {
    "mid": Box((1000, 4096), (1000, 4096), (1000, 4096)),
    "skinny_m": Box((1, 128), (1024, 8192), (1024, 16384), m_step=1),
    "thin_n": Box((1024, 8192), (8, 128), (1024, 16384)),
    "long_k": Box((16, 512), (16, 1024), (4096, 49152)),
    "large": Box((4096, 12288), (4096, 12288), (1024, 8192)),
    "short_k": Box((1024, 8192), (1024, 8192), (64, 256)),
}
# The committed random lists' mix.
MIX = {"mid": 6, "skinny_m": 2, "long_k": 1, "large": 2, "short_k": 1}
MAX_TRIES = 10_000  # draws per shape before a box and rule are taken to exclude each other


def mix(text: str) -> dict[str, int]:
    """``mid=6,large=2``: shapes per category; each a known category with a box, a count
    of 0 or more, none twice, at least one shape in all."""
    out: dict[str, int] = {}
    for part in text.split(","):
        name, sep, value = part.strip().partition("=")
        if not sep or name not in BOXES:
            raise argparse.ArgumentTypeError(
                f"{part.strip()!r}: must be CATEGORY=COUNT, CATEGORY one of {list(BOXES)}"
            )
        if name in out:
            raise argparse.ArgumentTypeError(f"{name}: given twice")
        out[name] = count(value)
    if not sum(out.values()):
        raise argparse.ArgumentTypeError(f"{text!r}: draws no shape (every count is 0)")
    return out


def draw(seed: int, wanted: dict[str, int], step: int | None = None) -> list[GemmShape]:
    """The shapes of one draw: per category of ``wanted``, in its order, that many shapes
    from its box that meet its rule, no tuned case and no repeat. ValueError where a
    category's box yields no such shape (a ``--step`` that its rule cannot meet)."""
    rng = random.Random(seed)
    tuned, shapes = tuned_shapes(), []
    for category, needed in wanted.items():
        box, (rule, words) = BOXES[category], CATEGORIES[category]
        for _ in range(needed):
            for _ in range(MAX_TRIES):
                m, n, k = box.draw(rng, step)
                shape = GemmShape(m, n, k, rng.choice(sorted(DTYPES)), rng.choice(sorted(LAYOUTS)))
                if rule(shape) and shape not in tuned and shape not in shapes:
                    shapes.append(shape)
                    break
            else:
                raise ValueError(f"{category}: no shape of its box meets its rule ({words})")
    return shapes


def entries(shapes: list[GemmShape]) -> list[dict]:
    """The shapes file's entries, each with the categories whose rules it meets."""
    return [
        {
            "m": s.m,
            "n": s.n,
            "k": s.k,
            "dtype": s.dtype,
            "layout": s.layout,
            "categories": [c for c, (rule, _) in CATEGORIES.items() if rule(s)],
        }
        for s in shapes
    ]


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=PROG, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--seed", type=count, required=True, help="the draw's seed (yours to pick)")
    p.add_argument(
        "--mix",
        type=mix,
        default=MIX,
        help="shapes per category, e.g. mid=6,skinny_m=2,long_k=1,large=2,short_k=1 (the default)",
    )
    p.add_argument(
        "--step",
        type=positive_int,
        default=None,
        help="every dimension in steps of this (default: each box's, 8 but skinny M's 1); "
        "1 draws rows TMA cannot load",
    )
    p.add_argument("--out", type=output_file, required=True, help="the shapes file to write")
    return p


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    argv = sys.argv[1:] if argv is None else argv
    try:
        shapes = draw(args.seed, args.mix, args.step)
    except ValueError as err:
        parser.error(f"--mix/--step: {err}")
    command = shlex.join([*PROG.split(), *argv])
    counts = ", ".join(f"{n} {c}" for c, n in args.mix.items() if n)
    data = {
        "about": (
            f"{len(shapes)} shape(s) drawn by `{command}` on {dt.date.today().isoformat()} "
            f"({counts}; random.Random({args.seed}), each box and rule as "
            "benchmarks/draw_shapes.py gives them), before any was measured."
        ),
        "shapes": entries(shapes),
    }
    parse_shapes(data, str(args.out))  # what offtable --shapes will check
    args.out.write_text(json.dumps(data, indent=1) + "\n")
    for s in shapes:
        print(s.id)
    card = HOME_CARD.upper()
    print(f"{len(shapes)} shape(s) written to {args.out}; measure them on the {card} with")
    for line in measure_hint(args.out):
        print(f"  {line}")
    return 0


def measure_hint(out: Path) -> list[str]:
    """The command that measures the drawn file, naming the record ``benchmarks.panels``
    counts for it (``mine_shapes.json`` -> ``mine_h200.json``), and for a file in
    ``reports/`` named as a panel, the panel runner's command, which files the record
    under the card present."""
    stem = str(out.with_suffix("")).removesuffix("_shapes")
    record = shlex.quote(f"{stem}_{HOME_CARD}")
    lines = [
        f"python3 -m benchmarks.offtable --shapes {shlex.quote(str(out))} --resume \\",
        f"    --json {record}.json --markdown {record}.md",
    ]
    panel = panel_name(out)
    if panel and out.resolve().parent == REPORTS.resolve():
        run = f"python3 -m benchmarks.panels --run {shlex.quote(panel)}"
        lines.append(f"or on any card, its record filed by card: {run}")
    return lines


if __name__ == "__main__":
    sys.exit(main())
