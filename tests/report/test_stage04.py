"""Report rendering from synthetic measurements, on the CPU."""

import random

from harness.measure.cases import CaseResult
from harness.measure.correctness import Check
from harness.measure.timing import Timing
from harness.report.stage04 import render_stage04
from kernels import GemmConfig, GemmShape

META = {
    "gpu": "NVIDIA H200",
    "tilelang": "0.1.15",
    "torch": "2.11.0",
    "cuda": "13.0",
    "date": "2026-11-29",
    "command": "python3 -m benchmarks.bench_gemm",
    "backend": "event",
    "warmup": 10,
    "repeat": 50,
}


def _timing(rng, ms):
    return Timing(tuple(rng.gauss(ms, ms * 0.01) for _ in range(20)), "event", 10)


def _rows(seed=3):
    rng = random.Random(seed)
    shape = GemmShape(4096, 4096, 4096)
    torch_t = _timing(rng, 0.18)
    rows = []
    for cfg, ms in [
        (GemmConfig(), 0.36),
        (GemmConfig(128, 256, 64, 256, 3), 0.21),
        (GemmConfig(128, 128, 32, 256, 4), 0.30),
    ]:
        check = Check(shape, rel_error=rng.uniform(1e-4, 3e-4), unwritten=0, tolerance=2e-3)
        rows.append(CaseResult(shape, cfg, torch_t, _timing(rng, ms), check))
    return rows


def test_report_has_the_stage_template():
    text = render_stage04(_rows(), META, title="Stage 04")
    for heading in (
        "## Baseline Config",
        "## Correctness",
        "## Benchmark Table",
        "## Data Flow",
        "## Bottleneck Guess",
        "## Next Experiments",
        "## Questions",
    ):
        assert heading in text
    header = (
        "| M | N | K | dtype | layout | block_M | block_N | block_K | threads | stages "
        "| torch ms | tilelang ms | TFLOPS |"
    )
    assert header in text
    assert "NVIDIA H200" in text and "0.1.15" in text and "2026-11-29" in text
    assert "T.clear" in text and "2*M*N*K" in text and "NT" in text and "P V" in text
    assert "3 of 3 kernels matched" in text


def test_best_row_is_the_fastest_correct_one():
    rows = _rows()
    text = render_stage04(rows, META, title="Stage 04")
    best_lines = [line for line in text.splitlines() if "**best**" in line]
    assert len(best_lines) == 1 and "| 256 | 64 | 256 | 3 |" in best_lines[0]
    assert "best `b128x256x64_t256_s3`" in text


def test_incorrect_kernel_is_never_best_and_is_flagged():
    rows = _rows()
    wrong = rows[1]
    rows[1] = CaseResult(
        wrong.shape,
        wrong.config,
        wrong.torch,
        wrong.tilelang,
        Check(wrong.shape, rel_error=0.5, unwritten=3, tolerance=2e-3),
    )
    text = render_stage04(rows, META, title="Stage 04")
    assert "**NO**" in text and "2 of 3 kernels matched" in text
    best = [line for line in text.splitlines() if "**best**" in line][0]
    assert "| 128 | 32 | 256 | 4 |" in best


def _table():
    from kernels.tuned import case_shape

    rows = {}
    for name, ms, ref in [("square4096", 0.19, 0.184), ("decode16", 0.047, 0.049)]:
        for dtype in ("float16", "bfloat16"):
            rows[case_shape(name, dtype).id] = {
                "config": "b128x256x64_t256_s3_w16_e",
                "tilelang_ms": ms,
                "torch_ms": ref,
                "speedup": ref / ms * 0.99,
                "ratio_spread": [ref / ms * 0.98, ref / ms],
                "date": "2026-11-29",
            }
    return {"NVIDIA H200": rows}


def test_tuned_section_lists_every_case_and_who_reaches_parity():
    from harness.report.stage04 import render_tuned, tuned_rows

    rows = tuned_rows(_table(), "NVIDIA H200")
    assert [r.case for r in rows] == ["square4096"] * 2 + ["decode16"] * 2
    assert tuned_rows(_table(), "NVIDIA H100") == []
    text = render_tuned(
        rows,
        "NVIDIA H200",
        {"command": "python3 -m benchmarks.tune_gemm"},
        {"roofline": "r.png"},
        ["- knob line"],
    )
    assert text.count("| square4096 |") == 2 and "`b128x256x64_t256_s3_w16_e`" in text
    # The per-round median ratio is what the table and the verdicts use.
    assert f"{0.184 / 0.19 * 0.99:.3f}" in text
    assert "At or above parity (>= 1.00x): decode16 float16, decode16 bfloat16." in text
    assert "Below parity: square4096 float16" in text
    assert "![" in text and "(r.png)" in text and "- knob line" in text


def test_knob_effects_compare_each_config_with_its_twin():
    from harness.report.stage04 import knob_effects

    shape = GemmShape(4096, 4096, 4096)
    log = [
        {"shape": shape.id, "config": "b128x256x64_t256_s3_e", "quick_ms": 0.19},
        {"shape": shape.id, "config": "b128x256x64_t256_s3", "quick_ms": 0.20},
        {"shape": shape.id, "config": "b128x256x64_t256_s3_w8", "quick_ms": 0.21},
        {"shape": "other", "config": "b128x256x64_t256_s3_w8_e", "quick_ms": 0.01},
    ]
    lines = knob_effects(log, shape)
    assert len(lines) == 2
    assert lines[0].startswith("- shared-memory epilogue (_e): -5.0% median over 1 pairs")
    assert lines[1].startswith("- swizzled block order (_w): +5.0%")


def test_plots_are_png_files(tmp_path):
    from harness.report import plots
    from harness.report.stage04 import roofline_points, tuned_rows

    rows = tuned_rows(_table(), "NVIDIA H200")
    roof = plots.roofline(roofline_points(rows), tmp_path / "roof.png", "t")
    bars = [plots.Bar("b128x256x64_t256_s3", 700.0), plots.Bar("b128x128x32_t128_s3", 380.0)]
    sweep = plots.config_sweep([("4096^3", bars, 750.0)], tmp_path / "s.png", "t")
    for path in (roof, sweep):
        assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and path.stat().st_size > 5000
