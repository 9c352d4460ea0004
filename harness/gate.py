"""The PR performance gate: BASE against HEAD on one GPU, interleaved, with a verdict.

    nox -s gate -- BASE HEAD [--rounds 3] [--threshold 0.02] [--bench REGEX]
    python -m harness.gate BASE HEAD ...

Each side gets a git worktree, so its suite, kernels and timing path come from its own
revision. Rounds alternate the sides (base, head, then head, base, ...) so drift in clocks
or temperature reaches both alike; every round runs each side's GPU tracks in a fresh
process. The samples of all rounds are pooled per benchmark and judged by
``harness.gate_decision``. Exit status: 0 nothing regressed, 1 a confirmed regression,
2 a benchmark failed to build or run (or the gate itself could not run).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from harness import gate_decision as gd
from harness.argtypes import fraction, gpu_list, positive_int
from harness.gpu_state import visible_entry

ROOT = Path(__file__).resolve().parent.parent
WORKER = Path(__file__).resolve().parent / "gate_worker.py"
# The default subset: at least 12 combinations spanning 128^3 to 8192^3, both dtypes,
# NN and NT, small and large tiles. Pass --bench '.' for the whole grid.
DEFAULT_BENCH = (
    r"gemm\.Stage(128)?\((128x128x128|4096x4096x4096), (128|256), (3|4), f16\)"
    r"|gemm\.Tiles\(.*, b128x256x64_t256_s3, .*\)"
    r"|gemm\.Attention\(.*, b128x128x32_t128_s3, f16\)"
)


def _git(*args: str, cwd: Path = ROOT) -> str:
    return subprocess.check_output(["git", *args], cwd=cwd, text=True).strip()


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="nox -s gate --",
        description="Compare the GEMM GPU tracks of two git revisions on this GPU.",
        epilog="Exit: 0 no regression, 1 regression, 2 a failed benchmark or gate.",
    )
    p.add_argument("base", help="base revision (e.g. origin/main)")
    p.add_argument("head", help="head revision (e.g. HEAD)")
    p.add_argument(
        "--rounds", type=positive_int, default=3, help="interleaved rounds per side (>= 1)"
    )
    p.add_argument(
        "--threshold",
        type=fraction,
        default=gd.DEFAULT_THRESHOLD,
        help="slowdown that counts, the floor under calibrated thresholds (0.02 = 2%%)",
    )
    p.add_argument("--bench", default=DEFAULT_BENCH, help="regex on benchmark names")
    p.add_argument("--out", type=Path, default=ROOT / ".gate", help="work and report folder")
    p.add_argument(
        "--gpus",
        type=gpu_list,
        default=None,
        help="'all' or indices like 0,1: shard the benchmarks over these GPUs",
    )
    p.add_argument(
        "--calibration",
        type=Path,
        default=None,
        help="per-benchmark thresholds (default: calibration/<machine>.json when present)",
    )
    return p


def _worktree(out: Path, side: str, sha: str) -> Path:
    path = out / "worktrees" / side
    if path.exists():
        subprocess.run(["git", "worktree", "remove", "--force", str(path)], cwd=ROOT, check=False)
    _git("worktree", "add", "--detach", "--force", str(path), sha)
    return path


def _run_side(
    tree: Path,
    bench: str,
    out_file: Path,
    inject: float = 0.0,
    gpu: int | None = None,
    only: Path | None = None,
    listing: bool = False,
) -> dict:
    env = dict(os.environ)
    if gpu is not None:
        env["CUDA_VISIBLE_DEVICES"] = visible_entry(gpu)
    # The worktree first: its kernels and suite, not this checkout's.
    env["PYTHONPATH"] = os.pathsep.join([str(tree), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    cmd = [
        sys.executable,
        str(WORKER),
        "--tree",
        str(tree),
        "--out",
        str(out_file),
        "--bench",
        bench,
    ]
    if listing:
        cmd.append("--list")
    if only is not None:
        cmd += ["--only", str(only)]
    if inject:
        cmd += ["--inject-slowdown", repr(inject)]
    proc = subprocess.run(cmd, env=env, cwd=tree, check=False)
    if proc.returncode or not out_file.exists():
        return {"fatal": f"worker exited with status {proc.returncode}"}
    return json.loads(out_file.read_text())


def interleave(
    trees: dict,
    bench: str,
    rounds: int,
    out: Path,
    inject_head: float = 0.0,
    log=print,
    gpu: int | None = None,
    only: Path | None = None,
) -> list[dict]:
    """Run both sides ``rounds`` times, alternating which goes first; one fresh worker
    process per side per round, on ``gpu`` (all visible when None)."""
    payloads = []
    tag = "" if gpu is None else f"-gpu{gpu}"
    for r in range(rounds):
        order = ("base", "head") if r % 2 == 0 else ("head", "base")
        got = {}
        for side in order:
            log(f"gate{tag}: round {r + 1}/{rounds}: {side}")
            inject = inject_head if side == "head" else 0.0
            got[side] = _run_side(
                trees[side], bench, out / f"{side}{tag}-{r}.json", inject, gpu, only
            )
        payloads.append(got)
    return payloads


def interleave_gpus(
    trees: dict, bench: str, rounds: int, out: Path, gpus: list[int], log=print
) -> list[dict]:
    """Shard the benchmarks over ``gpus`` (harness.shard's stable plan over the union of
    both sides' names), run each shard's interleaved rounds on its own GPU at once, and
    merge the rounds. Base and head of one benchmark always share a GPU."""
    from concurrent.futures import ThreadPoolExecutor

    from harness.shard import plan

    names: set[str] = set()
    for side, tree in trees.items():
        names.update(
            _run_side(tree, bench, out / f"{side}-names.json", listing=True).get("names", [])
        )
    # Per combination: the worker measures each one on its own, at about equal cost.
    shards = plan(dict.fromkeys(names, 1.0), gpus)
    files = {}
    for gpu, shard in shards.items():
        files[gpu] = out / f"shard-gpu{gpu}.json"
        files[gpu].write_text(json.dumps(shard))
    with ThreadPoolExecutor(len(gpus)) as pool:
        parts = list(
            pool.map(
                lambda g: interleave(trees, bench, rounds, out, log=log, gpu=g, only=files[g]),
                gpus,
            )
        )
    merged = []
    for r in range(rounds):
        merged.append(
            {side: _merge([part[r][side] for part in parts]) for side in ("base", "head")}
        )
    return merged


def _merge(payloads: list[dict]) -> dict:
    fatal = [p["fatal"] for p in payloads if "fatal" in p]
    if fatal:
        return {"fatal": "; ".join(fatal)}
    results: dict = {}
    for p in payloads:
        results.update(p.get("results", {}))
    return {"results": results}


def gpu_summary(rounds: list[dict]) -> str:
    """SM clocks and throttling the workers saw right after each benchmark."""
    clocks, throttled, readings = [], [], 0
    for r in rounds:
        for payload in r.values():
            for entry in payload.get("results", {}).values():
                gpu = entry.get("gpu")
                if gpu:
                    readings += 1
                    clocks.append(gpu["sm_mhz"])
                    if gpu["throttle"]:
                        throttled.append(gpu["throttle"])
    if not readings:
        return "no NVML readings"
    seen = (
        "none"
        if not throttled
        else f"{len(throttled)} of {readings} ({', '.join(sorted(set(throttled)))})"
    )
    return f"SM clock {min(clocks)}-{max(clocks)} MHz over {readings} readings; throttling: {seen}"


def load_calibration(path: Path | None) -> dict[str, float]:
    """Per-benchmark thresholds from ``nox -s calibrate`` (``{name: {"threshold": x}}``)."""
    if path is None or not path.exists():
        return {}
    data = json.loads(path.read_text())
    return {name: float(v["threshold"]) for name, v in data.get("benchmarks", {}).items()}


def pool(rounds: list[dict[str, dict]]) -> list[gd.BenchSamples]:
    """Pool per-round worker output ``{"base": payload, "head": payload}`` into samples."""
    names: dict[str, None] = {}
    for r in rounds:
        for side in ("base", "head"):
            names.update(dict.fromkeys(r[side].get("results", {})))
    out = []
    for name in names:
        acc = {"base": [], "head": [], "base_rel": [], "head_rel": []}
        errors, skipped = [], False
        absent = {"base": 0, "head": 0}
        for r in rounds:
            for side in ("base", "head"):
                payload = r[side]
                if "fatal" in payload:
                    errors.append(f"{side}: {payload['fatal']}")
                    continue
                entry = payload["results"].get(name)
                if entry is None:
                    absent[side] += 1
                elif "error" in entry:
                    errors.append(f"{side}: {entry['error']}")
                elif "skipped" in entry:
                    skipped = True
                else:
                    acc[side] += entry["track_latency"]
                    acc[f"{side}_rel"] += entry["track_vs_torch"]
        if skipped and not errors and not acc["base"] and not acc["head"]:
            continue  # invalid on both sides: not a benchmark
        # Absent from every round of one side: added or removed by the change. Absent from
        # some rounds only: that side's runs disagree, which is a failure.
        missing = next((side for side in absent if absent[side] == len(rounds)), None)
        for side, count in absent.items():
            if 0 < count < len(rounds):
                errors.append(f"{side}: benchmark missing from {count} of {len(rounds)} rounds")
        error = "; ".join(dict.fromkeys(errors)) or None
        out.append(
            gd.BenchSamples(
                name=name, error=error, missing=missing, **{k: tuple(v) for k, v in acc.items()}
            )
        )
    return out


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    args.out = args.out.resolve()
    args.out.mkdir(parents=True, exist_ok=True)
    status = args.out / "exit_code"
    status.unlink(missing_ok=True)
    code = _gate(args)
    # nox collapses a failed session to status 1; the session re-raises this one.
    status.write_text(str(code))
    return code


def _gate(args) -> int:
    if args.calibration is not None and not args.calibration.is_file():
        print(f"gate: error: --calibration={args.calibration}: no such file", file=sys.stderr)
        return 2
    from harness import device

    reason = device.no_gpu_reason()
    if reason:
        print(f"gate: error: needs a CUDA GPU: {reason}", file=sys.stderr)
        return 2
    try:
        shas = {
            side: _git("rev-parse", "--verify", f"{rev}^{{commit}}")
            for side, rev in (("base", args.base), ("head", args.head))
        }
    except subprocess.CalledProcessError:
        print(
            f"gate: error: cannot resolve {args.base!r} or {args.head!r} to a commit",
            file=sys.stderr,
        )
        return 2
    trees = {side: _worktree(args.out, side, sha) for side, sha in shas.items()}
    start = time.perf_counter()
    log = lambda line: print(line, file=sys.stderr)  # noqa: E731
    if args.gpus is None:
        rounds = interleave(trees, args.bench, args.rounds, args.out, log=log)
    else:
        import torch

        from harness.shard import parse_gpus

        try:
            gpus = parse_gpus(args.gpus, torch.cuda.device_count())
        except ValueError as err:
            print(f"gate: error: {err}", file=sys.stderr)
            return 2
        rounds = interleave_gpus(trees, args.bench, args.rounds, args.out, gpus, log=log)
    samples = pool(rounds)
    calibration = args.calibration
    if calibration is None:
        calibration = ROOT / "calibration" / f"{device.machine_name()}.json"
    thresholds = load_calibration(calibration)
    verdicts = gd.decide_all(samples, threshold=args.threshold, thresholds=thresholds)
    if not verdicts:
        print(f"gate: error: no benchmark matched {args.bench!r}", file=sys.stderr)
        return 2
    context = {
        "GPU": device.gpu_name(),
        "versions": ", ".join(f"{k} {v}" for k, v in device.versions().items()),
        "rounds": f"{args.rounds}, interleaved, one fresh process per side per round",
        "GPU state": gpu_summary(rounds),
        "thresholds": (
            f"per benchmark from {calibration.name}, floor {args.threshold:.0%}"
            if thresholds
            else f"{args.threshold:.0%} for all (no calibration file)"
        ),
        "wall time": f"{time.perf_counter() - start:.0f} s",
    }
    report = gd.render_markdown(
        verdicts,
        base_label=f"base {shas['base'][:10]}",
        head_label=f"head {shas['head'][:10]}",
        context=context,
    )
    (args.out / "report.md").write_text(report)
    (args.out / "samples.json").write_text(json.dumps(rounds))
    summary = os.environ.get("GITHUB_STEP_SUMMARY")
    if summary:
        with open(summary, "a") as fh:
            fh.write(report + "\n")
    print(report)
    return gd.exit_code(verdicts)


if __name__ == "__main__":
    sys.exit(main())
