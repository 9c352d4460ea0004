"""Bad input to the helper commands: each names the option and the rule, on the CPU."""

import subprocess
import sys
from pathlib import Path

import pytest

from harness.suite import results_branch

ROOT = Path(__file__).resolve().parent.parent


# Re-rendering the committed report: no GPU needed.
REPLAY = ["-m", "benchmarks.bench_gemm", "--replay", "reports/stage04_gemm.jsonl"]
TABLE = "kernels/tuned_configs.json"


def _run(*args):
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, cwd=ROOT)


@pytest.mark.parametrize(
    "args, message",
    [
        (
            ["-m", "benchmarks.bench_gemm", "--config", "b128x128"],
            "must look like b128x256x64_t256_s3",
        ),
        (["-m", "benchmarks.bench_gemm", "--config", "b100x128x32_t128_s3"], "block_m=100"),
        (
            ["-m", "harness.suite.precompile", "asv_bench.gemm", "--workers", "0"],
            "--workers: 0 must be >= 1",
        ),
        (["-m", "harness.gate.calibrate", "--runs", "1"], "--runs=1: must be >= 2"),
        (["-m", "harness.gate.selftest", "--slowdown", "3"], "must be a fraction between 0 and 1"),
        (["-m", "harness.gate.selftest", "--n", "0"], "--n: 0 must be >= 1"),
        (["-m", "benchmarks.tune_gemm", "--case", "square"], "invalid choice: 'square'"),
        (["-m", "benchmarks.tune_gemm", "--top", "0"], "--top: 0 must be >= 1"),
        (["-m", "benchmarks.tune_gemm", "--bf16-from", "-1"], "--bf16-from: -1 must be >= 0"),
        (["-m", "harness.suite.asv_stats", "/nonexistent/results"], "no asv result files"),
        (["-m", "harness.gate.selftest", "--gpus", "0,x"], "must be 'all' or indices like 0,1"),
        (["-m", "harness.gate", "HEAD", "HEAD", "--gpus", "one"], "must be 'all' or indices"),
        (["-m", "harness.suite.run", "--gpus", "-1"], "must be 'all' or indices like 0,1"),
        (["-m", "harness.suite.run", "-b", "("], "is not a valid regex"),
        (
            [*REPLAY, "--tuned", TABLE],
            "--tuned: adds a section to the report, so it needs --report",
        ),
        (
            [*REPLAY, "--report", "/tmp/r.md", "--tune-log", "reports/tune_h200.jsonl"],
            "--tune-log: feeds the Tuned Configs section, so it needs --tuned",
        ),
        (
            [
                *REPLAY,
                "--report",
                "/tmp/r.md",
                "--tuned",
                TABLE,
                "--tune-log",
                "/nonexistent.jsonl",
            ],
            "--tune-log=/nonexistent.jsonl: no such file",
        ),
    ],
)
def test_bad_option_names_the_field_and_rule(args, message):
    out = _run(*args)
    assert out.returncode == 2, out.stderr
    assert message in out.stderr and "Traceback" not in out.stderr


def test_results_folder_that_is_not_a_worktree_is_refused(tmp_path, monkeypatch):
    folder = tmp_path / "results"
    folder.mkdir()
    (folder / "old.json").write_text("{}")
    monkeypatch.setattr(results_branch, "_remote_has", lambda branch, remote: False)
    with pytest.raises(results_branch.ResultsBranchError, match="exists and is not a worktree"):
        results_branch.checkout(folder)


def test_tuner_lists_its_spaces_and_needs_a_gpu_to_tune():
    out = _run("-m", "benchmarks.tune_gemm", "--list")
    assert out.returncode == 0 and "square4096: 4096x4096x4096 NN, 78 configs" in out.stdout
    out = _run("-m", "benchmarks.tune_gemm", "--case", "decode16")
    # No GPU here: one line that says why, and the tuner's own exit status.
    assert out.returncode == 3 and "tuning times kernels on a GPU" in out.stderr
