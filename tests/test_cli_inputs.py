"""Bad input to the helper commands: each names the option and the rule, on the CPU."""

import argparse
import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks import panels
from harness import cli
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
        (["-m", "benchmarks.bench_gemm", "--workers", "0"], "--workers: 0 must be >= 1"),
        (["-m", "harness.gate.calibrate", "--runs", "1"], "--runs=1: must be >= 3"),
        (["-m", "harness.gate.selftest", "--slowdown", "3"], "must be a fraction between 0 and 1"),
        (["-m", "harness.gate.selftest", "--n", "0"], "--n: 0 must be >= 1"),
        (["-m", "benchmarks.tune_gemm", "--case", "square"], "invalid choice: 'square'"),
        (["-m", "benchmarks.tune_gemm", "--top", "0"], "--top: 0 must be >= 1"),
        (["-m", "benchmarks.tune_gemm", "--bf16-from", "-1"], "--bf16-from: -1 must be >= 0"),
        (["-m", "harness.suite.asv_stats", "/nonexistent/results"], "no asv result files"),
        (["-m", "harness.suite.agreement", "/nonexistent/results"], "no asv result files"),
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
        (
            [*REPLAY, "--report", "/tmp/r.md", "--retune-log", "reports/tune_h200.jsonl"],
            "--retune-log: feeds the Tuned Configs section, so it needs --tuned",
        ),
        (
            [*REPLAY, "--report", "/tmp/r.md", "--tuned", TABLE, "--retune-log", "/none.jsonl"],
            "--retune-log=/none.jsonl: no such file",
        ),
        (
            # A log without winner records is not a re-tune's.
            [
                *REPLAY,
                "--report",
                "/tmp/r.md",
                "--tuned",
                TABLE,
                "--retune-log",
                "reports/stage04_gemm.jsonl",
            ],
            "reports/stage04_gemm.jsonl: no winner records",
        ),
    ],
)
def test_bad_option_names_the_field_and_rule(args, message):
    out = _run(*args)
    assert out.returncode == 2, out.stderr
    assert message in out.stderr and "Traceback" not in out.stderr


# Output paths are checked as the options are parsed: before the GPU check (this machine
# has none, which would otherwise answer first) and before anything is measured.
BENCH = ["-m", "benchmarks.bench_gemm", "--m", "128", "--run-tilelang"]
TUNE = ["-m", "benchmarks.tune_gemm", "--case", "decode16"]


@pytest.mark.parametrize(
    "args, option",
    [
        ([*BENCH, "--report", "/proc/x.md"], "--report"),
        ([*BENCH, "--jsonl", "/proc/x.jsonl"], "--jsonl"),
        ([*BENCH, "--report", "README.md/x.md"], "--report"),  # a folder that is a file
        ([*BENCH, "--jsonl", "kernels"], "--jsonl"),  # a folder, not a file
        ([*REPLAY, "--report", "/proc/x.md"], "--report"),
        ([*TUNE, "--out", "/proc/t.json"], "--out"),
        ([*TUNE, "--jsonl", "/proc/t.jsonl"], "--jsonl"),
    ],
)
def test_unwritable_output_is_refused_before_any_gpu_work(args, option):
    out = _run(*args)
    assert out.returncode == 2, out.stderr
    assert f"argument {option}: " in out.stderr and "Traceback" not in out.stderr
    assert "GPU" not in out.stderr


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into a read-only folder anyway")
def test_output_under_a_read_only_folder_is_refused(tmp_path):
    folder = tmp_path / "ro"
    folder.mkdir()
    folder.chmod(0o555)
    try:
        out = _run(*BENCH, "--report", str(folder / "r.md"))
    finally:
        folder.chmod(0o755)
    assert out.returncode == 2 and "argument --report: " in out.stderr
    assert "is not a writable folder" in out.stderr


def test_an_existing_read_only_file_is_refused(tmp_path, monkeypatch):
    path = tmp_path / "rows.jsonl"
    path.write_text("")
    real = os.access
    # Simulated: root (as in CI containers) may write a read-only file anyway.
    monkeypatch.setattr(cli.os, "access", lambda p, mode: False if p == path else real(p, mode))
    with pytest.raises(argparse.ArgumentTypeError, match="exists and is not writable"):
        cli.output_file(str(path))


