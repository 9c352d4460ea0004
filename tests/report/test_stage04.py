"""Report rendering from synthetic measurements, on the CPU."""

import random
from dataclasses import replace

import pytest

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
        "| torch ms | tilelang ms | TFLOPS | speedup | correct |"
    )
    assert header in text and "x torch" not in text
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


def test_failed_and_rejected_rows_are_in_the_table_with_their_error():
    rows = _rows()
    shape, torch_t = rows[0].shape, rows[0].torch
    broken = CaseResult(
        shape, GemmConfig(128, 128, 32, 512, 3), torch_t, error="RuntimeError: no\nmore"
    )
    asked = {"block_m": 100, "block_n": 128, "block_k": 32, "threads": 128, "num_stages": 3}
    rejected = CaseResult(shape, None, torch_t, error="GemmConfig.block_m=100: x", requested=asked)
    text = render_stage04([*rows, broken, rejected], META, title="Stage 04")
    failed = [line for line in text.splitlines() if "**FAILED**" in line]
    assert len(failed) == 2
    assert (
        "| 128 | 128 | 32 | 512 | 3 | 0.1" in failed[0]
        and "| - | - | - | **FAILED** |" in failed[0]
    )
    assert "| 100 | 128 | 32 | 128 | 3 |" in failed[1]
    assert "- `b128x128x32_t512_s3` at `m4096_n4096_k4096_f16`: RuntimeError: no\n" in text
    assert "- `b100x128x32_t128_s3` at `m4096_n4096_k4096_f16`: GemmConfig.block_m=100: x" in text
    assert "3 of 3 kernels matched" in text and "2 configs failed to build or run" in text


def test_a_sweep_where_every_kernel_failed_still_renders():
    rows = _rows()
    failed = [CaseResult(r.shape, r.config, r.torch, error="RuntimeError: x") for r in rows]
    text = render_stage04(failed, META, title="Stage 04")
    assert "No kernel was checked: the sweep's 3 configs failed" in text
    assert text.count("**FAILED**") == 3 and "**best**" not in text


def test_the_figures_follow_the_rows():
    fast = render_stage04(_rows(), META, title="Stage 04")
    rng = random.Random(3)
    torch_t = _timing(rng, 0.09)
    slower = [CaseResult(r.shape, r.config, torch_t, r.tilelang, r.check) for r in _rows()]
    slow = render_stage04(slower, META, title="Stage 04")
    speedup = lambda rows: f"speedup {min(r.speedup for r in rows[1:2]):.2f}"  # noqa: E731
    assert speedup(_rows()) in fast and speedup(slower) in slow and speedup(slower) not in fast
    assert "2 consumer warpgroups" in fast and "4 times the math per stage" in fast


SQUARE = "b128x256x64_t256_s3_w16_e"


def _table(config=SQUARE):
    from kernels.tuned import case_shape

    rows = {}
    for name, ms, ref in [("square4096", 0.19, 0.184), ("decode16", 0.047, 0.049)]:
        for dtype in ("float16", "bfloat16"):
            rows[case_shape(name, dtype).id] = {
                "config": config,
                "tilelang_ms": ms,
                "torch_ms": ref,
                "speedup": ref / ms * 0.99,
                "ratio_spread": [ref / ms * 0.98, ref / ms],
                "date": "2026-11-29",
                "sm_clock_mhz": [1500, 1980],
                "throttled": name == "square4096",
            }
    return {"NVIDIA H200": {"sm_count": 132, "configs": rows}}


def _log(scale=1.0):
    """Brief timings at 4096^3 fp16: the winner with and without each knob, and the
    hand-written pipeline on the winner's tile (+15%) and on a 128x128 tile (-15%), both
    times ``scale``."""
    shape = GemmShape(4096, 4096, 4096)
    timed = {
        SQUARE: 0.180,
        "b128x256x64_t256_s3_w16": 0.198,
        "b128x256x64_t256_s3_e": 0.183,
        "b128x256x64_t256_s3_w16_e_a": 0.207 * scale,
        "b128x128x64_t128_s5_e": 0.240,
        "b128x128x64_t128_s5_e_a": 0.204 * scale,
    }
    return [
        {"shape": shape.id, "config": c, "quick_ms": ms, "tflops": 1.0} for c, ms in timed.items()
    ]


