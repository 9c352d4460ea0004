"""benchmarks.misses on records written here: which shapes it lists, what it leaves out,
and its errors. No GPU: the records are synthetic, the picks the rules' own."""

import json
import statistics
import subprocess
import sys

import pytest

from benchmarks import misses
from kernels import GemmConfig, GemmShape
from kernels.tuned import heuristic, pick_config

GPU = "NVIDIA H200"


def _run(*args):
    return subprocess.run(
        [sys.executable, "-m", "benchmarks.misses", *args], capture_output=True, text=True
    )


def _row(run, shape, config, ms, correct=True):
    return {
        "run": run, "shape": shape.id, "m": shape.m, "n": shape.n, "k": shape.k,
        "dtype": shape.dtype, "layout": shape.layout, "config": config,
        "torch_ms": 0.05, "tilelang_ms": ms, "rel_error": 1e-3 if correct else 1.0,
        "correct": correct, "error": None, "backend": "cupti",
        "torch_samples_ms": [0.05] * 3, "tilelang_samples_ms": [ms] * 3,
    }  # fmt: skip


def _record(tmp_path, lines, name="panel_h200.jsonl"):
    path = tmp_path / name
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return path


@pytest.fixture
def record(tmp_path):
    slow = GemmShape(1632, 1816, 3520)  # its pick beaten by 25%
    fast = GemmShape(312, 463, 13760, "bfloat16")  # its pick the fastest
    pick_slow = pick_config(slow, GPU, 132).id
    pick_fast = pick_config(fast, GPU, 132).id
    other = "b128x128x32_t128_s3"
    lines = [
        {"meta": {"run": "r1", "gpu": GPU, "sm_count": 132}},
        _row("r1", slow, pick_slow, 0.050),
        _row("r1", slow, pick_slow, 0.052),
        _row("r1", slow, other, 0.040),
        _row("r1", fast, pick_fast, 0.030),
        _row("r1", fast, other, 0.090),
        # A faster row that failed, and one of a run with no meta line: neither counts.
        _row("r1", fast, "b64x64x64_t128_s4_k8", 0.001, correct=False),
        _row("r0", fast, "b64x64x64_t128_s4_k4", 0.001),
        # Another GPU's run of the slow shape, its pick the fastest there.
        {"meta": {"run": "r2", "gpu": "NVIDIA H100 80GB HBM3", "sm_count": 132}},
        _row("r2", slow, heuristic(slow, 132).id, 0.030),  # no table for that GPU
        _row("r2", slow, other, 0.060),
    ]
    return _record(tmp_path, lines), slow, pick_slow


def test_a_pick_slower_than_a_config_beside_it_is_listed_with_its_gain(record):
    path, slow, pick = record
    sweeps, notes = misses.read_sweeps(path)
    assert len(sweeps) == 3 and notes
    found = [m for m in map(misses.miss_of, sweeps) if m is not None]
    assert len(found) == 3
    (miss,) = [m for m in found if m.gain > 0]
    assert miss.sweep.shape == slow and miss.sweep.gpu == GPU
    assert miss.pick == pick and miss.best == "b128x128x32_t128_s3"
    assert miss.gain == pytest.approx(0.051 / 0.040 - 1)
    out = _run("--records", str(path))
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert len(lines) == 2 and lines[0].split()[:2] == ["+27.5%", slow.id]
    assert "3 shapes as runs timed them, in 1 records: the pick timed on 3" in lines[1]
    # --all lists every shape whose pick was timed; --gpu keeps one GPU's runs.
    assert len(_run("--records", str(path), "--all").stdout.splitlines()) == 4
    only = _run("--records", str(path), "--gpu", "NVIDIA H100 80GB HBM3", "--all").stdout
    assert only.splitlines()[0].split()[:2] == ["+0.0%", slow.id] and "H100" in only
    # A gain under --min-gain is not a miss.
    assert len(_run("--records", str(path), "--min-gain", "0.3").stdout.splitlines()) == 1


