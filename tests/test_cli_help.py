"""Every command of the project answers ``--help`` on the CPU: exit 0, a usage line, no
traceback. A module that can be run (``if __name__ == "__main__"`` or a ``__main__.py``)
and is missing from the table below fails, so a new command gets this check too."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
WORKER = "harness/gate/worker"

# (how it is started, arguments before --help). ``-m``: as a module; a path: as a script,
# the way the gate starts its worker and a revision's discovery (``harness.revisions.launch``).
COMMANDS = [
    ("-m", "harness.suite.run"),
    ("-m", "harness.suite.regressions"),
    ("-m", "harness.suite.announce"),
    ("-m", "harness.suite.history"),
    ("-m", "harness.suite.history", "publish"),
    ("-m", "harness.suite.history", "backfill"),
    ("-m", "harness.suite.cost"),
    ("-m", "harness.suite.whatif"),
    ("-m", "harness.suite.scaling"),
    ("-m", "harness.suite.precompile"),
    ("-m", "harness.suite.asv_stats"),
    ("-m", "harness.suite.agreement"),
    ("-m", "harness.suite.results_branch"),
    # The publish workflow runs it without site-packages (it may hold the push token).
    ("-S", "-m", "harness.suite.results_branch"),
    ("harness/suite/discovery.py",),
    ("-m", "harness.gate"),
    ("-m", "harness.gate.run"),
    ("-m", "harness.gate.calibrate"),
    ("-m", "harness.gate.selftest"),
    ("-m", "harness.gate.bisection"),
    ("-m", "harness.gate.deps"),
    (f"{WORKER}/process.py",),
    (f"{WORKER}/paired.py",),
    (f"{WORKER}/listing.py",),
    (f"{WORKER}/resources.py",),
    ("-m", "benchmarks.bench_gemm"),
    ("-m", "benchmarks.tune_gemm"),
    ("-m", "benchmarks.offtable"),
    ("-m", "benchmarks.misses"),
    ("-m", "benchmarks.draw_shapes"),
    ("-m", "benchmarks.panels"),
    ("-m", "benchmarks.torch_kernels"),
    ("-m", "benchmarks.profile_gemm"),
    ("-m", "benchmarks.validate_space"),
    ("-m", "families.grouped_gemm.cli"),
]


def _id(command: tuple[str, ...]) -> str:
    return " ".join(command).replace("-m ", "")


@pytest.mark.parametrize("command", COMMANDS, ids=[_id(c) for c in COMMANDS])
def test_help_runs_on_the_cpu(command):
    out = subprocess.run(
        [sys.executable, *command, "--help"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**os.environ, "CUDA_VISIBLE_DEVICES": ""},
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    assert "Traceback" not in out.stderr
    assert out.stdout.startswith("usage: "), out.stdout[:200]
    assert "--help" in out.stdout


def _runnable() -> set[str]:
    """Every module of the project that can be run, as its path under the root."""
    found = set()
    for top in ("harness", "benchmarks", "families", "kernels", "asv_bench"):
        for path in (ROOT / top).rglob("*.py"):
            text = path.read_text()
            if path.name == "__main__.py" or re.search(r"^if __name__ == .__main__.:", text, re.M):
                found.add(path.relative_to(ROOT).as_posix())
    return found


def _covered() -> set[str]:
    out = set()
    for command in COMMANDS:
        target = command[command.index("-m") + 1] if "-m" in command else command[0]
        if "/" in target:
            out.add(target)
            continue
        base = ROOT.joinpath(*target.split("."))
        main = base / "__main__.py"
        out.add((main if main.exists() else base.with_suffix(".py")).relative_to(ROOT).as_posix())
    return out


def test_every_runnable_module_is_in_the_table():
    missing = sorted(_runnable() - _covered())
    assert not missing, f"add these commands to COMMANDS: {missing}"
