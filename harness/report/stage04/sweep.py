"""The stage-04 markdown report: the prose is ``templates/stage04.md``, every figure comes
from the data (the sweep's rows and meta line, the tuned-config table, the tuner's log,
the datasheet peaks of the GPU the run names). Pure: no GPU, no IO apart from reading the
template and the peaks table (the plots it embeds are drawn by ``harness.report.plots``
from the same data).

This module renders the sweep's sections; ``tuned`` the Tuned Configs section and
``common`` what both share.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from harness.measure import metrics
from harness.measure.correctness import TOLERANCE
from harness.report import offtable, template
from harness.report.stage04.common import (
    BASELINE,
    Device,
    best_row,
    by_shape,
    fill,
    fmt_optional,
    grid,
    lines,
    pieces,
    plural,
    reuse,
    sci,
    tile,
    warpgroups,
)
from harness.report.stage04.knobs import async_values, winner_values
from harness.report.stage04.tuned import Tuned, render_tuned
from kernels.gemm import MMA_ALIGN, SM90_SMEM_LIMIT

TABLE_HEAD = (
    "M",
    "N",
    "K",
    "dtype",
    "layout",
    "block_M",
    "block_N",
    "block_K",
    "threads",
    "stages",
    "torch ms",
    "tilelang ms",
    "TFLOPS",
    "speedup",
    "correct",
)


def config_cells(r) -> list[str]:
    """block_M, block_N, block_K, threads and stages of a row: its config's, the fields
    asked for when the validator rejected them, or dashes."""
    c = r.config
    if c is not None:
        return [str(x) for x in (c.block_m, c.block_n, c.block_k, c.threads, c.num_stages)]
    asked = r.requested or {}
    names = ("block_m", "block_n", "block_k", "threads", "num_stages")
    return [str(asked.get(name, "-")) for name in names]


def requested_id(asked: Mapping[str, object]) -> str:
    """A config id (``b128x128x32_t128_s3``, ``_w8`` for a swizzle) of fields that the
    validator may have rejected; ``?`` for a field not given."""
    get = {k: asked.get(k, "?") for k in ("block_m", "block_n", "block_k", "threads")}
    text = "b{block_m}x{block_n}x{block_k}_t{threads}".format_map(get)
    text += f"_s{asked.get('num_stages', '?')}"
    return text + (f"_w{asked['swizzle']}" if asked.get("swizzle") else "")


def config_label(r) -> str:
    """The config's id, or the fields asked for when the validator rejected them."""
    return r.config.id if r.config is not None else requested_id(r.requested or {})


def short_error(error: str, width: int = 160) -> str:
    """The first line of an error, cut to ``width`` characters: a compile error runs to
    pages; the JSON lines keep all of it."""
    first = error.strip().splitlines()[0] if error.strip() else "error"
    return first if len(first) <= width else first[: width - 3] + "..."


def benchmark_table(results: Sequence) -> str:
    table = ["| " + " | ".join(TABLE_HEAD) + " |", "|" + "---|" * len(TABLE_HEAD)]
    best = {shape: best_row(rows) for shape, rows in by_shape(results).items()}
    for r in results:
        mark = " **best**" if r is best.get(r.shape) and r.config is not None else ""
        if r.failed:
            correct = "**FAILED**"
        else:
            correct = "-" if r.check is None else ("yes" if r.check.ok else "**NO**")
        cells = [
            r.shape.m,
            r.shape.n,
            r.shape.k,
            r.shape.dtype,
            r.shape.layout,
            *config_cells(r),
            f"{r.torch_ms:.4f}",
            fmt_optional(r.tilelang_ms, ".4f") + mark,
            fmt_optional(r.tflops, ".1f"),
            fmt_optional(r.speedup, ".2f"),
            correct,
        ]
        table.append("| " + " | ".join(str(x) for x in cells) + " |")
    return "\n".join(table)


def _row_values(r) -> dict:
    return {
        "shape": r.shape.id,
        "config": config_label(r),
        "tilelang_ms": fmt_optional(r.tilelang_ms, ".4f"),
        "torch_ms": f"{r.torch_ms:.4f}",
        "tflops": fmt_optional(r.tflops, ".1f"),
        "speedup": fmt_optional(r.speedup, ".2f"),
        "correct": "-" if r.check is None else ("yes" if r.check.ok else "NO"),
        "check": "-" if r.check is None else str(r.check),
        "error": None if r.error is None else short_error(r.error),
    }


