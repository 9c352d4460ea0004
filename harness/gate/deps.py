"""The dependency A/B: one commit measured under two TileLang builds, with the gate's rule.

    nox -s gate_deps -- --base installed --head 0.1.16 [--rev HEAD] [--bench REGEX]
    nox -s gate_deps -- --base /opt/site-0.1.14 --head installed --rounds 4
    python -m harness.gate.deps --base SPEC --head SPEC ...

A SPEC names where one side's TileLang comes from:

- ``installed``: the environment this command runs in;
- a version (``0.1.14``), or ``latest`` for the newest release on the package index:
  pip installs that TileLang alone (``--no-deps``) into ``.gate/sites/tilelang-VERSION``,
  a site folder put first on the side's path; kept for the next run;
- a site folder: a directory holding a ``tilelang`` package, put first on the path (how an
  offline GPU host carries a second version);
- a Python environment: a virtualenv directory or its interpreter, with torch and
  TileLang of its own.

Two TileLang builds cannot share one process, so the sides alternate as the process gate's
rounds do (base, head, then head, base, ...), one fresh worker process per side and round,
each with its own TileLang kernel cache; samples are pooled and judged by
``harness.gate.decide`` (latency, confirmed against torch.matmul measured beside it). Every
side's worker reports the TileLang it imported, and a side that imported another version
than its SPEC names is an error. Writes ``report.md`` and ``samples.json`` to ``--out``.
Exit status as the gate's: 0 no regression, 1 a regression, 2 bad input or a failure.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from harness.cli import EXIT_FAILURE, fraction, output_dir, positive_int, regex
from harness.gate import decide as gd
from harness.gate import run as gate
from harness.gate import samples as gs
from harness.report.gate import render_markdown
from harness.revisions import fanout, git, launch, records
from harness.suite import discovery

VERSION = re.compile(r"\d+(\.\d+){1,3}([a-z]+\d*)?(\.(dev|post)\d+)?")
PACKAGE = "tilelang"


class DepsError(ValueError):
    """A SPEC that names no usable TileLang."""


@dataclass(frozen=True)
class Env:
    """Where one side's TileLang comes from, as ``launch.run_worker`` takes it."""

    spec: str
    label: str
    site: Path | None = None
    python: str = sys.executable
    expect: str | None = None  # the version the side must import, when the SPEC names one
    env: dict[str, str] = field(default_factory=dict)

    def options(self) -> dict:
        return {"site": self.site, "python": self.python, "env": self.env}


def newest_release(python: str = sys.executable) -> str:
    """The newest TileLang version on the package index (pip's ``index versions``)."""
    proc = subprocess.run(
        [python, "-m", "pip", "index", "versions", PACKAGE],
        capture_output=True,
        text=True,
        check=False,
    )
    found = re.search(rf"^{PACKAGE} \(([^)]+)\)", proc.stdout, re.M)
    if proc.returncode or not found:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["no output"]
        raise DepsError(f"latest: cannot read TileLang releases from the index ({tail[0]})")
    return found.group(1)


def install_site(version: str, sites: Path, python: str = sys.executable) -> Path:
    """``sites/tilelang-VERSION`` holding TileLang ``version`` alone (pip ``--target``,
    no dependencies: the environment's torch and the rest are shared); reused when there."""
    site = sites / f"{PACKAGE}-{version}"
    if (site / PACKAGE / "__init__.py").exists():
        return site
    tmp = sites / f".{PACKAGE}-{version}.partial"
    proc = subprocess.run(
        [python, "-m", "pip", "install", "--quiet", "--no-deps", "--target", str(tmp)]
        + [f"{PACKAGE}=={version}"],
        capture_output=True,
        text=True,
        check=False,
    )
    if proc.returncode:
        lines = [ln for ln in proc.stderr.strip().splitlines() if ln.startswith("ERROR")]
        why = lines[0] if lines else (proc.stderr.strip().splitlines()[-1:] or ["pip failed"])[0]
        raise DepsError(f"TileLang {version}: unknown version or not installable ({why})")
    tmp.rename(site)
    return site


def resolve_env(spec: str, sites: Path) -> Env:
    """The Env a SPEC names; DepsError saying what is wrong with it otherwise."""
    if spec == "installed":
        return Env(spec, "installed")
    if spec == "latest" or VERSION.fullmatch(spec):
        version = newest_release() if spec == "latest" else spec
        site = install_site(version, sites)
        return Env(spec, f"TileLang {version}", site=site, expect=version)
    path = Path(spec).expanduser()
    if not path.exists():
        raise DepsError(
            f"{spec!r}: not 'installed', 'latest', a TileLang version (0.1.14), a site "
            "folder or a Python environment (no such path)"
        )
    if path.is_dir() and (path / "bin" / "python").exists():
        return Env(spec, f"environment {path.name}", python=str(path / "bin" / "python"))
    if path.is_file():
        if not os.access(path, os.X_OK):
            raise DepsError(f"{spec!r}: a file that is not an executable Python interpreter")
        return Env(spec, f"interpreter {path}", python=str(path))
    if not (path / PACKAGE / "__init__.py").is_file():
        raise DepsError(f"{spec!r}: a site folder without TileLang (no {PACKAGE}/__init__.py)")
    return Env(spec, f"site {path.name}", site=path.resolve())