def _tuned(log=(), plots=None):
    from harness.report.stage04 import Tuned, tuned_rows

    meta = {"command": "python3 -m benchmarks.tune_gemm", "tilelang": "0.1.15", "top": 3}
    rows = tuned_rows(_table()["NVIDIA H200"]["configs"])
    return Tuned(rows, "NVIDIA H200", 132, meta, log, plots or {})


def test_tuned_section_lists_every_case_and_who_reaches_parity():
    from harness.report.stage04 import render_tuned, tuned_rows

    rows = tuned_rows(_table()["NVIDIA H200"]["configs"])
    assert [r.case for r in rows] == ["square4096"] * 2 + ["decode16"] * 2
    assert tuned_rows({}) == []
    text = render_tuned(_tuned(plots={"roofline": "r.png"}))
    assert text.count("| square4096 |") == 2 and f"`{SQUARE}`" in text
    assert "| speedup |" in text and "x torch" not in text
    # The per-round median ratio is what the table and the verdicts use.
    assert f"{0.184 / 0.19 * 0.99:.3f}" in text
    assert "At or above parity (speedup >= 1.00): decode16 float16, decode16 bfloat16." in text
    assert "Below parity: square4096 float16" in text
    assert "the 3 fastest were checked" in text and "alternating rounds (L2" in text
    assert "![" in text and "(r.png)" in text
    assert "Effect of each knob" not in text  # no tuner log, no knob comparisons


def test_rows_measured_again_say_when_and_how():
    from harness.measure.versus import TRIALS
    from harness.report.stage04 import Tuned, render_tuned, tuned_rows

    assert "harness.measure.versus" not in render_tuned(_tuned())
    raw = _table()["NVIDIA H200"]["configs"]
    first = next(iter(raw))
    second = list(raw)[1]
    raw[first] = {**raw[first], "measured": "2026-12-01", "timer": "cupti"}
    raw[second] = {**raw[second], "timer": "cupti"}  # re-tuned: no "measured"
    rows = tuned_rows(raw)
    assert [r.measured for r in rows].count("2026-12-01") == 1
    text = render_tuned(Tuned(rows, "NVIDIA H200", 132, {"top": 3}, (), {}))
    assert "The figures of 2 of the 4 rows come from `harness.measure.versus`" in text
    assert f"{TRIALS} trials of kernel times (cupti timer)" in text
    assert "1 of them kept their config and were measured again" in text
    assert "1 were tuned again with this confirmation" in text
    assert "input sets" not in text  # no row records its placements
    raw[first] = {**raw[first], "placements": 3}
    text = render_tuned(Tuned(tuned_rows(raw), "NVIDIA H200", 132, {"top": 3}, (), {}))
    assert "In 1 rows the trials were shared out over 3 input sets" in text


def test_knob_effects_compare_each_config_with_its_twin():
    from harness.report.stage04 import knob_effects

    shape = GemmShape(4096, 4096, 4096)
    log = [
        {"shape": shape.id, "config": "b128x256x64_t256_s3_e", "quick_ms": 0.19},
        {"shape": shape.id, "config": "b128x256x64_t256_s3", "quick_ms": 0.20},
        {"shape": shape.id, "config": "b128x256x64_t256_s3_w8", "quick_ms": 0.21},
        {"shape": "other", "config": "b128x256x64_t256_s3_w8_e", "quick_ms": 0.01},
    ]
    effects = knob_effects(log, shape)
    assert [e.knob for e in effects] == ["shared-memory epilogue (_e)", "swizzled block order (_w)"]
    assert effects[0].median == pytest.approx(-0.05) and len(effects[0].pairs) == 1
    assert effects[1].median == pytest.approx(0.05)


def test_the_analysis_takes_its_figures_from_the_log_and_table():
    from harness.report.stage04 import render_tuned

    text = render_tuned(_tuned(_log()))
    assert "- shared-memory epilogue (_e): -9.1% median over 1 pairs" in text
    assert "The largest single gain among the knobs is the shared-memory epilogue (_e)." in text
    assert "128x256x64 (fastest), 128x128x64 +13.3%" in text
    assert "`b128x128x64_t128_s5_e_a` (1 consumer warpgroup)" in text
    assert "changes the time by -15.0%" in text and "128x256x64 (3 stages)" in text
    assert "range\n+15.0% (positive is slower)" in text
    assert "512 tiles of `b128x256x64_t256_s3_w16_e` fill 132 SMs in 3.9 waves" in text
    assert "square4096 float16 (1500-1980 MHz)" in text and "decode16 float16 (" not in text
    # Other data, other figures: nothing is carried over from a previous run.
    again = render_tuned(_tuned(_log(scale=0.8)))
    assert "+15.0%" not in again and "range\n-8.0%" in again and "by -32.0%" in again


