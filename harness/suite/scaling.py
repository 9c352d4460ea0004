"""The suite's scaling over the GPUs of one host, measured in one run: the warm full grid
on the first GPU alone, then on all of them, each leg with results of its own.

    nox -s bench_scaling [-- --gpus 0,1] [--json reports/scaling_h200.json] [-b REGEX]
    python -m harness.suite.scaling --gpus 0,1

The kernel cache is filled first (``harness.suite.precompile``, not timed), so both legs
are warm. Each leg is ``harness.suite.run``'s ``run_target`` (``--gpus`` of that leg)
under an asv configuration that stores in ``.asv/scaling/<leg>/`` (emptied first, so
nothing is skipped as stored), timed as a whole. The JSON record holds each leg's wall
time, exit status, ``timing`` lines (every piece with its lane) and each ``asv run``'s
phases (``harness.suite.asv_phases``), and the speedup of the last leg over the first. The
host-timing family's figures of the two legs are in those folders:
``python -m harness.suite.asv_stats .asv/scaling/<leg>/results/<machine>``.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

from harness.cli import EXIT_FAILURE, EXIT_OK, gpu_list, regex
from harness.revisions.placement import parse_gpus
from harness.suite import asv_phases, discovery, run
from harness.suite.target import Target

ROOT = Path(__file__).resolve().parent.parent.parent


def leg_config(root: Path, folder: Path) -> Path:
    """An asv configuration like ``root``'s that stores its results and html in
    ``folder``, every path absolute."""
    conf = discovery.read_asv_conf(root)
    base = discovery.conf_path(root).parent
    for key in ("repo", "benchmark_dir", "env_dir"):
        if key in conf:
            conf[key] = str((base / conf[key]).resolve())
    conf["results_dir"] = str(folder / "results")
    conf["html_dir"] = str(folder / "html")
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "asv.conf.json"
    path.write_text(json.dumps(conf, indent=1) + "\n")
    return path


def leg_name(gpus: list[int]) -> str:
    return "gpus-" + "-".join(str(g) for g in gpus)


def measure_leg(target: Target, gpus: list[int], user: list[str], log) -> dict:
    lines: list[str] = []

    def keep(line: str) -> None:
        lines.append(line)
        log(line)

    start = time.perf_counter()
    code = run.run_target(target, user, [], gpus, log=keep)
    wall = time.perf_counter() - start
    return {
        "gpus": gpus,
        "wall_s": round(wall, 2),
        "code": code,
        "timings": [list(t) for t in run.read_timings(lines)],
        "phases": [list(p) for p in asv_phases.read_phases(lines)],
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m harness.suite.scaling",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "--gpus", type=gpu_list, default="all", help="'all' or indices like 0,1: at least two"
    )
    p.add_argument("--json", type=Path, default=None, help="default reports/scaling_<gpu>.json")
    p.add_argument(
        "-b",
        "--bench",
        action="append",
        type=regex,
        default=[],
        help="regex on asv's or the gate's names, as in nox -s bench (repeatable)",
    )
    args = p.parse_args(argv)
    from harness.measure import device
    from harness.suite import precompile

    reason = device.no_gpu_reason()
    if reason:
        p.error(f"needs a CUDA GPU and found none: {reason}")
    import torch

    try:
        gpus = parse_gpus(args.gpus, torch.cuda.device_count())
    except ValueError as err:
        p.error(str(err))
    if len(gpus) < 2:
        p.error(f"--gpus={args.gpus}: a comparison needs at least two GPUs")
    machine = device.machine_name()
    out = args.json or ROOT / "reports" / f"scaling_{machine}.json"
    precompile.main([])
    sha = subprocess.check_output(["git", "rev-parse", "HEAD"], cwd=ROOT, text=True).strip()
    legs = []
    for leg in ([gpus[0]], gpus):
        folder = ROOT / ".asv" / "scaling" / leg_name(leg)
        shutil.rmtree(folder, ignore_errors=True)
        target = Target(ROOT, sha, machine, config=leg_config(ROOT, folder))
        print(f"scaling: {leg_name(leg)}", flush=True)
        legs.append(measure_leg(target, leg, args.bench, lambda line: print(line, flush=True)))
    record = {
        "version": 1,
        "machine": machine,
        "sha": sha,
        "selection": args.bench,
        "legs": legs,
        "speedup": round(legs[0]["wall_s"] / legs[-1]["wall_s"], 3) if legs[-1]["wall_s"] else None,
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(record, indent=1) + "\n")
    print(
        f"scaling: {legs[0]['wall_s']:.1f} s on 1 GPU, {legs[-1]['wall_s']:.1f} s on "
        f"{len(gpus)}: {record['speedup']}x; written to {out}"
    )
    return EXIT_OK if all(leg["code"] == EXIT_OK for leg in legs) else EXIT_FAILURE


if __name__ == "__main__":
    sys.exit(main())
