"""Shared fixtures and skip rules."""

import os
import shutil

import pytest

# Under pytest-xdist with GEMM_TEST_GPUS set (nox -s gpu_tests on several GPUs), worker
# gwN sees only GPU N, before anything initialises CUDA.
_worker = os.environ.get("PYTEST_XDIST_WORKER", "")
if _worker.startswith("gw") and os.environ.get("GEMM_TEST_GPUS"):
    _gpus = os.environ["GEMM_TEST_GPUS"].split(",")
    os.environ["CUDA_VISIBLE_DEVICES"] = _gpus[int(_worker[2:]) % len(_gpus)]

from harness.measure.device import no_gpu_reason  # noqa: E402

NO_GPU = no_gpu_reason()
# Skip GPU tests where no CUDA device is visible; `nox -s gpu_tests` refuses to run there.
requires_gpu = pytest.mark.skipif(NO_GPU is not None, reason=f"needs a CUDA GPU: {NO_GPU}")


def nvcc_path() -> str | None:
    home = os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH")
    if home and os.path.exists(os.path.join(home, "bin", "nvcc")):
        return os.path.join(home, "bin", "nvcc")
    return shutil.which("nvcc")


# TileLang cross-compiles for sm_90a on a CPU machine, but only with the CUDA compiler.
requires_nvcc = pytest.mark.skipif(nvcc_path() is None, reason="needs nvcc to build for sm_90a")


def pytest_collection_finish(session):
    """Compile the selected GPU tests' kernels in parallel before the first one runs: in
    series they take 3-5 s each, and the tests then load them from TileLang's disk cache."""
    # nox -s gpu_tests compiles in a collect-only pass first; its workers skip this.
    if NO_GPU is not None or os.environ.get("GEMM_TESTS_PRECOMPILED"):
        return
    from harness.ops.registry import operator_for
    from harness.suite.discovery import Combination
    from harness.suite.precompile import precompile
    from kernels import GemmConfig, GemmShape

    pairs = []
    for item in session.items:
        params = getattr(getattr(item, "callspec", None), "params", {})
        if {"size", "dtype", "layout", "config"} <= params.keys():
            shape = GemmShape(*params["size"], params["dtype"], params["layout"])
            pairs.append((shape, params["config"]))
        elif isinstance(params.get("config"), GemmConfig) and params.get("shape") is not None:
            pairs.append((params["shape"], params["config"]))
    combos = [Combination(str(i), operator_for(s).name, s, c) for i, (s, c) in enumerate(pairs)]
    if len(combos) > 2:
        precompile(combos, log=lambda line: None)


@pytest.fixture
def worker_entry(monkeypatch):
    """``worker_entry(mode)``: the gate worker's entry point ``mode`` loaded as its script
    runs (``tests.fakes.load_worker``), with ``sys.path`` and the worker's sibling modules
    put back afterwards."""
    import sys

    from tests.fakes import WORKER_SIBLINGS, load_worker

    monkeypatch.setattr(sys, "path", list(sys.path))
    yield load_worker
    for name in WORKER_SIBLINGS:
        sys.modules.pop(name, None)