def _correctness(results) -> str:
    checked = [r for r in results if r.check is not None]
    count = sum(r.failed for r in results)
    failed = plural(count, "config") if count else None
    if not checked:
        return fill("correctness_all_failed" if failed else "correctness_none_ran", failed=failed)
    worst: dict[str, float] = {}
    for r in checked:
        worst[r.shape.dtype] = max(worst.get(r.shape.dtype, 0.0), r.check.rel_error)
    return fill(
        "correctness_checked",
        ok=sum(r.check.ok for r in checked),
        checked=len(checked),
        failed=failed,
        tol_float16=sci(TOLERANCE["float16"]),
        tol_bfloat16=sci(TOLERANCE["bfloat16"]),
        worst=", ".join(f"{d}: {e:.1e}" for d, e in sorted(worst.items())),
    )


def _guess_piece(shape, tiles: int, device: Device) -> tuple[str, str | None]:
    """The guess's piece for the best config's grid of ``tiles``, and what is missing for
    a guess (None where nothing is)."""
    if device.sm_count is not None and tiles < device.sm_count:
        return "guess_underfilled", None
    roof = device.roof(shape)
    if device.sm_count is None or roof is None:
        missing = [] if device.sm_count is not None else ["the run records no SM count"]
        missing += [] if roof is not None else [f"no peak figures for {device.name}"]
        return "guess_unknown", "; ".join(missing)
    return ("guess_compute" if roof.compute_bound else "guess_memory"), None


def _bottleneck(results, device: Device) -> dict:
    items, guesses = [], []
    for shape, rows in by_shape(results).items():
        best = best_row(rows)
        ms = best.tilelang_ms if best else rows[0].torch_ms
        roof = device.roof(shape)
        ai = metrics.arithmetic_intensity(shape.flops, shape.min_bytes)
        achieved = metrics.tflops(shape.flops, ms * 1e-3)
        percent = None if roof is None else f"{100 * achieved / roof.roof:.1f}"
        items.append(
            {
                "shape": shape.id,
                "intensity": f"{ai:.0f}",
                "ridge": None if roof is None else f"{roof.ridge:.0f}",
                "peak": None if roof is None else f"{roof.peak:.0f}",
                "bandwidth": None if roof is None else roof.bandwidth,
                "bound": None
                if roof is None
                else ("compute-bound" if roof.compute_bound else "memory-bound"),
                "roof": None if roof is None else f"{roof.roof:.0f}",
                "no_peaks": device.no_peaks,
                "best": None if best is None else best.config.id,
                "achieved": f"{achieved:.1f}",
                "percent": percent,
                "torch_tflops": f"{rows[0].torch_tflops:.1f}",
            }
        )
        if best is None:
            continue
        c = best.config
        tiles = grid(shape, c)
        piece, missing = _guess_piece(shape, tiles, device)
        sms = device.sm_count
        guesses.append(
            fill(
                piece,
                shape=shape.id,
                tiles=plural(tiles, "tile"),
                tile=tile(c),
                sms=sms,
                waves=None if sms is None else f"{tiles / sms:.1f}",
                k_steps=math.ceil(shape.k / (c.block_k * c.split_k)),
                block_k=c.block_k,
                speedup=fmt_optional(best.speedup, ".2f"),
                percent=percent,
                missing=missing,
            )
        )
    return {
        "bottleneck_lines": lines("bottleneck_line", items),
        "guess_lines": "\n".join(guesses)
        or "- no kernel was timed, so there is nothing to guess from",
        "tiles_compared": _tiles_compared(results),
    }


def _tiles_compared(results) -> str | None:
    """The baseline's tile against the best config of the largest shape, when both ran."""
    groups = by_shape(results)
    if not groups:
        return None
    shape = max(groups, key=lambda s: s.flops)
    best = best_row(groups[shape])
    if best is None or best.config == BASELINE or tile(best.config) == tile(BASELINE):
        return None
    c = best.config
    math_ratio = (c.block_m * c.block_n * c.block_k) / (
        BASELINE.block_m * BASELINE.block_n * BASELINE.block_k
    )
    return fill(
        "tiles_compared",
        base_tile=tile(BASELINE),
        base_warpgroups=warpgroups(BASELINE),
        base_steps=BASELINE.block_k // MMA_ALIGN,
        mma_k=MMA_ALIGN,
        base_reuse=f"{reuse(BASELINE):.0f}",
        shape=shape.id,
        best=c.id,
        best_tile=tile(c),
        best_warpgroups=warpgroups(c),
        math_ratio=f"{math_ratio:g}",
        best_reuse=f"{reuse(c):.0f}",
    )