def test_next_experiments_follow_the_hand_written_pipelines_standing():
    trails = render_stage04(_rows(), META, title="S", tuned=_tuned(_log()))
    assert "- Make the hand-written pipeline win with the winning tile, 128x256x64" in trails
    assert "trails\n  its automatic twin by +15.0%" in trails
    assert "For decode below parity (decode16 bfloat16 at" not in trails  # decode16 wins here
    wins = render_stage04(_rows(), META, title="S", tuned=_tuned(_log(scale=0.8)))
    assert "Make the hand-written pipeline win" not in wins
    assert "- Confirm the hand-written pipeline (`_a`)" in wins
    untuned = render_stage04(_rows(), META, title="S")
    assert "## Tuned Configs" not in untuned and "- Confirm the hand-written" in untuned


def test_a_persistent_async_winner_is_described_as_what_it_is():
    """The hand-written pipeline's persistent form as the knob case's winner: the section
    says what it overlaps and what is left (the last wave), and the next experiments
    neither ask to confirm nor to make that pipeline win."""
    from harness.report.stage04 import Tuned, render_tuned, tuned_rows

    winner = "b128x256x64_t256_s3_w4_e_p132_a"
    rows = tuned_rows(_table(winner)["NVIDIA H200"]["configs"])
    tuned = Tuned(rows, "NVIDIA H200", 132, {"top": 3, "tilelang": "0.1.15"}, _log(), {})
    text = render_tuned(tuned)
    assert f"512 tiles of `{winner}` fill 132 SMs in 3.9 waves, the last of them 116" in text
    assert "It is the hand-written pipeline's persistent form: 132 blocks" in text
    assert "With 3 stages its consumers wait for each wgmma batch" in text
    assert "TileLang's persistent grid cannot overlap" not in text
    report = render_stage04(_rows(), META, title="S", tuned=tuned)
    assert "- Win back the last wave some other way than stream-K" in report
    assert "the last, of\n  116 tiles, leaves 16 SMs idle" in report
    assert "- Overlap a tile's write-back with the next tile's products" in report
    assert "Confirm the hand-written" not in report
    # A plain winner: what T.Persistent cannot do, and no stream-K bullet.
    plain = render_stage04(_rows(), META, title="S", tuned=_tuned(_log()))
    assert "TileLang's persistent grid cannot overlap" in plain
    assert "Win back the last wave" not in plain and "persistent form" not in plain


def test_a_retune_names_the_rows_its_winners_still_hold():
    from harness.report.stage04 import Retune, render_tuned

    tuned = _tuned()
    square = tuned.row("square4096")
    records = [
        {"meta": {"command": "python3 -m benchmarks.tune_gemm --only X", "date": "2026-12-02"}},
        {"shape": square.shape.id, "config": SQUARE, "quick_ms": 0.18},
        {"shape": square.shape.id, "winner": {"config": SQUARE, "candidates": 11}},
        # A winner the table no longer holds (tuned again since) is not claimed.
        {"shape": tuned.row("decode16").shape.id, "winner": {"config": "b64x64x128_t128_s4"}},
    ]
    retune = Retune.from_log("log.jsonl", records, tuned.rows)
    assert retune.rows == ("square4096 float16",) and retune.ranked == 11
    text = render_tuned(replace(tuned, retunes=(retune,)))
    assert "Re-tuned since over a given set of configs (`--only`" in text
    assert "(2026-12-02), 11 configs ranked per case: square4096 float16." in text
    with pytest.raises(ValueError, match="log.jsonl: no meta line"):
        Retune.from_log("log.jsonl", records[1:], tuned.rows)
    with pytest.raises(ValueError, match="no winner records"):
        Retune.from_log("log.jsonl", records[:2], tuned.rows)


