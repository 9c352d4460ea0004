"""The off-table measurement's records and what is read from them: per shape, the config
``kernels.tuned.pick_config`` chose and its speedup over torch.matmul in each round; over
all shapes, the median, the worst and how many fall below the floor. Written and read
here (``python3 -m benchmarks.offtable --json``), rendered as markdown here too.

speedup = torch.matmul latency / kernel latency (above 1 beats cuBLAS).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field

VERSION = 1
# What the off-table shapes must reach: the median speedup, and no shape below the floor.
TARGET_MEDIAN = 0.95
FLOOR = 0.90


@dataclass(frozen=True, slots=True)
class ShapeResult:
    """One shape: the config picked, where it came from (``table`` or ``heuristic``; with
    ``--first-use`` also ``first-use cache`` or ``tuned now``), the
    check against float64, and per round the kernel's and torch's latency and the speedup.
    ``error`` holds why a shape has no timing (a failed build or launch, a wrong result)."""

    shape: str
    m: int
    n: int
    k: int
    dtype: str
    layout: str
    categories: tuple[str, ...]
    config: str
    source: str
    rel_error: float | None = None
    correct: bool | None = None
    kernel_ms: tuple[float, ...] = ()
    torch_ms: tuple[float, ...] = ()
    launches: int = 0
    timer: str | None = None
    error: str | None = None
    # A first-use tuning's candidates, as it timed them (``config``, ``latency_ms`` or
    # ``error``): what the config was picked over.
    tried: tuple[Mapping, ...] = ()

    @classmethod
    def of(cls, shape, categories, config: str, source: str, **rest) -> ShapeResult:
        """The row of ``shape`` (a ``GemmShape``), its fields spelt out for the record."""
        return cls(
            shape.id,
            shape.m,
            shape.n,
            shape.k,
            shape.dtype,
            shape.layout,
            tuple(categories),
            config,
            source,
            **rest,
        )

    @property
    def speedups(self) -> tuple[float, ...]:
        """Per round: torch's latency over the kernel's."""
        return tuple(t / k for k, t in zip(self.kernel_ms, self.torch_ms, strict=True))

    @property
    def measured(self) -> bool:
        return bool(self.kernel_ms) and self.error is None

    @property
    def speedup(self) -> float | None:
        """The median over rounds; None for a shape that was not timed."""
        return statistics.median(self.speedups) if self.measured else None

    @property
    def spread(self) -> tuple[float, float] | None:
        """The lowest and highest round's speedup."""
        return (min(self.speedups), max(self.speedups)) if self.measured else None

    def to_dict(self) -> dict:
        out = asdict(self)
        out["categories"] = list(self.categories)
        out["kernel_ms"], out["torch_ms"] = list(self.kernel_ms), list(self.torch_ms)
        out["tried"] = [dict(t) for t in self.tried]
        out["speedups"] = list(self.speedups)
        out["speedup"], out["range"] = self.speedup, self.spread and list(self.spread)
        return out

    @classmethod
    def from_dict(cls, d: Mapping) -> ShapeResult:
        """Inverse of ``to_dict`` (the derived fields are recomputed, not read)."""
        names = [f for f in cls.__dataclass_fields__]
        missing = [f for f in ("shape", "config", "source") if f not in d]
        if missing:
            raise ValueError(f"an off-table row needs {missing}")
        values = {f: d[f] for f in names if f in d}
        for key in ("categories", "kernel_ms", "torch_ms"):
            values[key] = tuple(values.get(key, ()))
        values["tried"] = tuple(dict(t) for t in values.get("tried", ()))
        return cls(**values)


@dataclass(frozen=True, slots=True)
class Summary:
    """Over the measured shapes: the median and the worst speedup, and the shapes below
    ``floor``; ``failed`` counts shapes with no timing."""

    count: int
    median: float | None
    worst: float | None
    worst_shape: str | None
    below: tuple[str, ...]
    failed: int
    target_median: float = TARGET_MEDIAN
    floor: float = FLOOR

    @property
    def met(self) -> bool:
        """The goal: every shape timed, median at least the target, none below the floor."""
        return (
            self.median is not None
            and not self.failed
            and not self.below
            and self.median >= self.target_median
        )

    def line(self) -> str:
        if self.median is None:
            return f"no shape was timed ({self.failed} failed)"
        verdict = "met" if self.met else "NOT met"
        below = ", ".join(self.below) or "none"
        failed = f"; {self.failed} failed" if self.failed else ""
        return (
            f"{self.count} shapes: median speedup {self.median:.3f}, worst {self.worst:.3f} "
            f"({self.worst_shape}); below {self.floor:.2f}: {len(self.below)} ({below}){failed}"
            f" -- goal (median >= {self.target_median:.2f}, none below {self.floor:.2f}) {verdict}"
        )


def summarise(
    rows: Sequence[ShapeResult], target_median: float = TARGET_MEDIAN, floor: float = FLOOR
) -> Summary:
    timed = [r for r in rows if r.measured]
    failed = len(rows) - len(timed)
    if not timed:
        return Summary(len(rows), None, None, None, (), failed, target_median, floor)
    worst = min(timed, key=lambda r: r.speedup)
    return Summary(
        count=len(rows),
        median=statistics.median(r.speedup for r in timed),
        worst=worst.speedup,
        worst_shape=worst.shape,
        below=tuple(r.shape for r in timed if r.speedup < floor),
        failed=failed,
        target_median=target_median,
        floor=floor,
    )


