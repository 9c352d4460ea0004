"""Name the kernels torch.matmul (cuBLAS) runs on each shape of an off-table list.

    python3 -m benchmarks.torch_kernels --shapes reports/offtable_mid_shapes.json
    python3 -m benchmarks.torch_kernels --shapes reports/offtable_mid_shapes.json \\
        --json reports/torch_kernels_mid_h200.json

The off-table speedups compare the kernel with whatever cuBLAS picks; this says what that
is. For each shape of ``--shapes`` (a ``benchmarks.offtable`` shapes file), fresh random
operands in the shape's layout, then ``--repeat`` launches of torch.matmul, each after an
L2 flush, recorded by CUPTI through ``torch.profiler`` (``harness.measure.kernel_timer``):
every kernel a launch ran, its mean duration, and what its name says of the schedule where
it is one of cuBLAS's ``nvjet`` kernels (tile, K step and stages, cluster, the rest).

Exit status: 0 done; 2 bad input, or CUPTI recorded nothing (what finished is written);
3 no GPU; 130 interrupted (what finished is written).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import re
import shlex
import sys
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from harness.cli import (
    EXIT_FAILURE,
    EXIT_INTERRUPTED,
    EXIT_NO_GPU,
    output_file,
    positive_int,
)
from kernels import GemmShape

PROG = "python3 -m benchmarks.torch_kernels"

# cuBLAS's Hopper kernels name their schedule: nvjet_sm90_<types>_<BM>x<BN>_<BK>x<stages>_
# <cluster M>x<cluster N>_<the rest>, e.g. nvjet_sm90_hsh_256x128_64x4_1x2_h_bz_coopA_TNT.
NVJET = re.compile(
    r"nvjet_sm\d+_(?P<types>[a-z]+)_(?P<bm>\d+)x(?P<bn>\d+)_(?P<bk>\d+)x(?P<stages>\d+)"
    r"_(?P<cm>\d+)x(?P<cn>\d+)_(?P<rest>\w+)"
)


@dataclass(frozen=True, slots=True)
class KernelSeen:
    """One kernel torch.matmul ran on a shape: its name, how many of the timed launches
    ran it, its mean duration, and its schedule where the name gives one."""

    name: str
    launches: int
    mean_us: float
    schedule: str | None


def schedule_of(name: str) -> str | None:
    """The schedule an nvjet kernel's name states ("256x128 tile, K 64 x 4 stages,
    cluster 1x2, h_bz_coopA_TNT"), or None for a name that states none."""
    m = NVJET.search(name)
    if m is None:
        return None
    return (
        f"{m['bm']}x{m['bn']} tile, K {m['bk']} x {m['stages']} stages, "
        f"cluster {m['cm']}x{m['cn']}, {m['rest']}"
    )


def kernels_seen(
    records: Sequence[tuple[str, int, int]], launches: int, flush_name: str
) -> list[KernelSeen]:
    """The kernels of ``records`` (``kernel_timer.capture``'s ``(name, start_ns,
    duration_ns)``) other than the flush, each with its count and mean duration, the
    longest first. ValueError where the records hold no kernel besides the flushes."""
    by_name: dict[str, list[int]] = {}
    for name, _, duration in records:
        if flush_name not in name:
            by_name.setdefault(name, []).append(duration)
    if not by_name:
        raise ValueError(f"kernel records: no kernel besides the flush in {launches} launches")
    seen = [
        KernelSeen(name, len(d), sum(d) / len(d) / 1e3, schedule_of(name))
        for name, d in by_name.items()
    ]
    return sorted(seen, key=lambda k: -k.mean_us * k.launches)


def observe(shape: GemmShape, repeat: int, seed: int) -> list[KernelSeen]:
    """Run torch.matmul ``repeat`` times on ``shape`` (each after an L2 flush) under CUPTI."""
    import torch

    from harness.measure import kernel_timer
    from harness.measure.timing import FLUSH_BYTES
    from harness.ops.gemm import matmul_fn
    from harness.ops.registry import operator_for

    op = operator_for(shape)
    inputs = op.inputs(shape, seed)
    matmul = matmul_fn(shape, inputs.a, inputs.b)
    cache = torch.empty(FLUSH_BYTES // 4, dtype=torch.int, device="cuda")
    matmul()  # cuBLAS's heuristics and workspace, outside the record
    torch.cuda.synchronize()

    def run() -> None:
        for _ in range(repeat):
            kernel_timer.flush(cache)
            matmul()

    records = kernel_timer.capture(run)
    return kernels_seen(records, repeat, kernel_timer.FLUSH_NAME)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=PROG, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument(
        "--shapes",
        type=Path,
        required=True,
        help="an off-table shapes file (benchmarks.offtable's format)",
    )
    p.add_argument("--repeat", type=positive_int, default=20, help="timed launches per shape")
    p.add_argument("--seed", type=int, default=0, help="seed of the random operands")
    p.add_argument("--json", type=output_file, help="write the record (JSON) here")
    return p


def main(argv: list[str] | None = None) -> int:
    from benchmarks.offtable import load_shapes

    argv = sys.argv[1:] if argv is None else argv
    args = build_parser().parse_args(argv)
    try:
        shapes = load_shapes(args.shapes)
    except ValueError as err:
        print(f"{PROG}: error: --shapes: {err}", file=sys.stderr)
        return EXIT_FAILURE

    import torch

    if not torch.cuda.is_available():
        print(f"{PROG}: error: no CUDA device: cuBLAS's kernels need one", file=sys.stderr)
        return EXIT_NO_GPU
    from harness.measure import device
    from harness.measure.kernel_timer import CuptiUnavailable

    spec = device.DeviceSpec.read()
    rows, status = [], 0
    try:
        for i, entry in enumerate(shapes, 1):
            seen = observe(entry.shape, args.repeat, args.seed)
            rows.append({"shape": entry.shape.id, "kernels": [asdict(k) for k in seen]})
            main_kernel = seen[0]
            print(
                f"[{i}/{len(shapes)}] {entry.shape.id}: {main_kernel.mean_us:.1f} us "
                f"{main_kernel.name} ({main_kernel.schedule or 'schedule not in the name'})"
                + "".join(f" + {k.name} {k.mean_us:.1f} us" for k in seen[1:]),
                flush=True,
            )
    except KeyboardInterrupt:
        status = EXIT_INTERRUPTED
    except (CuptiUnavailable, ValueError) as err:  # no records, or only the flushes
        print(f"{PROG}: error: {entry.shape.id}: {err}", file=sys.stderr)
        status = EXIT_FAILURE
    if args.json:
        meta = {
            "gpu": spec.name,
            "date": dt.date.today().isoformat(),
            "command": shlex.join([*PROG.split(), *argv]),
            "repeat": args.repeat,
            **spec.record(),
            **device.versions(),
        }
        args.json.write_text(json.dumps({"meta": meta, "shapes": rows}, indent=1) + "\n")
    return status


if __name__ == "__main__":
    sys.exit(main())