def test_results_folder_that_is_not_a_worktree_is_refused(tmp_path, monkeypatch):
    folder = tmp_path / "results"
    folder.mkdir()
    (folder / "old.json").write_text("{}")
    monkeypatch.setattr(results_branch, "_remote_has", lambda branch, remote: False)
    with pytest.raises(results_branch.ResultsBranchError, match="exists and is not a worktree"):
        results_branch.checkout(folder)


def test_tuner_lists_its_spaces_and_needs_a_gpu_to_tune():
    out = _run("-m", "benchmarks.tune_gemm", "--list", "--sms", "132")
    assert out.returncode == 0 and "square4096: 4096x4096x4096 NN, 104 configs" in out.stdout
    assert "search spaces for 132 SMs" in out.stdout
    # No GPU here to read the SM count from: the space depends on it, so it is asked for.
    out = _run("-m", "benchmarks.tune_gemm", "--list")
    assert out.returncode == 2 and "--list: no GPU to read the SM count from" in out.stderr
    assert "give --sms N" in out.stderr
    out = _run("-m", "benchmarks.tune_gemm", "--sms", "132")
    assert out.returncode == 2 and "--sms: only lists spaces (--list)" in out.stderr
    out = _run("-m", "benchmarks.tune_gemm", "--case", "decode16")
    # No GPU here: one line that says why, and the tuner's own exit status.
    assert out.returncode == 3 and "tuning times kernels on a GPU" in out.stderr


# A panel's shapes file says in its ``about`` how it is to be timed: a command that a
# person pastes onto a GPU host. Each must parse, read that same file and name configs
# that every shape of it can run, or the GPU time is spent on an error.
PANEL_COMMAND = panels.PANEL_COMMAND  # what benchmarks.panels runs, one pattern
PANELS = [
    (path, command)
    for path in sorted((ROOT / "reports").glob("offtable_*_shapes.json"))
    for command in PANEL_COMMAND.findall(json.loads(path.read_text()).get("about", ""))
    if "--shapes" in command
]


@pytest.mark.parametrize("path, command", PANELS, ids=[p.stem for p, _ in PANELS])
def test_each_panel_command_runs_as_its_file_says(path, command):
    from benchmarks import bench_gemm
    from kernels.gemm import GemmConfig, check_combination

    args = bench_gemm.build_parser().parse_args(shlex.split(command))
    assert (ROOT / args.shapes).resolve() == path
    assert args.jsonl is not None, "a panel keeps its rows"
    shapes, entries = bench_gemm.plan(args)
    if args.around_pick is not None:
        # Each shape's pick, and a change of it that the shape can run on four or more
        # (a change that gives no config the shape runs is noted, not timed: a pick
        # that a later rule changed may leave some shapes with their pick alone).
        around = bench_gemm.around_pick(args.around_pick, shapes, "NVIDIA H200", 132)
        changed = [shape for shape, pairs in around.configs.items() if len(pairs) >= 2]
        assert len(shapes) >= 4 and len(changed) >= 4, around.notes
        # And each change gives a config that one of the shapes or more can run: a
        # change that none can run (a field it cannot take with the pick's others) would
        # spend no GPU time and say so only in the run's notes.
        # (A change that repeats a config already planned is noted too, and counts.)
        used = {why for pairs in around.configs.values() for _, why in pairs}
        repeats = {note.split(" with ", 1)[1].split(": ", 1)[0] for note in around.notes
                   if ": not timed (" not in note}  # fmt: skip
        idle = [c.text for c in args.around_pick if c.text not in used | repeats]
        assert not idle, (idle, around.notes)
        return
    assert len(shapes) >= 4 and args.config
    assert all(isinstance(e, GemmConfig) for e in entries), entries
    for shape in shapes:
        for config in entries:
            check_combination(shape, config)


def test_panel_commands_are_found():
    # The pattern above reads the committed files: a change in their wording that it
    # misses would leave the test above with nothing to check.
    assert len(PANELS) >= 10