@dataclass(frozen=True, slots=True)
class Record:
    """The file ``--json`` writes: the run's meta, its rows and their summary."""

    meta: Mapping[str, object]
    rows: tuple[ShapeResult, ...]
    version: int = field(default=VERSION)

    def to_dict(self) -> dict:
        summary = summarise(self.rows)
        return {
            "version": self.version,
            "meta": dict(self.meta),
            "summary": {**asdict(summary), "below": list(summary.below), "met": summary.met},
            "rows": [r.to_dict() for r in self.rows],
        }

    @classmethod
    def from_dict(cls, d: Mapping) -> Record:
        if d.get("version") != VERSION:
            raise ValueError(f"version={d.get('version')!r}: this reader reads version {VERSION}")
        return cls(d["meta"], tuple(ShapeResult.from_dict(r) for r in d["rows"]))


def _fmt(value: float | None, spec: str) -> str:
    return "-" if value is None or not math.isfinite(value) else format(value, spec)


def progress_line(index: int, total: int, row: ShapeResult) -> str:
    """What the command prints as each shape finishes."""
    head = f"[{index}/{total}] {row.shape} {row.config} ({row.source})"
    if row.error is not None:
        return f"{head}: FAILED {row.error}"
    low, high = row.spread
    return (
        f"{head}: {'ok' if row.correct else 'WRONG'} (rel err {_fmt(row.rel_error, '.1e')}), "
        f"speedup {row.speedup:.3f} [{low:.3f}, {high:.3f}] over {len(row.speedups)} rounds, "
        f"kernel {statistics.median(row.kernel_ms):.4f} ms, "
        f"torch {statistics.median(row.torch_ms):.4f} ms"
    )


COLUMNS = ("shape", "layout", "categories", "config", "source", "speedup", "range", "rel err")


def picks_since(record: Record, pick: Callable[[ShapeResult, int], str]) -> dict[str, str]:
    """Shape id -> the config ``pick(row, sms)`` names now, for each row of ``record``
    that the heuristic picked where that is no longer the config the record measured: a
    rule changed since the run. Empty for a first-use record (its configs were tuned, not
    picked) and for one without its GPU's SM count."""
    sms = record.meta.get("sm_count")
    if record.meta.get("first_use") or not isinstance(sms, int) or isinstance(sms, bool):
        return {}
    out = {}
    for row in record.rows:
        if row.source == "heuristic":
            now = pick(row, sms)
            if now != row.config:
                out[row.shape] = now
    return out


def table_lines(record: Record) -> list[str]:
    """The shapes' table and the summary line (the off-table report's body, and the
    stage-04 report's section on shapes nobody tuned)."""
    lines = ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    for r in record.rows:
        spread = r.spread
        cells = [
            f"`{r.shape}`",
            r.layout,
            ", ".join(r.categories) or "-",
            f"`{r.config}`",
            r.source,
            "FAILED" if r.error else _fmt(r.speedup, ".3f"),
            "-" if spread is None else f"{spread[0]:.3f}-{spread[1]:.3f}",
            _fmt(r.rel_error, ".1e"),
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return [*lines, "", summarise(record.rows).line()]


def resumed(meta: Mapping) -> str:
    """The sentence on a record measured across interruptions (``--resume``), or ''."""
    dates = meta.get("resumed")
    if not dates:
        return ""
    return (
        f" Resumed with `--resume` on {', '.join(map(str, dates))}: the shapes measured "
        "before each interruption were kept, the others measured then."
    )


def render_markdown(record: Record) -> str:
    """A table of the shapes and the summary, with the run's GPU, timer and command."""
    meta = record.meta
    tuning = meta.get("first_use")
    picked = (
        f"Configs from first-use tuning on this GPU (`harness.measure.first_use`: the table's "
        f"row where it has one, else the best of up to {tuning.get('candidates', '?')} "
        f"candidates timed within {tuning.get('budget_s', '?')} s) for "
        if isinstance(tuning, Mapping)
        else "Configs from `kernels.tuned.pick_config` for "
    )
    lines = [
        f"# Off-table GEMM shapes on the {meta.get('gpu', '?')}",
        "",
        f"{picked}{meta.get('sm_count', '?')} SMs; "
        f"speedup = torch.matmul latency / kernel latency, per round of "
        f"launches alternated with torch.matmul (L2 flushed, {meta.get('timer', '?')} timer); "
        f"the median over {meta.get('rounds', '?')} rounds and their range.",
        "",
        f"Command: `{meta.get('command', '?')}` ({meta.get('date', '?')}; "
        f"TileLang {meta.get('tilelang', '?')}, torch {meta.get('torch', '?')}).{resumed(meta)}",
        "",
        *table_lines(record),
        "",
    ]
    planned = meta.get("planned")
    if isinstance(planned, int) and len(record.rows) < planned:
        lines += [
            f"Stopped after {len(record.rows)} of {planned} shapes (interrupted, or a launch "
            "that never finished): the summary covers the shapes measured.",
            "",
        ]
    failed = [r for r in record.rows if r.error]
    for r in failed:
        lines.append(f"- `{r.shape}` failed: {r.error}")
    return "\n".join(lines) + ("\n" if failed else "")