@pytest.mark.parametrize(
    "content, args, message",
    [
        ('{"meta": {"run": "r"}}\n{"run": "r", "m": 1}\n', [], "bad.jsonl:2: not a sweep row"),
        ("[1, 2]\n", [], "bad.jsonl:1: must be a JSON object"),
        ("", ["--min-gain", "x"], "--min-gain: 'x' is not a number"),
        ("", ["--min-gain", "-1"], "-1.0 must be a fraction between 0 and 1"),
    ],
)
def test_bad_input_names_the_file_and_line(tmp_path, content, args, message):
    path = tmp_path / "bad.jsonl"
    path.write_text(content)
    out = _run("--records", str(path), *args)
    assert out.returncode == 2 and message in out.stderr and "Traceback" not in out.stderr


def test_a_torn_line_is_skipped_with_a_note(record):
    # An interrupted write leaves a line that is not complete JSON: the record's other
    # lines still count, as bench_gemm --replay reads them.
    path, slow, _ = record
    path.write_text(path.read_text() + '{"run": "r1", "shape": "m1')
    out = _run("--records", str(path))
    assert out.returncode == 0 and f"{path.name}:12: torn line skipped" in out.stderr
    assert out.stdout.splitlines()[0].split()[:2] == ["+27.5%", slow.id]


def test_a_gpu_no_run_was_on_is_named_with_those_that_were(record):
    path, _, _ = record
    out = _run("--records", str(path), "--gpu", "H200")
    assert out.returncode == 2
    assert "--gpu 'H200': no run in the records was on it; they hold ['NVIDIA H100" in out.stderr


def test_a_missing_record_is_named():
    out = _run("--records", "no/such.jsonl")
    assert out.returncode == 2 and "no/such.jsonl: cannot read" in out.stderr


def test_by_change_gathers_each_change_to_the_pick_over_shapes(tmp_path):
    """Two shapes whose picks are one tile (128x192 under a wave, NN): adding ``w8``
    beside it ran faster on one and slower on the other; the change is one line, its
    median and range over both comparisons."""
    shapes = [GemmShape(1488, 1552, 2704), GemmShape(1104, 2128, 2560, "bfloat16")]
    picks = [pick_config(s, GPU, 132).id for s in shapes]
    assert picks[0] == picks[1] == "b128x192x64_t256_s4_pr_e"
    w8 = "b128x192x64_t256_s4_w8_pr_e"
    lines = [
        {"meta": {"run": "r1", "gpu": GPU, "sm_count": 132}},
        _row("r1", shapes[0], picks[0], 0.0286),
        _row("r1", shapes[0], w8, 0.0246),
        _row("r1", shapes[1], picks[1], 0.0156),
        _row("r1", shapes[1], w8, 0.0160),
    ]
    path = _record(tmp_path, lines)
    sweeps, _ = misses.read_sweeps(path)
    ((change, gains),) = misses.by_change(sweeps, 2)
    assert change == misses.Change("NN", True, "b128x192x64", ("w8",), ())
    assert sorted(gains) == pytest.approx(sorted([0.0286 / 0.0246 - 1, 0.0156 / 0.0160 - 1]))
    assert misses.by_change(sweeps, 3) == []  # two comparisons: under --min-count 3
    out = _run("--records", str(path), "--by-change", "--min-count", "2")
    assert out.returncode == 0, out.stderr
    first = out.stdout.splitlines()[0]
    assert "2 comparisons" in first and "NN under a wave" in first and "b128x192x64: +w8" in first
    assert first.split()[0] == f"{statistics.median(gains):+.1%}"


def test_a_change_of_tile_names_both_tiles_and_the_options_it_drops():
    sweep = misses.Sweep("r.jsonl", GPU, 132, GemmShape(4096, 4096, 4096), {})
    pick = GemmConfig.from_id("b128x256x64_t256_s3_w16_e")
    change = misses.Change.of(sweep, pick, "b256x128x64_t256_s3_e")
    assert change.tile == "b128x256x64->b256x128x64" and change.dropped == ("w16",)
    assert not change.under_a_wave and "NN a wave or more" in change.label()
