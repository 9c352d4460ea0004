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
