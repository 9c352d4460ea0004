"""Measure the gate itself: N A/A comparisons of one commit against itself (every
regression is a false alarm) and N comparisons against an injected slowdown of a chosen
size (every regression on the slowed benchmarks is a detection).

    nox -s gate_selftest -- [--n 10] [--slowdown 0.03] [--rounds 1] [--bench REGEX]

The injection is test-only: the gate worker's ``--inject-slowdown`` makes each timed
kernel launch of HEAD also spin the GPU (``torch.cuda._sleep``) for that fraction of the
kernel's own median latency, calibrated against CUDA events at start. The suite and the
kernels are untouched, and nothing on the normal gate path passes the flag.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from dataclasses import dataclass

from harness import gate
from harness import gate_decision as gd
from harness.argtypes import fraction, positive_int


@dataclass(frozen=True, slots=True)
class Tally:
    comparisons: int
    false_alarm_runs: int  # A/A comparisons with at least one regression
    false_alarms: dict[str, int]  # per benchmark
    detections: dict[str, int]  # per benchmark, out of `comparisons`

    @property
    def false_alarm_rate(self) -> float:
        return self.false_alarm_runs / self.comparisons if self.comparisons else 0.0


def tally(aa: Sequence[Sequence[gd.Verdict]], injected: Sequence[Sequence[gd.Verdict]]) -> Tally:
    """Count false alarms over the A/A comparisons and detections over the injected ones."""
    if len(aa) != len(injected):
        raise ValueError(f"aa/injected: {len(aa)} and {len(injected)} comparisons differ")
    names = sorted({v.name for run in [*aa, *injected] for v in run})
    false_alarms = dict.fromkeys(names, 0)
    detections = dict.fromkeys(names, 0)
    runs_with_alarm = 0
    for run in aa:
        hits = [v.name for v in run if v.status == gd.REGRESSION]
        runs_with_alarm += bool(hits)
        for name in hits:
            false_alarms[name] += 1
    for run in injected:
        for v in run:
            if v.status == gd.REGRESSION:
                detections[v.name] += 1
    return Tally(len(aa), runs_with_alarm, false_alarms, detections)


def render(t: Tally, slowdown: float) -> str:
    lines = [
        f"gate self-test: {t.comparisons} A/A and {t.comparisons} injected comparisons, "
        f"injected slowdown {slowdown:.1%}",
        f"false alarms: {t.false_alarm_runs}/{t.comparisons} comparisons "
        f"({t.false_alarm_rate:.0%})",
        "",
        f"{'benchmark':<70} {'false alarms':>12} {'detected':>9}",
    ]
    for name in t.detections:
        lines.append(
            f"{name:<70} {t.false_alarms[name]:>12} {t.detections[name]:>5}/{t.comparisons}"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    from harness import device

    p = argparse.ArgumentParser(
        prog="nox -s gate_selftest --",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--n", type=positive_int, default=10, help="comparisons of each kind")
    p.add_argument("--slowdown", type=fraction, default=0.03, help="0.03 = 3%%")
    p.add_argument("--rounds", type=positive_int, default=1, help="gate rounds per comparison")
    p.add_argument(
        "--threshold",
        type=fraction,
        default=0.02,
        help="the gate's floor for this test; it must sit below --slowdown to detect it",
    )
    p.add_argument("--bench", default=gate.DEFAULT_BENCH, help="regex on benchmark names")
    args = p.parse_args(argv)
    reason = device.no_gpu_reason()
    if reason:
        print(f"gate_selftest: error: needs a CUDA GPU: {reason}", file=sys.stderr)
        return 2
    work = gate.ROOT / ".gate" / "selftest"
    work.mkdir(parents=True, exist_ok=True)
    sha = gate._git("rev-parse", "HEAD")
    tree = gate._worktree(work, "tree", sha)
    trees = {"base": tree, "head": tree}
    aa, injected = [], []
    for i in range(args.n):
        for inject, bucket in ((0.0, aa), (args.slowdown, injected)):
            print(
                f"gate_selftest: {i + 1}/{args.n} {'injected' if inject else 'A/A'}",
                file=sys.stderr,
                flush=True,
            )
            rounds = gate.interleave(
                trees, args.bench, args.rounds, work, inject_head=inject, log=lambda line: None
            )
            bucket.append(gd.decide_all(gate.pool(rounds), threshold=args.threshold))
    print(render(tally(aa, injected), args.slowdown))
    return 0


if __name__ == "__main__":
    sys.exit(main())