def test_no_measured_figure_is_written_into_the_code_or_the_template():
    import re
    from pathlib import Path

    import harness.report.stage04 as stage04

    figure = re.compile(r"\d+(?:\.\d+)?(?:-\d+(?:\.\d+)?)?\s*(?:%|x\b|ms\b|TFLOP/s|[GM]Hz|waves)")
    package = Path(stage04.__file__).parent
    modules = sorted(package.glob("*.py"))
    assert len(modules) >= 3  # the package's modules, not only its __init__
    for path in (*modules, package.parent / "templates/stage04.md"):
        text = path.read_text()
        assert not figure.findall(text), (path, figure.findall(text))


def test_plots_are_png_files(tmp_path):
    from harness.report import plots
    from harness.report.stage04 import roofline_points, tuned_rows

    rows = tuned_rows(_table()["NVIDIA H200"]["configs"])
    roof = plots.roofline(roofline_points(rows), tmp_path / "roof.png", "t", 989.4, 4.8)
    bars = [plots.Bar("b128x256x64_t256_s3", 700.0), plots.Bar("b128x128x32_t128_s3", 380.0)]
    sweep = plots.config_sweep([("4096^3", bars, 750.0)], tmp_path / "s.png", "t")
    for path in (roof, sweep):
        assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and path.stat().st_size > 5000


def test_a_gpu_without_peak_figures_gets_no_roofline_and_no_borrowed_one():
    text = render_stage04(_rows(), {**META, "gpu": "NVIDIA Imaginary 9000"}, title="S")
    line = next(x for x in text.splitlines() if x.startswith("- **m4096_n4096_k4096_f16**"))
    assert "ridge and roof n/a (no peak figures for NVIDIA Imaginary 9000)" in line
    assert "TFLOP/s dense" not in line and "% of the roof" not in line
    guess = text.split("Guess, per shape:")[1]
    assert "guess n/a (the run records no SM count; no peak figures for NVIDIA Imag" in guess
    # The H200's figures, for comparison: the table has them.
    known = render_stage04(_rows(), {**META, "sm_count": 132}, title="S")
    assert "(989 TFLOP/s dense over 4.8 TB/s)" in known and "n/a" not in known


def test_the_sm_count_is_the_recorded_one():
    """The run's meta line records the SMs; without it, the tuned table's entry for the
    run's GPU; without either, no guess that needs it."""
    # 512 tiles of 128x256: under one wave of 1024 SMs, 3.9 waves of 132.
    many = render_stage04(_rows(), {**META, "sm_count": 1024}, title="S")
    assert "512 tiles of 128x256x64 for 1024 SMs, so the run is launch latency" in many
    assert "fill the 132 SMs" not in many
    tuned = render_stage04(_rows(), META, title="S", tuned=_tuned())  # the table's 132
    assert "512 tiles of 128x256x64 fill the 132 SMs in 3.9 waves" in tuned
    unknown = render_stage04(_rows(), META, title="S")
    assert "the run records no SM count" in unknown and " SMs" not in unknown.split("## Q")[0]


def test_the_two_persistent_loops_are_knobs_of_their_own():
    from harness.report.stage04 import knob_effects

    shape = GemmShape(4096, 4096, 4096)
    log = [
        {"shape": shape.id, "config": c, "quick_ms": ms}
        for c, ms in [
            ("b128x256x64_t256_s3_e", 0.20),
            ("b128x256x64_t256_s3_e_p132", 0.21),
            ("b128x256x64_t256_s3_e_a", 0.20),
            ("b128x256x64_t256_s3_e_p132_a", 0.18),
        ]
    ]
    effects = {e.knob: e for e in knob_effects(log, shape)}
    assert effects["persistent grid (_p)"].median == pytest.approx(0.05)
    assert len(effects["persistent grid (_p)"].pairs) == 1
    assert effects["hand-written persistent form (_p..._a)"].median == pytest.approx(-0.1)


def test_knob_effects_pair_a_stream_k_config_with_its_data_parallel_twin():
    from harness.report.stage04 import knob_effects

    shape = GemmShape(4096, 4096, 4096)
    log = [
        {"shape": shape.id, "config": "b128x256x64_t256_s4_w8_sk132", "quick_ms": 0.18},
        {"shape": shape.id, "config": "b128x256x64_t256_s4_w8", "quick_ms": 0.20},
    ]
    effects = knob_effects(log, shape)
    assert [e.knob for e in effects] == ["stream-K (_sk)"]
    assert effects[0].median == pytest.approx(-0.1)


