"""Spread of the samples asv stored: per track, the median over combinations of each
combination's relative standard deviation (and of the median's relative standard error).

    python -m harness.suite.asv_stats .asv/results/h200            # newest result file there
    python -m harness.suite.asv_stats .asv/results/h200/abc123-existing-py.json

It reads asv's own results files (written with ``--record-samples``) through asv's
``Results`` reader: the numbers are those ``asv compare`` and ``asv publish`` use.
"""

from __future__ import annotations

import argparse
import itertools
import statistics
import sys
from pathlib import Path

from harness.measure import metrics
from harness.suite import result_files


def _newest(path: Path) -> Path:
    if path.is_file():
        return path
    files = [p for p in path.glob("*.json") if p.name != "machine.json"]
    if not files:
        raise FileNotFoundError(f"{path}: no asv result files")
    return max(files, key=lambda p: p.stat().st_mtime)


def load(path: Path) -> dict[str, tuple[list[list[str]], list]]:
    """``{benchmark: (params, samples per combination)}`` from an asv results file;
    ValueError naming the file where it is damaged (``result_files.load``)."""
    file = _newest(path)
    try:
        results = result_files.load(file)
    except ValueError as err:
        raise ValueError(f"{file}: not a readable asv results file ({err})") from None
    out = {}
    for key in results.get_all_result_keys():
        params = results.get_result_params(key)
        out[key] = (params, results.get_result_samples(key, params) or [])
    return out


def spread(stored: dict[str, tuple[list[list[str]], list]]) -> dict[str, dict]:
    """``{track: {"combinations": n, "median_rel_stdev": x, "max_rel_stdev": (x, name),
    "median_rsd": x}}`` over the combinations that hold two samples or more."""
    per_track: dict[str, list[tuple[float, float, str]]] = {}
    for key, (params, samples) in stored.items():
        track = key.rsplit(".", 1)[-1]
        combos = list(itertools.product(*params)) if params else [()]
        for combo, got in zip(combos, samples, strict=False):
            if got and len(got) > 1:
                name = f"{key}({', '.join(combo)})"
                per_track.setdefault(track, []).append(
                    (metrics.rel_stdev(got), metrics.median_rsd(got), name)
                )
    out = {}
    for track, rows in sorted(per_track.items()):
        worst = max(rows)
        out[track] = {
            "combinations": len(rows),
            "median_rel_stdev": statistics.median(r[0] for r in rows),
            "max_rel_stdev": (worst[0], worst[2]),
            "median_rsd": statistics.median(r[1] for r in rows),
        }
    return out


def results_parser(prog: str, doc: str) -> argparse.ArgumentParser:
    """A command's parser whose first argument is what ``load`` reads: an asv results
    file, or a machine's folder (its newest file)."""
    p = argparse.ArgumentParser(
        prog=prog, description=doc, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("path", type=Path, help="an asv results file, or a machine's folder")
    return p


def main(argv: list[str] | None = None) -> int:
    p = results_parser("python -m harness.suite.asv_stats", __doc__)
    args = p.parse_args(argv)
    try:
        table = spread(load(args.path))
    except (OSError, ValueError) as err:
        p.error(str(err))
    if not table:
        print(f"{args.path}: no stored samples (run asv with --record-samples)")
    for track, row in table.items():
        rel, name = row["max_rel_stdev"]
        print(
            f"{track}: {row['combinations']} combinations, median rel stdev "
            f"{row['median_rel_stdev']:.2%}, median's rel std error {row['median_rsd']:.2%}, "
            f"largest {rel:.2%} ({name})"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
