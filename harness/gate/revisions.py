"""Revisions, measured: the seam the gate, calibration, the self-test, backfill and bisect
share. Resolve revisions, give each a git worktree, compile their kernels, run the worker
on a worktree (one fresh process, that revision's own suite and kernels) or on several
at once (paired: their kernels launched in turn in one process), interleave two
revisions round by round, read kernels' compiled resources, pick GPUs, and find the
calibration file.

    from harness.gate import revisions
    sha = revisions.resolve("origin/main")
    tree = revisions.worktree(out, "base", sha)
    payload = revisions.run_worker(tree, bench_regex, out / "base-0.json")
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from harness.measure.gpu_state import visible_entry

ROOT = Path(__file__).resolve().parent.parent.parent
WORKER = Path(__file__).resolve().parent / "worker.py"
SIDES = ("base", "head")


class RevisionError(ValueError):
    """A revision argument that names no commit, or a range that cannot be used."""


def git(*args: str, cwd: Path = ROOT) -> str:
    """``git ARGS`` in ``cwd``; its stdout, stripped. Raises CalledProcessError."""
    return subprocess.run(
        ["git", *args], cwd=cwd, check=True, capture_output=True, text=True
    ).stdout.strip()


def resolve(rev: str, what: str = "revision", cwd: Path = ROOT) -> str:
    """The full commit hash ``rev`` names; a RevisionError naming ``what`` otherwise."""
    try:
        return git("rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}", cwd=cwd)
    except subprocess.CalledProcessError:
        raise RevisionError(f"{what}={rev!r}: names no commit in this repository") from None


def is_ancestor(older: str, newer: str, cwd: Path = ROOT) -> bool:
    return (
        subprocess.run(
            ["git", "merge-base", "--is-ancestor", older, newer], cwd=cwd, check=False
        ).returncode
        == 0
    )


def first_parent_range(good: str, bad: str, cwd: Path = ROOT) -> list[str]:
    """Commits after ``good`` up to and including ``bad``, oldest first, along first
    parents (the commits that landed on the branch, merges as one step)."""
    out = git("rev-list", "--first-parent", "--reverse", f"{good}..{bad}", cwd=cwd)
    return out.split() if out else []


def worktree(out: Path, name: str, sha: str) -> Path:
    """A detached worktree of ``sha`` at ``out/worktrees/name``, replacing one left there."""
    path = out / "worktrees" / name
    if path.exists():
        subprocess.run(
            ["git", "worktree", "remove", "--force", str(path)],
            cwd=ROOT,
            check=False,
            capture_output=True,
        )
    git("worktree", "add", "--detach", "--force", str(path), sha, cwd=ROOT)
    return path


def remove_worktree(path: Path) -> None:
    subprocess.run(
        ["git", "worktree", "remove", "--force", str(path)],
        cwd=ROOT,
        check=False,
        capture_output=True,
    )


def changed_files(base: str, head: str, cwd: Path = ROOT) -> list[str]:
    """Paths that differ between two commits."""
    out = git("diff", "--name-only", base, head, cwd=cwd)
    return out.split("\n") if out else []


def has_prepare(sha: str, cwd: Path = ROOT) -> bool:
    """Whether the suite at ``sha`` builds a combination's kernel apart from timing it
    (``prepare``), which paired measurement needs."""
    found = subprocess.run(
        ["git", "grep", "-q", "def prepare(self", sha, "--", "*.py"],
        cwd=cwd,
        check=False,
        capture_output=True,
    )
    return found.returncode == 0


def tree_env(tree: Path, gpu: int | None = None, site: Path | None = None) -> dict[str, str]:
    """The environment of a process that runs ``tree``'s code: the tree first on the path
    (asv reads ASV_PYTHONPATH), then ``site`` (a folder of packages that overrides the
    installed ones), pinned to ``gpu`` when given."""
    env = dict(os.environ)
    if gpu is not None:
        env["CUDA_VISIBLE_DEVICES"] = visible_entry(gpu)
    first = [str(tree)] + ([str(site)] if site is not None else [])
    for var in ("PYTHONPATH", "ASV_PYTHONPATH"):
        env[var] = os.pathsep.join([*first, env.get(var, "")]).rstrip(os.pathsep)
    return env


def precompile(
    trees: Mapping[str, Path],
    bench: str,
    log: Callable[[str], None] = print,
    options: Mapping[str, Mapping] | None = None,
) -> None:
    """Compile every side's kernels for ``bench`` into TileLang's disk cache, all sides at
    once, each with its own tree's precompile (a tree without one compiles in its worker);
    ``options[side]`` as for ``interleave``."""
    procs = {}
    for side, tree in trees.items():
        if not (tree / "harness" / "suite" / "precompile.py").exists():
            log(f"gate: {side}: no precompile in this revision; its worker compiles")
            continue
        opts = (options or {}).get(side, {})
        if not opts and any(t == tree for t, _ in procs.values()):
            continue  # the same tree twice in one environment (a self-test): once will do
        python = opts.get("python") or sys.executable
        cmd = [python, "-m", "harness.suite.precompile", "--bench", bench]
        proc = subprocess.Popen(
            cmd,
            cwd=tree,
            env={**tree_env(tree, site=opts.get("site")), **opts.get("env", {})},
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        procs[side] = (tree, proc)
    for side, (_, proc) in procs.items():
        out, _ = proc.communicate()
        last = (out or "").strip().splitlines()[-1:] or [""]
        log(f"gate: {side}: precompile: {last[0]}")


def run_worker(
    tree: Path,
    bench: str,
    out_file: Path,
    inject: float = 0.0,
    gpu: int | None = None,
    only: Path | None = None,
    listing: bool = False,
    site: Path | None = None,
    python: str | None = None,
    env: Mapping[str, str] | None = None,
    inject_cycles: Path | None = None,
) -> dict:
    """Run the worker on ``tree`` in a fresh process of ``python`` (this interpreter by
    default), with ``site``'s packages first and ``env`` set when given; its payload
    (``{"results": ...}``, ``{"names": [...]}`` with ``listing``, or ``{"fatal": why}``).
    ``inject_cycles`` (a file of calibrated delay cycles) sets the injection's delay
    instead of calibrating it."""
    cmd = [python or sys.executable, str(WORKER), "--tree", str(tree), "--out", str(out_file)]
    cmd += ["--bench", bench]
    if listing:
        cmd.append("--list")
    if only is not None:
        cmd += ["--only", str(only)]
    if inject:
        cmd += ["--inject-slowdown", repr(inject)]
    if inject_cycles is not None:
        cmd += ["--inject-cycles", str(inject_cycles)]
    return _run(cmd, {**tree_env(tree, gpu, site), **(env or {})}, tree, out_file)


def _run(cmd: list[str], env: Mapping[str, str], cwd: Path, out_file: Path) -> dict:
    """Run one worker process; its payload, or ``{"fatal": why}`` when it wrote none."""
    out_file.unlink(missing_ok=True)  # nothing stale is read back
    proc = subprocess.run(cmd, env=dict(env), cwd=cwd, check=False)
    if proc.returncode or not out_file.exists():
        return {"fatal": f"worker exited with status {proc.returncode}"}
    return json.loads(out_file.read_text())


def run_paired(
    trees: Mapping[str, Path],
    bench: str,
    out_file: Path,
    inject: Mapping[str, float] | None = None,
    gpu: int | None = None,
    only: Path | None = None,
    trials: int = 20,
    launches: int | None = None,
    inject_cycles: Path | None = None,
) -> dict:
    """Run the worker once on all ``trees`` (side -> tree) paired: each side's kernels
    built by its own suite, then launched in turn in this one process. Its payload
    (``{"mode": "paired", "results": ...}`` or ``{"fatal": why}``). ``inject_cycles``
    as for ``run_worker``."""
    cmd = [sys.executable, str(WORKER), "--out", str(out_file), "--bench", bench]
    for side, tree in trees.items():
        cmd += ["--side", f"{side}={tree}"]
    for side, fraction in (inject or {}).items():
        cmd += ["--inject", f"{side}={fraction!r}"]
    cmd += ["--trials", str(trials)]
    if launches is not None:  # else the worker's own, per benchmark
        cmd += ["--launches", str(launches)]
    if inject_cycles is not None:
        cmd += ["--inject-cycles", str(inject_cycles)]
    if only is not None:
        cmd += ["--only", str(only)]
    env = dict(os.environ)
    if gpu is not None:
        env["CUDA_VISIBLE_DEVICES"] = visible_entry(gpu)
    return _run(cmd, env, next(iter(trees.values())), out_file)


def paired_gpus(
    trees: Mapping[str, Path],
    bench: str,
    out: Path,
    gpus: list[int],
    names: list[str],
    tag: str = "pair",
    **kwargs,
) -> dict:
    """``run_paired`` with the combinations ``names`` sharded over ``gpus`` (the suite's
    stable plan), all GPUs at once, merged into one payload. Every side of a combination
    shares its GPU."""
    from harness.suite.shard import plan

    shards = {g: s for g, s in plan(dict.fromkeys(names, 1.0), gpus).items() if s}
    files = {}
    for gpu, shard in shards.items():
        files[gpu] = out / f"shard-{tag}-gpu{gpu}.json"
        files[gpu].write_text(json.dumps(shard))
    with ThreadPoolExecutor(len(shards) or 1) as pool:
        parts = list(
            pool.map(
                lambda g: run_paired(
                    trees, bench, out / f"{tag}-gpu{g}.json", gpu=g, only=files[g], **kwargs
                ),
                shards,
            )
        )
    merged = merge(parts)
    if "fatal" not in merged:
        merged["mode"] = "paired"
        merged["tilelang"] = next((p.get("tilelang") for p in parts), None)
        merged["timer"] = timer_of(parts)
    return merged


def timer_of(payloads: list[dict]) -> str | None:
    """The timer the paired workers of ``payloads`` used (``cupti``, or ``event`` with why
    CUPTI was not), the distinct ones joined; None where none said (process mode)."""
    seen = dict.fromkeys(p["timer"] for p in payloads if p.get("timer"))
    return "; ".join(seen) or None


def resources(tree: Path, names: list[str], out_file: Path, site: Path | None = None) -> dict:
    """``{name: {registers, smem_bytes, spill_bytes, has_wgmma, has_tma} | {"error": why}}``
    of ``tree``'s kernels for the combinations ``names``, built for sm_90a by that
    revision's own code (the static tracks' ``sm90a_resources``); no GPU needed."""
    only = out_file.with_suffix(".names.json")
    only.write_text(json.dumps(names))
    cmd = [sys.executable, str(WORKER), "--tree", str(tree), "--out", str(out_file)]
    cmd += ["--resources", "--only", str(only)]
    payload = _run(cmd, tree_env(tree, site=site), tree, out_file)
    return payload if "fatal" in payload else payload.get("resources", {})


def interleave(
    trees: Mapping[str, Path],
    bench: str,
    rounds: int,
    out: Path,
    inject_head: float = 0.0,
    log: Callable[[str], None] = print,
    gpu: int | None = None,
    only: Path | None = None,
    options: Mapping[str, Mapping] | None = None,
) -> list[dict]:
    """Run both sides ``rounds`` times, alternating which goes first; one fresh worker
    process per side per round, on ``gpu`` (all visible when None). ``options[side]``
    holds ``run_worker``'s ``site``/``python``/``env`` for that side (the dependency A/B
    runs one tree in two environments)."""
    payloads = []
    tag = "" if gpu is None else f"-gpu{gpu}"
    for r in range(rounds):
        order = SIDES if r % 2 == 0 else SIDES[::-1]
        got = {}
        for side in order:
            log(f"gate{tag}: round {r + 1}/{rounds}: {side}")
            inject = inject_head if side == "head" else 0.0
            got[side] = run_worker(
                trees[side],
                bench,
                out / f"{side}{tag}-{r}.json",
                inject,
                gpu,
                only,
                **(options or {}).get(side, {}),
            )
        payloads.append(got)
    return payloads


def list_names(trees: Mapping[str, Path], bench: str, out: Path) -> list[str]:
    """The combination names ``bench`` matches on any of ``trees`` (no GPU needed)."""
    names: dict[str, None] = {}
    for side, tree in trees.items():
        payload = run_worker(tree, bench, out / f"{side}-names.json", listing=True)
        names.update(dict.fromkeys(payload.get("names", [])))
    return list(names)


def interleave_gpus(
    trees: Mapping[str, Path],
    bench: str,
    rounds: int,
    out: Path,
    gpus: list[int],
    log: Callable[[str], None] = print,
) -> list[dict]:
    """Shard the benchmarks over ``gpus`` (the suite's stable plan over the union of both
    sides' names), run each shard's interleaved rounds on its own GPU at once, and merge
    the rounds. Base and head of one benchmark always share a GPU."""
    from harness.suite.shard import plan

    # Per combination: the worker measures each one on its own, at about equal cost.
    shards = plan(dict.fromkeys(list_names(trees, bench, out), 1.0), gpus)
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
    return [
        {side: merge([part[r][side] for part in parts]) for side in SIDES} for r in range(rounds)
    ]


def merge(payloads: list[dict]) -> dict:
    """One payload from several GPUs' shards of one side and round."""
    fatal = [p for p in payloads if "fatal" in p]
    if fatal:
        merged = {"fatal": "; ".join(dict.fromkeys(p["fatal"] for p in fatal))}
        sides = {p.get("side") for p in fatal}
        if len(sides) == 1 and None not in sides:
            merged["side"] = sides.pop()  # a paired worker named the side that failed
        return merged
    results: dict = {}
    for p in payloads:
        results.update(p.get("results", {}))
    return {"results": results}


def gpus_for(spec: str | None) -> list[int] | None:
    """The GPUs a measuring command may use: None (the visible device) without ``spec``,
    else the indices ``spec`` names. ValueError, saying why, where there is no CUDA GPU
    or ``spec`` names GPUs that are not there."""
    from harness.measure import device

    reason = device.no_gpu_reason()
    if reason:
        raise ValueError(f"needs a CUDA GPU: {reason}")
    return None if spec is None else select_gpus(spec)


def select_gpus(spec: str) -> list[int]:
    """``all`` or ``0,1`` checked against the GPUs this process sees (ValueError)."""
    import torch

    from harness.suite.shard import parse_gpus

    return parse_gpus(spec, torch.cuda.device_count())


def calibration_path(machine: str | None = None) -> Path:
    """Where ``nox -s calibrate`` writes, and the gate reads, per-benchmark thresholds."""
    if machine is None:
        from harness.measure import device

        machine = device.machine_name()
    return ROOT / "calibration" / f"{machine}.json"


def default_bench() -> str:
    """The gate's default subset, as the suite declares it (``GATE_SUBSET`` in the suite
    package), so nothing here names the suite's classes."""
    from harness.suite import discovery

    subset = discovery.suite_attribute(ROOT, "GATE_SUBSET")
    if not subset:
        raise RuntimeError(f"{discovery.benchmark_dir(ROOT)}/__init__.py: no GATE_SUBSET regex")
    return subset