def test_off_table_shapes_join_the_roofline_at_their_median_latencies():
    from harness.report.offtable import Record, ShapeResult
    from harness.report.stage04 import roofline_points

    shape = GemmShape(2500, 1800, 4000)
    timed = ShapeResult.of(
        shape, ("mid",), "b128x128x64_t128_s4", "heuristic",
        kernel_ms=(0.2, 0.1, 0.3), torch_ms=(0.05, 0.06, 0.04),
        rel_error=1e-4, correct=True, launches=6, timer="cupti",
    )  # fmt: skip
    failed = ShapeResult.of(GemmShape(1000, 1000, 1000), ("mid",), "x", "heuristic", error="boom")
    points = roofline_points([], [Record({}, (timed, failed))])
    assert {p.kind for p in points} == {"TileLang (off-table)", "torch.matmul (off-table)"}
    kernel = next(p for p in points if p.kind.startswith("TileLang"))
    assert kernel.tflops == pytest.approx(2 * 2500 * 1800 * 4000 / 0.2e-3 / 1e12)
    assert kernel.label == timed.shape and len(points) == 2


def test_next_experiments_name_the_newest_records_shapes_below_the_floor():
    """The below-0.90 list comes from the records of the latest date (a held-out list
    beside the main one), not from an older record given after them."""
    from harness.report.offtable import Record, ShapeResult
    from harness.report.stage04.sweep import _offtable_below

    def record(date, size, kernel_ms):
        row = ShapeResult.of(
            GemmShape(*size), ("mid",), "b128x128x64_t128_s4", "heuristic",
            kernel_ms=(kernel_ms,) * 3, torch_ms=(0.1,) * 3,
            rel_error=1e-4, correct=True, launches=6, timer="cupti",
        )  # fmt: skip
        return Record({"date": date}, (row,))

    class Tuned:
        offtable = (
            record("2026-12-02", (2500, 1800, 4000), 0.125),  # 0.80
            record("2026-12-02", (2000, 3000, 3000), 0.13),  # 0.77
            record("2026-12-01", (1536, 1536, 1536), 0.2),  # 0.50, older
        )

    got = _offtable_below(Tuned())
    assert got == "m2500_n1800_k4000_f16 0.80, m2000_n3000_k3000_f16 0.77"
    Tuned.offtable = (record("", (1536, 1536, 1536), 0.2), record("", (1000, 1000, 1000), 0.09))
    assert _offtable_below(Tuned()) is None  # the last undated record has none below


def test_an_off_table_record_names_the_shapes_whose_pick_changed_since():
    """A rule change after the run: the record's section says which shapes the heuristic
    picks otherwise now and what; rows from the table, first-use records and a record
    without its SM count are not compared."""
    from harness.report.offtable import Record, ShapeResult, picks_since
    from harness.report.stage04.tuned import _heuristic_now, _offtable_part
    from kernels.tuned import heuristic

    sms = 132
    same, moved, tabled = (
        GemmShape(2048, 2048, 2048),
        GemmShape(1240, 2112, 1288, "bfloat16"),
        GemmShape(3000, 2000, 1000),
    )
    kw = dict(kernel_ms=(0.2, 0.21), torch_ms=(0.2, 0.2), rel_error=1e-4, correct=True)
    rows = (
        ShapeResult.of(same, ("mid",), heuristic(same, sms).id, "heuristic", **kw),
        ShapeResult.of(moved, ("mid",), "b128x256x64_t256_s3_e", "heuristic", **kw),
        ShapeResult.of(tabled, ("mid",), "b128x256x64_t256_s3_e", "table", **kw),
    )
    now = heuristic(moved, sms).id
    assert now != "b128x256x64_t256_s3_e"
    record = Record({"sm_count": sms, "date": "2026-12-03"}, rows)
    assert picks_since(record, _heuristic_now) == {moved.id: now}
    text = _offtable_part(record)
    assert f"`{moved.id}` now `{now}`" in text and "1 of its shapes" in text
    assert same.id not in text.split("picks otherwise")[1]
    for meta in ({"sm_count": sms, "first_use": True}, {}):
        assert picks_since(Record(meta, rows), lambda row, n: "other") == {}
        assert "picks otherwise" not in _offtable_part(Record(meta, rows))
    agreed = Record({"sm_count": sms}, rows[:1])
    assert "picks otherwise" not in _offtable_part(agreed)
