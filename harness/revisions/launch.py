"""The gate's worker, started: every command line it is run with, in one place. Each mode
is its own entry point under ``harness/gate/worker/``, started as a script from this
checkout on a revision's worktree (one fresh process: that revision's own suite and
kernels), or on several at once (paired: their kernels launched in turn in one process).
Every run returns the ``records`` record its worker wrote, or a ``records.Fatal``.

    from harness.revisions import launch
    run = launch.run_worker(tree, bench_regex, out / "base-0.json")
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from harness.revisions import records
from harness.revisions.git import ROOT, pinned_env, tree_env

WORKER = ROOT / "harness" / "gate" / "worker"


def command(mode: str, out_file: Path, python: str | None = None) -> list[str]:
    """The start of the command line of the worker's ``mode`` entry point (``process``,
    ``paired``, ``listing`` or ``resources``)."""
    return [python or sys.executable, str(WORKER / f"{mode}.py"), "--out", str(out_file)]


def read(cmd: list[str], env: Mapping[str, str], cwd: Path, out_file: Path) -> records.Record:
    """Run one worker process; its record, or a ``records.Fatal`` where it wrote none."""
    out_file.unlink(missing_ok=True)  # nothing stale is read back
    proc = subprocess.run(cmd, env=dict(env), cwd=cwd, check=False)
    if proc.returncode or not out_file.exists():
        return records.Fatal(f"worker exited with status {proc.returncode}")
    return records.from_json(out_file.read_text())


def cycles_options(paths: Path | Sequence[Path] | None) -> list[str]:
    """``--inject-cycles`` once per file of calibrated delay cycles (one per slowdown)."""
    paths = [] if paths is None else [paths] if isinstance(paths, Path) else list(paths)
    return [arg for path in paths for arg in ("--inject-cycles", str(path))]


def run_worker(
    tree: Path,
    bench: str,
    out_file: Path,
    inject: float = 0.0,
    gpu: int | None = None,
    only: Path | None = None,
    site: Path | None = None,
    python: str | None = None,
    env: Mapping[str, str] | None = None,
    inject_cycles: Path | Sequence[Path] | None = None,
) -> records.ProcessRun | records.Fatal:
    """Run the worker on ``tree`` in a fresh process of ``python`` (this interpreter by
    default), with ``site``'s packages first and ``env`` set when given.
    ``inject_cycles`` (a file of calibrated delay cycles) sets the injection's delay
    instead of calibrating it."""
    cmd = command("process", out_file, python) + ["--tree", str(tree), "--bench", bench]
    if only is not None:
        cmd += ["--only", str(only)]
    if inject:
        cmd += ["--inject-slowdown", repr(inject)]
    cmd += cycles_options(inject_cycles)
    return read(cmd, {**tree_env(tree, gpu, site), **(env or {})}, tree, out_file)


def run_paired(
    trees: Mapping[str, Path],
    bench: str,
    out_file: Path,
    inject: Mapping[str, float] | None = None,
    gpu: int | None = None,
    only: Path | None = None,
    trials: int = 20,
    launches: int | None = None,
    inject_cycles: Path | Sequence[Path] | None = None,
    launch_scale: Path | None = None,
) -> records.PairedRun | records.Fatal:
    """Run the worker once on all ``trees`` (side -> tree) paired: each side's kernels
    built by its own suite, then launched in turn in this one process. ``inject_cycles``
    as for ``run_worker``; ``launch_scale``, a JSON file of benchmarks' launch scales
    (``samples.write_launch_scales``)."""
    cmd = command("paired", out_file) + ["--bench", bench]
    for side, tree in trees.items():
        cmd += ["--side", f"{side}={tree}"]
    for side, fraction in (inject or {}).items():
        cmd += ["--inject", f"{side}={fraction!r}"]
    cmd += ["--trials", str(trials)]
    if launches is not None:  # else the worker's own, per benchmark
        cmd += ["--launches", str(launches)]
    cmd += cycles_options(inject_cycles)
    if launch_scale is not None:
        cmd += ["--launch-scale", str(launch_scale)]
    if only is not None:
        cmd += ["--only", str(only)]
    return read(cmd, pinned_env(gpu), next(iter(trees.values())), out_file)


def listing(tree: Path, bench: str, out_file: Path) -> records.Listing | records.Fatal:
    """The combination names ``bench`` selects on ``tree`` (no GPU needed)."""
    cmd = command("listing", out_file) + ["--tree", str(tree), "--bench", bench]
    return read(cmd, tree_env(tree), tree, out_file)


def list_names(trees: Mapping[str, Path], bench: str, out: Path) -> list[str]:
    """The combination names ``bench`` matches on any of ``trees`` (no GPU needed)."""
    names: dict[str, None] = {}
    for side, tree in trees.items():
        got = listing(tree, bench, out / f"{side}-names.json")
        if isinstance(got, records.Listing):
            names.update(dict.fromkeys(got.names))
    return list(names)


def resources(
    tree: Path, names: list[str], out_file: Path, site: Path | None = None
) -> records.Resources | records.Fatal:
    """The compiled resources of ``tree``'s kernels for the combinations ``names``, built
    for sm_90a by that revision's own code (the static tracks' ``sm90a_resources``); no
    GPU needed."""
    only = out_file.with_suffix(".names.json")
    only.write_text(json.dumps(names))
    cmd = command("resources", out_file) + ["--tree", str(tree), "--only", str(only)]
    return read(cmd, tree_env(tree, site=site), tree, out_file)


def precompile(
    trees: Mapping[str, Path],
    bench: str,
    log: Callable[[str], None] = print,
    options: Mapping[str, Mapping] | None = None,
) -> None:
    """Compile every side's kernels for ``bench`` into TileLang's disk cache, all sides at
    once, each with its own tree's precompile (a tree without one compiles in its worker);
    ``options[side]`` holds ``run_worker``'s ``site``/``python``/``env`` for that side."""
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
