"""PNG plots for the stage report: TFLOP/s per config of a sweep, and a roofline with the
measured points. matplotlib, headless (Agg); inputs are measured numbers, no GPU."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from harness.measure import metrics


@dataclass(frozen=True, slots=True)
class Bar:
    label: str  # a config id
    tflops: float


@dataclass(frozen=True, slots=True)
class Point:
    label: str  # a case, e.g. "square4096 f16"
    intensity: float  # FLOP per byte (A and B read once, C written once)
    tflops: float
    kind: str  # "TileLang" or "torch.matmul"


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def config_sweep(
    panels: Sequence[tuple[str, Sequence[Bar], float | None]], path: Path, title: str
) -> Path:
    """One horizontal bar chart per panel ``(subtitle, bars, torch_tflops)``, fastest on
    top, with torch.matmul's TFLOP/s as a vertical line."""
    plt = _pyplot()
    heights = [max(2.5, 0.16 * len(bars) + 1.0) for _, bars, _ in panels]
    fig, axes = plt.subplots(
        len(panels),
        1,
        figsize=(9, sum(heights)),
        gridspec_kw={"height_ratios": heights},
        squeeze=False,
        layout="constrained",  # keeps the figure title clear of the first panel's
    )
    for ax, (subtitle, bars, torch_tflops) in zip(axes[:, 0], panels, strict=True):
        ordered = sorted(bars, key=lambda b: b.tflops)
        ax.barh([b.label for b in ordered], [b.tflops for b in ordered], color="#4c72b0")
        if torch_tflops is not None:
            ax.axvline(torch_tflops, color="#c44e52", linestyle="--", label="torch.matmul")
            ax.legend(loc="lower right", fontsize=8)
        ax.set_title(subtitle, fontsize=10)
        ax.set_xlabel("TFLOP/s")
        ax.tick_params(axis="y", labelsize=6)
        ax.margins(y=0.5 / max(len(bars), 1))
    fig.suptitle(title)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def roofline(
    points: Sequence[Point],
    path: Path,
    title: str,
    peak_tflops: float,
    bandwidth_tbps: float,
) -> Path:
    """Log-log roofline: the memory roof (``bandwidth_tbps``) and the compute roof
    (``peak_tflops``, the GPU's datasheet figures from ``harness.measure.device``), each
    case's TileLang and torch.matmul throughput at its intensity."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(8, 5.5))
    lo = min(p.intensity for p in points) / 2
    hi = max(p.intensity for p in points) * 2
    xs = [lo * (hi / lo) ** (i / 200) for i in range(201)]
    ax.plot(
        xs,
        [metrics.roofline_tflops(x, peak_tflops, bandwidth_tbps) for x in xs],
        color="black",
        label=f"roof: {bandwidth_tbps} TB/s, {peak_tflops:.0f} TFLOP/s",
    )
    # Off-table shapes (``... (off-table)``) hollow or lighter, and not labelled.
    styles = {
        "TileLang": ("o", "#4c72b0", "#4c72b0"),
        "torch.matmul": ("x", None, "#c44e52"),
        "TileLang (off-table)": ("o", "none", "#4c72b0"),
        "torch.matmul (off-table)": ("+", None, "#e08a8c"),
    }
    for kind, (marker, face, edge) in styles.items():
        mine = [p for p in points if p.kind == kind]
        if not mine:
            continue
        # Line markers (x, +) take one colour; a filled one a face and an edge.
        colours = {"color": edge} if face is None else {"facecolors": face, "edgecolors": edge}
        ax.scatter(
            [p.intensity for p in mine],
            [p.tflops for p in mine],
            marker=marker,
            label=kind,
            zorder=3,
            **colours,
        )
    # One label per case (its dtypes share the intensity), staggered where cases crowd.
    labelled: dict[str, Point] = {}
    for p in points:
        case = p.label.split()[0]
        if p.kind == "TileLang" and case not in labelled:
            labelled[case] = p
    for i, (case, p) in enumerate(sorted(labelled.items(), key=lambda kv: kv[1].intensity)):
        ax.annotate(
            case,
            (p.intensity, p.tflops),
            fontsize=7,
            xytext=(6, -12 - 9 * (i % 3)),
            textcoords="offset points",
        )
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("arithmetic intensity (FLOP / byte of HBM traffic)")
    ax.set_ylabel("TFLOP/s")
    ax.set_title(title)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
