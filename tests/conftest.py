"""Shared fixtures and skip rules."""

import os
import shutil

import pytest

from harness.device import no_gpu_reason

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
    if NO_GPU is not None:
        return
    from harness.precompile import precompile
    from kernels import GemmShape

    pairs = []
    for item in session.items:
        params = getattr(getattr(item, "callspec", None), "params", {})
        if {"size", "dtype", "layout", "config"} <= params.keys():
            shape = GemmShape(*params["size"], params["dtype"], params["layout"])
            pairs.append((shape, params["config"]))
    if len(pairs) > 2:
        precompile(pairs, log=lambda line: None)