def probe(env: Env, tree: Path) -> str:
    """The TileLang version ``env`` imports (DepsError when it cannot import one, or one
    other than it names)."""
    proc = subprocess.run(
        [env.python, "-c", f"import {PACKAGE}; print({PACKAGE}.__version__)"],
        env={**git.tree_env(tree, site=env.site), **env.env},
        cwd=tree,
        capture_output=True,
        text=True,
        check=False,
    )
    if proc.returncode:
        last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        raise DepsError(f"{env.spec!r}: cannot import TileLang there ({last})")
    version = proc.stdout.strip().splitlines()[-1]
    if env.expect and version != env.expect:
        raise DepsError(f"{env.spec!r}: imports TileLang {version}, not {env.expect}")
    return version


def check_versions(rounds: list[dict], expected: dict[str, str]) -> list[str]:
    """Problems with the TileLang each side's workers imported: one that differs from the
    version probed for that side."""
    problems = []
    for r in rounds:
        for side, run in r.items():
            got = None if isinstance(run, records.Fatal) else run.tilelang
            if got is not None and got != expected[side]:
                problems.append(f"{side}: a worker imported TileLang {got}, not {expected[side]}")
    return list(dict.fromkeys(problems))


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="nox -s gate_deps --",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--base", required=True, help="SPEC of the base side (see above)")
    p.add_argument("--head", required=True, help="SPEC of the head side (see above)")
    p.add_argument("--rev", default="HEAD", help="the commit measured on both sides")
    p.add_argument(
        "-b", "--bench", type=regex, default=None, help="regex (default: the GATE_SUBSET)"
    )
    p.add_argument("--rounds", type=positive_int, default=4, help="rounds per side (>= 1)")
    p.add_argument(
        "--threshold",
        type=fraction,
        default=gd.DEFAULT_THRESHOLD,
        help="slowdown that counts (0.02 = 2%%), as the process gate's",
    )
    p.add_argument(
        "--out", type=output_dir, default=git.ROOT / ".gate" / "deps", help="work folder"
    )
    return p


def main(argv: list[str] | None = None) -> int:
    from harness.measure import device

    args = build_parser().parse_args(argv)
    log = lambda line: print(line, file=sys.stderr, flush=True)  # noqa: E731
    out = args.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    try:
        sha = git.resolve(args.rev, "--rev")
        bench = args.bench or discovery.gate_subset(git.ROOT)
        envs = {
            "base": resolve_env(args.base, out.parent / "sites"),
            "head": resolve_env(args.head, out.parent / "sites"),
        }
    except (DepsError, git.RevisionError, RuntimeError) as err:
        print(f"gate_deps: error: {err}", file=sys.stderr)
        return EXIT_FAILURE
    reason = device.no_gpu_reason()
    if reason:
        print(f"gate_deps: error: needs a CUDA GPU: {reason}", file=sys.stderr)
        return EXIT_FAILURE
    tree = git.worktree(out, "tree", sha)
    try:
        versions = {side: probe(env, tree) for side, env in envs.items()}
    except DepsError as err:
        print(f"gate_deps: error: {err}", file=sys.stderr)
        return EXIT_FAILURE
    cache = Path(os.environ.get("TILELANG_CACHE_DIR", "~/.tilelang/cache")).expanduser()
    options = {}
    for side, env in envs.items():
        # One kernel cache per TileLang build: neither loads what the other compiled.
        side_cache = cache.parent / f"{cache.name}-tilelang-{versions[side]}-{side}"
        options[side] = {**env.options(), "env": {**env.env, "TILELANG_CACHE_DIR": str(side_cache)}}
    log(f"gate_deps: {sha[:10]}: base TileLang {versions['base']}, head {versions['head']}")
    start = time.perf_counter()
    trees = {"base": tree, "head": tree}
    launch.precompile(trees, bench, log=log, options=options)
    compile_s = time.perf_counter() - start
    measured = fanout.interleave(trees, bench, args.rounds, out, log=log, options=options)
    problems = check_versions(measured, versions)
    verdicts = gd.decide_all(gs.pool(measured), threshold=args.threshold)
    if not verdicts:
        print(f"gate_deps: error: no benchmark matched --bench {bench!r}", file=sys.stderr)
        return EXIT_FAILURE
    context = {
        "GPU": device.gpu_name(),
        "commit": sha[:10],
        "base": f"{envs['base'].label}: TileLang {versions['base']}",
        "head": f"{envs['head'].label}: TileLang {versions['head']}",
        "method": f"process: {args.rounds} rounds, interleaved, one fresh process per side "
        "per round, one kernel cache per TileLang",
        "GPU state": gs.gpu_summary(gs.runs_of(measured, "process")),
        "wall time": f"{time.perf_counter() - start:.0f} s (compile {compile_s:.0f} s)",
    }
    report = render_markdown(
        verdicts,
        passed=not gd.exit_code(verdicts),
        base_label=f"TileLang {versions['base']}",
        head_label=f"TileLang {versions['head']}",
        context=context,
    )
    gate.write_report(out, report, measured)
    if problems:
        print("gate_deps: error: " + "; ".join(problems), file=sys.stderr)
        return EXIT_FAILURE
    return gd.exit_code(verdicts)


if __name__ == "__main__":
    sys.exit(main())
