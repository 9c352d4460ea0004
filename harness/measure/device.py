"""What GPU is present, and a clear error where one is needed but absent.

``DeviceSpec.read()`` reads the device's own figures (SM count, opt-in shared memory per
block, L2, compute capability) from torch; the datasheet peaks come from ``peaks.json``
beside this file, keyed by the device's name. A device the file does not name has no
peaks, and whatever needs them says so; nothing here assumes a particular GPU.
"""

from __future__ import annotations

import functools
import json
import math
import os
from dataclasses import dataclass
from pathlib import Path

PEAKS_FILE = Path(__file__).with_name("peaks.json")
# torch's name of the opt-in maximum of shared memory per block, newest first.
_SMEM_OPTIN = ("shared_memory_per_block_optin", "max_shared_memory_per_block_optin")


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


class DeviceSpecError(ValueError):
    """A device figure or the peaks table is invalid: the message names the field and rule."""


def _positive_int(owner: str, field: str, value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise DeviceSpecError(f"{owner}.{field}={value!r}: must be an int > 0")


def _positive_number(owner: str, field: str, value: object) -> None:
    ok = isinstance(value, (int, float)) and not isinstance(value, bool)
    if not ok or not math.isfinite(value) or value <= 0:
        raise DeviceSpecError(f"{owner}.{field}={value!r}: must be a finite number > 0")


@dataclass(frozen=True, slots=True)
class Peaks:
    """Datasheet peaks of one part: dense tensor-core TFLOP/s per dtype, HBM TB/s."""

    float16_tflops: float
    bfloat16_tflops: float
    hbm_tbps: float

    def __post_init__(self) -> None:
        for field in ("float16_tflops", "bfloat16_tflops", "hbm_tbps"):
            _positive_number("Peaks", field, getattr(self, field))

    def tflops(self, dtype: str) -> float:
        if dtype not in ("float16", "bfloat16"):
            raise DeviceSpecError(f"dtype={dtype!r}: must be 'float16' or 'bfloat16'")
        return self.float16_tflops if dtype == "float16" else self.bfloat16_tflops


@functools.cache
def peak_table(path: Path = PEAKS_FILE) -> dict[str, Peaks]:
    """Device name (torch's) -> its datasheet peaks, every entry checked."""
    data = json.loads(path.read_text())
    table = {}
    for name, entry in data.items():
        try:
            flops = entry["dense_tflops"]
            table[name] = Peaks(flops["float16"], flops["bfloat16"], entry["hbm_tbps"])
        except (KeyError, TypeError) as err:
            raise DeviceSpecError(
                f"{path}: {name!r}: needs dense_tflops.float16, dense_tflops.bfloat16 and "
                f"hbm_tbps (missing {err})"
            ) from None
        except DeviceSpecError as err:
            raise DeviceSpecError(f"{path}: {name!r}: {err}") from None
    return table


def peaks_for(name: str) -> Peaks | None:
    """The datasheet peaks of the device called ``name``; None for a device not in the
    table (its roofline is then not drawn, never borrowed from another part)."""
    return peak_table().get(name)


def no_peaks(name: str) -> str:
    """What a report says where a figure needs the peaks of a device the table lacks."""
    return f"n/a (no peak figures for {name})"


@dataclass(frozen=True, slots=True)
class DeviceSpec:
    """One GPU as its driver describes it, plus its datasheet peaks when known."""

    name: str
    sm_count: int
    smem_per_block_bytes: int  # the opt-in maximum one block may ask for
    l2_bytes: int
    compute_capability: tuple[int, int]
    peaks: Peaks | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name.strip():
            raise DeviceSpecError(f"DeviceSpec.name={self.name!r}: must be a non-empty string")
        for field in ("sm_count", "smem_per_block_bytes", "l2_bytes"):
            _positive_int("DeviceSpec", field, getattr(self, field))
        cc = self.compute_capability
        if (
            not isinstance(cc, tuple)
            or len(cc) != 2
            or any(isinstance(x, bool) or not isinstance(x, int) or x < 0 for x in cc)
            or cc[0] < 1
        ):
            raise DeviceSpecError(
                f"DeviceSpec.compute_capability={cc!r}: must be (major, minor), ints, major >= 1"
            )
        if self.peaks is not None and not isinstance(self.peaks, Peaks):
            raise DeviceSpecError(f"DeviceSpec.peaks={self.peaks!r}: must be Peaks or None")

    @classmethod
    def from_properties(cls, props: object) -> DeviceSpec:
        """From a torch ``_CudaDeviceProperties`` (or anything with its attributes)."""
        smem = next((getattr(props, a) for a in _SMEM_OPTIN if hasattr(props, a)), None)
        if smem is None:
            raise DeviceSpecError(
                f"{getattr(props, 'name', 'the device')}: torch reports no opt-in shared "
                f"memory per block (looked for {', '.join(_SMEM_OPTIN)}); "
                "a torch build for CUDA has it"
            )
        name = props.name
        return cls(
            name=name,
            sm_count=props.multi_processor_count,
            smem_per_block_bytes=smem,
            l2_bytes=props.L2_cache_size,
            compute_capability=(props.major, props.minor),
            peaks=peaks_for(name),
        )

    @classmethod
    def read(cls, index: int = 0) -> DeviceSpec:
        """The spec of CUDA device ``index``; ``NoGpuError`` where none is visible."""
        require_gpu()
        import torch

        return cls.from_properties(torch.cuda.get_device_properties(index))

    def record(self) -> dict[str, object]:
        """The driver's figures, for a run's meta line (the peaks are the table's)."""
        return {
            "sm_count": self.sm_count,
            "smem_per_block_bytes": self.smem_per_block_bytes,
            "l2_bytes": self.l2_bytes,
            "compute_capability": f"{self.compute_capability[0]}.{self.compute_capability[1]}",
        }
