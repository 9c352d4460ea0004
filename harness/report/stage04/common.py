"""What the stage-04 report's sections share: the template's pieces, number formats, tile
arithmetic and the device the recorded data names (its SM count and datasheet peaks)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from harness.measure import metrics
from harness.measure.device import Peaks, no_peaks, peaks_for
from harness.report import template
from kernels import GemmConfig, GemmShape
from kernels.gemm import ELEMENT_BYTES, WARPGROUP

BASELINE = GemmConfig()
# The case whose tuner log the knob comparisons and the per-config plot are drawn from.
KNOB_CASE = "square4096"


def fmt_optional(x, spec: str) -> str:
    """``format(x, spec)``, or ``-`` for a missing value."""
    return "-" if x is None else format(x, spec)


def pct(x: float) -> str:
    return f"{100 * x:+.1f}%"


def sci(x: float) -> str:
    """``2e-3`` rather than ``2e-03``."""
    mantissa, exponent = f"{x:.0e}".split("e")
    return f"{mantissa}e{int(exponent)}"


def plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def pieces() -> Mapping[str, str]:
    return template.load("stage04")


def fill(name: str, **values) -> str:
    # A piece ends where its text ends: a conditional part at its end keeps its line break.
    return template.fill(pieces()[name], values).rstrip("\n")


def lines(name: str, items: Sequence[Mapping]) -> str:
    return "\n".join(fill(name, **item) for item in items)


def best_row(rows):
    timed = [r for r in rows if r.tilelang_ms is not None and (r.check is None or r.check.ok)]
    return min(timed, key=lambda r: r.tilelang_ms) if timed else None


def by_shape(results) -> dict:
    groups: dict = {}
    for r in results:
        groups.setdefault(r.shape, []).append(r)
    return groups


def tile(c: GemmConfig) -> str:
    return f"{c.block_m}x{c.block_n}x{c.block_k}"


def grid(shape: GemmShape, c: GemmConfig) -> int:
    """Output tiles the config launches for (times its K splits)."""
    return math.ceil(shape.m / c.block_m) * math.ceil(shape.n / c.block_n) * c.split_k


def reuse(c: GemmConfig) -> float:
    """FLOPs per byte a block loads per K step: 2*bm*bn*bk / ((bm + bn) * bk * 2 B)."""
    return 2 * c.block_m * c.block_n / ((c.block_m + c.block_n) * ELEMENT_BYTES)


def warpgroups(c: GemmConfig) -> str:
    return plural(c.threads // WARPGROUP, "consumer warpgroup")


def shape_text(shape: GemmShape) -> str:
    return f"{shape.m}x{shape.n}x{shape.k} {shape.dtype}"


@dataclass(frozen=True, slots=True)
class Roof:
    """A shape's place on the roofline of a device's datasheet peaks."""

    intensity: float  # FLOP per byte of HBM traffic
    ridge: float  # the intensity where the memory roof meets the compute roof
    peak: float  # dense TFLOP/s for the shape's dtype
    bandwidth: float  # HBM TB/s
    roof: float  # attainable TFLOP/s at the shape's intensity

    @property
    def compute_bound(self) -> bool:
        return self.intensity >= self.ridge


@dataclass(frozen=True, slots=True)
class Device:
    """The GPU the recorded data names: its SM count (as recorded; None where nothing
    records it) and its datasheet peaks (None for a device the peaks table lacks)."""

    name: str
    sm_count: int | None
    peaks: Peaks | None

    @classmethod
    def named(cls, name: str, sm_count: int | None) -> Device:
        return cls(name, sm_count, peaks_for(name))

    @property
    def no_peaks(self) -> str:
        return no_peaks(self.name)

    def roof(self, shape: GemmShape) -> Roof | None:
        """``shape`` on this device's roofline; None without peak figures."""
        if self.peaks is None:
            return None
        peak, bandwidth = self.peaks.tflops(shape.dtype), self.peaks.hbm_tbps
        ai = metrics.arithmetic_intensity(shape.flops, shape.min_bytes)
        return Roof(
            ai, peak / bandwidth, peak, bandwidth, metrics.roofline_tflops(ai, peak, bandwidth)
        )
