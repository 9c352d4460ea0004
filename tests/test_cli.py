"""The training-stage CLI: argument checks and the no-GPU path, on the CPU."""

import subprocess
import sys

import pytest

from benchmarks import bench_gemm
from tests.conftest import NO_GPU


def _run(*args):
    return subprocess.run(
        [sys.executable, "-m", "benchmarks.bench_gemm", *args], capture_output=True, text=True
    )


def test_help_explains_itself():
    out = _run("--help")
    assert out.returncode == 0
    for word in ("--run-tilelang", "--warmup", "--repeat", "--num-stages", "TFLOPS", "--report"):
        assert word in out.stdout


@pytest.mark.parametrize(
    "args, message",
    [
        (["--m", "0"], "argument --m: 0 must be >= 1"),
        (["--repeat", "0"], "argument --repeat: 0 must be >= 1"),
        (["--warmup", "-3"], "argument --warmup: -3 must be >= 0"),
        (["--dtype", "float32"], "argument --dtype: invalid choice"),
        (["--shape", "12x4"], "must be MxNxK"),
        (["--threads", "96"], "GemmConfig.threads=96: must be >= 128"),
    ],
)
def test_bad_input_names_the_field(args, message):
    out = _run(*args)
    assert out.returncode == 2
    assert message in out.stderr
    assert "Traceback" not in out.stderr


def test_sweep_plan_skips_invalid_configs_with_reason():
    args = bench_gemm.build_parser().parse_args(
        [
            "--m",
            "128",
            "256",
            "--threads",
            "128",
            "256",
            "--num-stages",
            "2",
            "3",
            "--block-k",
            "8",
            "32",
        ]
    )
    shapes, configs, skipped = bench_gemm.plan(args)
    assert [s.m for s in shapes] == [128, 256]
    assert {(c.threads, c.num_stages) for c in configs} == {
        (t, s) for t in (128, 256) for s in (2, 3)
    }
    assert {c.block_k for c in configs} == {32}
    assert len(skipped) == 4 and all("block_k=8: must be >= 16" in line for line in skipped)


def test_explicit_shapes_replace_the_product():
    args = bench_gemm.build_parser().parse_args(["--shape", "128x128x128", "4096x4096x4096"])
    shapes, _, _ = bench_gemm.plan(args)
    assert [(s.m, s.n, s.k) for s in shapes] == [(128, 128, 128), (4096, 4096, 4096)]


@pytest.mark.skipif(NO_GPU is None, reason="checks the no-GPU message; a GPU is present")
def test_without_gpu_one_line_and_nonzero():
    out = _run("--m", "128", "--n", "128", "--k", "128", "--run-tilelang")
    assert out.returncode == bench_gemm.EXIT_NO_GPU
    assert out.stderr.strip().count("\n") == 0
    assert "no CUDA device" in out.stderr and "Traceback" not in out.stderr


def test_replay_renders_a_recorded_sweep_without_a_gpu(tmp_path):
    report = tmp_path / "r.md"
    out = _run("--replay", "reports/stage04_gemm.jsonl", "--report", str(report))
    assert out.returncode == 0, out.stderr
    text = report.read_text()
    assert "NVIDIA H200" in text and "## Benchmark Table" in text
    assert text.count("**best**") == 2  # one per recorded shape


def test_replay_round_trips_rows():
    meta, rows = bench_gemm.load_jsonl(bench_gemm.Path("reports/stage04_gemm.jsonl"))
    assert meta["gpu"] == "NVIDIA H200" and len(rows) >= 3
    again = type(rows[0]).from_dict(rows[0].to_dict())
    assert again.to_dict() == rows[0].to_dict()


def test_replay_of_empty_file_is_a_clear_error(tmp_path):
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    out = _run("--replay", str(empty))
    assert out.returncode == 2 and "holds no measured rows" in out.stderr


def test_replay_with_the_tuned_table_adds_the_section_and_plots(tmp_path):
    report = tmp_path / "r.md"
    out = _run(
        "--replay",
        "reports/stage04_gemm.jsonl",
        "--report",
        str(report),
        "--tuned",
        "kernels/tuned_configs.json",
        "--tune-log",
        "reports/tune_h200.jsonl",
    )
    assert out.returncode == 0, out.stderr
    text = report.read_text()
    assert "## Tuned Configs" in text and "| square4096 |" in text
    for png in ("r_roofline.png", "r_tflops_4096.png"):
        assert f"]({png})" in text and (tmp_path / png).stat().st_size > 5000


def test_tuned_table_without_this_gpu_is_a_clear_error(tmp_path):
    table = tmp_path / "t.json"
    table.write_text('{"NVIDIA H100": {}}')
    out = _run(
        "--replay",
        "reports/stage04_gemm.jsonl",
        "--report",
        str(tmp_path / "r.md"),
        "--tuned",
        str(table),
    )
    assert out.returncode == 2 and "--tuned" in out.stderr and "NVIDIA H200" in out.stderr