def _question_values(results, device: Device) -> dict:
    groups = by_shape(results)
    configs = {r.config for r in results if r.config is not None} or {BASELINE}
    tiles = sorted({(c.block_m, c.block_n): reuse(c) for c in configs}.items())
    evidence, block_k = [], None
    for shape, rows in groups.items():
        per_tile: dict[str, float] = {}
        for r in rows:
            if r.speedup is not None and (r.check is None or r.check.ok):
                key = f"{r.config.block_m}x{r.config.block_n}"
                per_tile[key] = max(per_tile.get(key, 0.0), r.speedup)
        if per_tile:
            cells = ", ".join(f"{t} {s:.2f}" for t, s in per_tile.items())
            evidence.append(f"`{shape.id}`: {cells}")
    if groups:
        shape = max(groups, key=lambda s: s.flops)
        per_k: dict[int, float] = {}
        for r in groups[shape]:
            if r.tflops is not None and (r.check is None or r.check.ok):
                per_k[r.config.block_k] = max(per_k.get(r.config.block_k, 0.0), r.tflops)
        if len(per_k) > 1:
            cells = ", ".join(f"block_K {k} {t:.1f} TFLOP/s" for k, t in sorted(per_k.items()))
            block_k = f"at `{shape.id}`, {cells}"
    underfilled = []
    for shape, rows in groups.items():
        grids = [grid(shape, r.config) for r in rows if r.config is not None]
        # Without a recorded SM count nothing is said about filling the GPU.
        if grids and device.sm_count is not None and max(grids) < device.sm_count:
            underfilled.append(shape.id)
    return {
        "mma_k": MMA_ALIGN,
        "smem_kib": SM90_SMEM_LIMIT // 1024,
        "block_k_evidence": block_k,
        "reuse_per_tile": ", ".join(f"{m}x{n} gives {x:.0f}" for (m, n), x in tiles),
        "reuse_evidence": "; ".join(evidence) or None,
        "underfilled": ", ".join(f"`{s}`" for s in underfilled) or None,
    }


def run_device(meta: Mapping[str, object], tuned: Tuned | None = None) -> Device:
    """The GPU the run's meta line names: its SM count as the run recorded it, else as
    the tuned table records it for that GPU (runs recorded before the meta line had it),
    else unknown; its peaks from the peaks table."""
    name = str(meta.get("gpu", "?"))
    sms = meta.get("sm_count")
    if sms is None and tuned is not None and tuned.gpu == name:
        sms = tuned.sm_count
    return Device.named(name, sms if isinstance(sms, int) and sms > 0 else None)


def _offtable_below(tuned) -> str | None:
    """The shapes nobody tuned below the floor, with their speedups, in the newest
    off-table records: those of the latest date among the records given (the last one
    where none is dated); an older record is what the newer ones replaced."""
    if tuned is None or not tuned.offtable:
        return None
    latest = max(str(r.meta.get("date", "")) for r in tuned.offtable)
    newest = [r for r in tuned.offtable if str(r.meta.get("date", "")) == latest]
    if not latest:
        newest = [tuned.offtable[-1]]
    below = {
        row.shape: row.speedup
        for record in newest
        for row in record.rows
        if row.measured and row.speedup < offtable.FLOOR
    }
    return ", ".join(f"{shape} {speedup:.2f}" for shape, speedup in below.items()) or None


def render_stage04(
    results: Sequence, meta: Mapping[str, object], title: str, tuned: Tuned | None = None
) -> str:
    """The report from the stage template: baseline, correctness, table, data flow,
    bottleneck guess, next experiments and the stage's questions; with ``tuned``, a
    Tuned Configs section."""
    device = run_device(meta, tuned)
    groups = by_shape(results)
    best_lines = [_row_values(b) for b in map(best_row, groups.values()) if b is not None]
    failed = [_row_values(r) for r in results if r.failed]
    decode_below = []
    if tuned is not None:
        # Skinny M is the decode regime (kernels.tuned.candidates).
        decode_below = [
            f"{r.name} at {r.speedup:.3f}" for r in tuned.rows if r.shape.m <= 64 and r.speedup < 1
        ]
    values = {
        "title": title,
        **{k: meta.get(k) for k in ("gpu", "tilelang", "torch", "cuda", "date", "backend")},
        **{k: meta.get(k) for k in ("warmup", "repeat", "command")},
        "run": meta.get("run"),
        "base_block_m": BASELINE.block_m,
        "base_block_n": BASELINE.block_n,
        "base_block_k": BASELINE.block_k,
        "base_threads": BASELINE.threads,
        "base_stages": BASELINE.num_stages,
        "baseline_lines": lines(
            "baseline_line", [_row_values(r) for r in results if r.config == BASELINE]
        ),
        "correctness": _correctness(results),
        "table": benchmark_table(results),
        "failed_lines": lines("failed_line", failed),
        "best_lines": lines("best_line", best_lines),
        "tuned": None if tuned is None else render_tuned(tuned),
        **_bottleneck(results, device),
        **async_values(tuned),
        **winner_values(tuned),
        "decode_below": ", ".join(decode_below) or None,
        "offtable_below": _offtable_below(tuned),
        **_question_values(results, device),
    }
    return template.fill(pieces()[template.MAIN], values)
