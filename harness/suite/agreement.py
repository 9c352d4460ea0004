"""Whether the tuner and asv agree on the tuned cases: the speedup over torch.matmul that
``benchmarks.tune_gemm`` recorded in the tuned table against the one an asv run of
``gemm.Tuned`` measured for the same config (its ``track_vs_torch`` samples, kernel over
torch per round: the speedup is one over their median).

    python -m harness.suite.agreement .asv/results/h200          # newest result file there
    python -m harness.suite.agreement RESULT.json --gpu 'NVIDIA H200' --within 0.01

A line per case and dtype that both hold, then the verdict. Exit status: 0 every case
within ``--within`` (relative), 1 some case outside it, 2 bad input (no such file, no
``gemm.Tuned`` samples in it, no table rows for the GPU).
"""

from __future__ import annotations

import itertools
import json
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path

from harness.cli import fraction
from harness.suite import asv_stats
from harness.suite.series import param_value
from kernels import tuned

TRACK = "gemm.Tuned.track_vs_torch"
WITHIN = 0.01  # the bar: the tuner and asv within 1% on every case


@dataclass(frozen=True, slots=True)
class Case:
    """One tuned case as both sides measured it."""

    case: str
    dtype: str  # the short name, as asv's parameter (f16, bf16)
    config: str
    tuner: float  # the table's speedup
    asv: float  # one over the median of asv's kernel/torch samples
    samples: int

    @property
    def difference(self) -> float:
        """asv's speedup relative to the tuner's (+0.01: asv 1% higher)."""
        return self.asv / self.tuner - 1


def table_speedups(path: Path, gpu: str) -> dict[str, tuple[str, float]]:
    """``{shape id: (config id, speedup)}`` of ``gpu``'s rows in the tuned table at
    ``path``: the speedup the tuner recorded (the median over its rounds of torch's
    latency over the kernel's), else torch's median over the kernel's."""
    table = tuned.load(path)  # validates the rows
    if gpu not in table:
        raise ValueError(f"{path}: no rows for GPU {gpu!r} (has {list(table)})")
    raw = json.loads(path.read_text())[gpu][tuned.CONFIGS_KEY]
    return {
        shape_id: (row.config.id, float(raw[shape_id].get("speedup", row.speedup)))
        for shape_id, row in table[gpu].rows.items()
    }


def cases(stored: dict, rows: dict[str, tuple[str, float]]) -> list[Case]:
    """The cases ``stored`` (``asv_stats.load``'s ``{benchmark: (params, samples)}``) and
    the table's ``rows`` (``table_speedups``) both hold."""
    if TRACK not in stored:
        raise ValueError(f"no {TRACK} in the results (run asv with --record-samples)")
    params, samples = stored[TRACK]
    out = []
    for combo, got in zip(itertools.product(*params), samples, strict=False):
        name, dtype = (str(param_value(p)) for p in combo)
        if not got or name not in tuned.CASES:
            continue
        row = rows.get(tuned.case_shape(name, dtype).id)
        if row is None:
            continue
        config, speedup = row
        out.append(Case(name, dtype, config, speedup, 1 / statistics.median(got), len(got)))
    return out


def main(argv: list[str] | None = None) -> int:
    p = asv_stats.results_parser("python -m harness.suite.agreement", __doc__)
    p.add_argument(
        "--gpu", default="NVIDIA H200", help="the tuned table's GPU (default: %(default)s)"
    )
    p.add_argument("--table", type=Path, default=tuned.TUNED_FILE, help="the tuned table (JSON)")
    p.add_argument(
        "--within",
        type=fraction,
        default=WITHIN,
        help="largest relative difference that agrees, a fraction (default: %(default)s)",
    )
    args = p.parse_args(argv)
    try:
        found = cases(asv_stats.load(args.path), table_speedups(args.table, args.gpu))
    except (OSError, ValueError) as err:
        p.error(str(err))
    if not found:
        p.error(f"{args.path}: no tuned case that the table for {args.gpu!r} also holds")
    print(f"{'case':<12} {'dtype':<5} {'config':<32} {'tuner':>6} {'asv':>6} {'diff':>7}")
    for c in found:
        print(
            f"{c.case:<12} {c.dtype:<5} {c.config:<32} {c.tuner:6.3f} {c.asv:6.3f} "
            f"{c.difference:+7.2%}"
        )
    outside = [c for c in found if abs(c.difference) > args.within]
    worst = max(found, key=lambda c: abs(c.difference))
    print(
        f"{len(found)} cases: median |diff| "
        f"{statistics.median(abs(c.difference) for c in found):.2%}, largest "
        f"{worst.difference:+.2%} ({worst.case} {worst.dtype}); outside {args.within:.0%}: "
        + (", ".join(f"{c.case} {c.dtype}" for c in outside) or "none")
    )
    return 1 if outside else 0


if __name__ == "__main__":
    sys.exit(main())
