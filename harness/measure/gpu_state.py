"""GPU state through NVML (nvidia-ml-py): clocks, temperature, power and the reasons the
clocks are held down. Read only; this project never changes clocks or other settings."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TypeVar

T = TypeVar("T")

# Reasons that mean the card is slowing itself: a sample taken under them is not the
# kernel's speed. (Idle, sync boost and application clocks are not throttling.)
THROTTLE_REASONS = {
    "nvmlClocksThrottleReasonSwPowerCap": "power cap",
    "nvmlClocksThrottleReasonHwSlowdown": "hardware slowdown",
    "nvmlClocksThrottleReasonSwThermalSlowdown": "thermal (software)",
    "nvmlClocksThrottleReasonHwThermalSlowdown": "thermal (hardware)",
    "nvmlClocksThrottleReasonHwPowerBrakeSlowdown": "power brake",
}
# Below this fraction of the maximum SM clock a busy GPU counts as clocked down.
MIN_CLOCK_FRACTION = 0.8


@dataclass(frozen=True, slots=True)
class GpuState:
    sm_clock_mhz: int
    max_sm_clock_mhz: int
    temperature_c: int
    power_w: float
    reasons: tuple[str, ...]  # active throttle reasons, by name
    # A window's lowest reading (``summarise``); None for a single reading.
    min_sm_clock_mhz: int | None = None

    def throttled(self, min_clock_fraction: float = MIN_CLOCK_FRACTION) -> str | None:
        """Why a sample taken now should not count, or None."""
        if self.reasons:
            return ", ".join(self.reasons)
        if self.sm_clock_mhz < min_clock_fraction * self.max_sm_clock_mhz:
            return f"SM clock {self.sm_clock_mhz} MHz < {min_clock_fraction:.0%} of max"
        return None


def visible_entry(cuda_index: int = 0, visible: str | None = None) -> str:
    """The ``CUDA_VISIBLE_DEVICES`` entry behind CUDA device ``cuda_index`` of this process
    (an index or a UUID of the host): the value that pins a child process to that same GPU.
    Without the variable, device ``cuda_index`` is the host's GPU ``cuda_index``.
    ``visible`` defaults to the environment's value."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES") if visible is None else visible
    if not visible or not visible.strip():
        return str(cuda_index)
    entries = [e.strip() for e in visible.split(",")]
    if cuda_index >= len(entries):
        raise ValueError(
            f"cuda_index={cuda_index}: CUDA_VISIBLE_DEVICES={visible!r} lists {len(entries)}"
        )
    return entries[cuda_index]


def nvml_device(cuda_index: int = 0, visible: str | None = None) -> int | str:
    """The NVML device behind CUDA device ``cuda_index``: its NVML index, or its UUID.

    NVML numbers every GPU of the host and ignores ``CUDA_VISIBLE_DEVICES``, which a
    shard or gate worker sets to pin itself to one GPU; CUDA device 0 of a process that
    sees only GPU 1 is NVML device 1.
    """
    entry = visible_entry(cuda_index, visible)
    return int(entry) if entry.isdigit() else entry


class Nvml:
    """One NVML handle for CUDA device ``index`` of this process (mapped through
    ``CUDA_VISIBLE_DEVICES``); ``read()`` is cheap enough per batch."""

    def __init__(self, index: int = 0) -> None:
        import pynvml

        pynvml.nvmlInit()
        self.nv = pynvml
        device = nvml_device(index)
        if isinstance(device, int):
            self.handle = pynvml.nvmlDeviceGetHandleByIndex(device)
        else:  # a UUID (GPU-..., MIG-...)
            self.handle = pynvml.nvmlDeviceGetHandleByUUID(device)
        self.max_sm = pynvml.nvmlDeviceGetMaxClockInfo(self.handle, pynvml.NVML_CLOCK_SM)

    def read(self) -> GpuState:
        nv, h = self.nv, self.handle
        mask = nv.nvmlDeviceGetCurrentClocksThrottleReasons(h)
        reasons = tuple(
            label for name, label in THROTTLE_REASONS.items() if mask & getattr(nv, name)
        )
        return GpuState(
            sm_clock_mhz=nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_SM),
            max_sm_clock_mhz=self.max_sm,
            temperature_c=nv.nvmlDeviceGetTemperature(h, nv.NVML_TEMPERATURE_GPU),
            power_w=nv.nvmlDeviceGetPowerUsage(h) / 1000.0,
            reasons=reasons,
        )

    def during(self, fn: Callable[[], T], interval_s: float = 0.002) -> tuple[T, GpuState]:
        """Run ``fn`` while a thread reads the GPU state every ``interval_s``; return its
        result and the state of that window (``summarise``). One reading taken after
        ``fn`` alone would often see the GPU already idle, clocking down; so would one
        between launches."""
        readings: list[GpuState] = []
        done = threading.Event()

        def poll() -> None:
            while not done.is_set():
                readings.append(self.read())
                done.wait(interval_s)

        thread = threading.Thread(target=poll, daemon=True)
        thread.start()
        try:
            result = fn()
        finally:
            done.set()
            thread.join()
        return result, summarise(readings or [self.read()])

    def driver(self) -> str:
        version = self.nv.nvmlSystemGetDriverVersion()
        return version.decode() if isinstance(version, bytes) else version


def summarise(
    readings: Sequence[GpuState], min_clock_fraction: float = MIN_CLOCK_FRACTION
) -> GpuState:
    """The state of a window from readings taken while its work ran: the clock the
    kernels ran at is the highest reading (the ramp from idle at its start, and the
    idle gaps between launches and trials, read lower and say nothing about the
    kernels), and the lowest is kept beside it. The readings taken at work clocks (within
    ``min_clock_fraction`` of that highest) decide the throttle reasons: each reason that
    at least half of them saw (a limiter that flickers once, or one the driver reports
    while the GPU idles between launches, is not the state the kernels ran in). The
    highest temperature and power."""
    if not readings:
        raise ValueError("readings: need at least one GpuState")
    top = max(r.sm_clock_mhz for r in readings)
    busy = [r for r in readings if r.sm_clock_mhz >= min_clock_fraction * top]
    seen = [name for r in busy for name in r.reasons]
    reasons = tuple(name for name in dict.fromkeys(seen) if 2 * seen.count(name) >= len(busy))
    return GpuState(
        sm_clock_mhz=top,
        max_sm_clock_mhz=readings[0].max_sm_clock_mhz,
        temperature_c=max(r.temperature_c for r in readings),
        power_w=max(r.power_w for r in readings),
        reasons=reasons,
        min_sm_clock_mhz=min(r.sm_clock_mhz for r in readings),
    )


def open_nvml(index: int = 0) -> Nvml | None:
    """An NVML reader, or None where NVML is absent (no driver, no GPU, no package)."""
    try:
        return Nvml(index)
    except Exception:  # pynvml raises its own NVMLError family, or ImportError
        return None
