"""What GPU is present, and a clear error where one is needed but absent."""

from __future__ import annotations

import os


class NoGpuError(RuntimeError):
    """Raised where a command needs a CUDA device and none is visible."""


def cuda_available() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available()


def no_gpu_reason() -> str | None:
    """Why GPU work cannot run here, or None when a CUDA device is visible."""
    try:
        import torch
    except ImportError:
        return "torch is not installed"
    if not torch.cuda.is_available():
        build = "a CPU-only torch build" if torch.version.cuda is None else "no visible device"
        return f"no CUDA device visible (torch {torch.__version__}, {build})"
    return None


def require_gpu() -> None:
    reason = no_gpu_reason()
    if reason:
        raise NoGpuError(reason)


def gpu_name(index: int = 0) -> str:
    """The device name, e.g. ``NVIDIA H200``; ``cpu`` without a GPU."""
    if not cuda_available():
        return "cpu"
    import torch

    return torch.cuda.get_device_name(index)


def machine_name() -> str:
    """asv machine name. asv's machine file has no GPU field, so the GPU is the name
    (``h200``, ``cpu``), stable across runner re-images; ``$ASV_MACHINE`` overrides it."""
    override = os.environ.get("ASV_MACHINE")
    if override:
        return override
    return gpu_name().lower().replace("nvidia ", "").replace(" ", "-")


def versions() -> dict[str, str]:
    """Versions that shape the numbers: TileLang, torch, CUDA and driver."""
    out: dict[str, str] = {}
    try:
        import tilelang

        out["tilelang"] = tilelang.__version__
    except ImportError:
        out["tilelang"] = "missing"
    try:
        import torch

        out["torch"] = torch.__version__
        out["cuda"] = str(torch.version.cuda)
    except ImportError:
        out["torch"] = "missing"
    return out
