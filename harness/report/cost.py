"""The suite's cost table (``python -m harness.suite.cost``, shown in docs/runners.md):
the fitted model in one sentence, then the expected wall time per GPU count and grid,
from ``templates/cost.md`` and the model ``harness.suite.cost`` writes (its JSON, read
as it is). Pure: no IO apart from reading the template."""

from __future__ import annotations

from collections.abc import Mapping

from harness.report import template


def _fill(piece: str, /, _name: str = "cost", **values) -> str:
    return template.fill(template.load(_name)[piece], values).rstrip("\n")


def render(m: Mapping, cores_per_lane: int) -> str:
    """Markdown of the model ``m`` and its ``table`` (each row's ``wall_s`` keyed by GPU
    count); ``cores_per_lane``: the host cores one CPU lane takes, as the plan cuts them
    (``harness.suite.shard.CORES_PER_CPU_LANE``)."""
    f = m["fit"]
    counts = list(m["table"][0]["wall_s"])
    rows = []
    for row in m["table"]:
        walls = row["wall_s"]
        cells = [f"{walls[n]:.0f} s ({walls[counts[0]] / walls[n]:.2f}x)" for n in counts]
        rows.append(_fill("row", grid=row["grid"], cells=" | ".join(cells)))
    return _fill(
        template.MAIN,
        a=f"{f['a']:.1f}",
        b=f"{f['b']:.2f}",
        c=f"{f['c']:.2f}",
        points=f["points"],
        basis=f.get("basis", "unit timings"),
        process=f"{f['process']:.1f}" if f.get("process") else None,
        serial=", ".join(f"{k} {v:.0f} s" for k, v in m["serial"].items()),
        solo=", ".join(f"{u} {v:.0f} s" for u, v in m["solo"].items()),
        cpu_lane=f"{m['cpu_lane']:.0f}",
        cores_per_lane=cores_per_lane,
        cores_per_gpu=m["cores_per_gpu"],
        columns=" | ".join(f"{n} GPU{'s' if n > 1 else ''}" for n in counts),
        rule="---|" * len(counts),
        rows="\n".join(rows),
    )


def render_whatif(rows: list[Mapping], process: float, fitted: float) -> str:
    """Markdown of ``harness.suite.whatif.rows``: per GPU count the plan's wall and the best
    split's, with speedups; ``fitted`` is the fit's process start, named where ``process``
    (the one the rows assumed) differs from it."""
    lines = []
    for r in rows:
        cut = ", ".join(f"{u} in {k}" for u, k in sorted(r["parts"].items())) or "none"
        lines.append(
            _fill(
                "row",
                "whatif",
                gpus=r["gpus"],
                plan=f"{r['plan_s']:.1f} s ({r['plan_x']:.2f}x)",
                best=f"{r['best_s']:.1f} s ({r['best_x']:.2f}x)",
                parts=cut,
            )
        )
    return _fill(
        template.MAIN,
        "whatif",
        process=f"{process:.1f}",
        fitted=f"{fitted:.1f}" if abs(process - fitted) > 1e-9 else None,
        rows="\n".join(lines),
    )
