"""A check's launch that never finishes ends the process, naming the kernel, instead of
waiting forever (``harness.measure.correctness.wait_or_exit``), on the CPU with a fake
clock and a fake event."""

import subprocess
import sys

import pytest

from harness.cli import EXIT_HUNG
from harness.measure import correctness


class Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now

    def sleep(self, seconds):
        self.now += seconds


def test_a_launch_that_finishes_returns_without_a_hang():
    clock, hangs = Clock(), []
    queries = iter([False] * 50 + [True])
    correctness.wait_or_exit(
        lambda: next(queries),
        "gemm x",
        1.0,
        clock=clock,
        sleep=clock.sleep,
        on_hang=lambda *a: hangs.append(a),
    )
    assert hangs == [] and clock.now == pytest.approx(0.05)


def test_a_launch_that_never_finishes_is_called_hung_after_the_limit_not_before():
    clock, hangs = Clock(), []
    correctness.wait_or_exit(
        lambda: False,
        "gemm m16_n8192_k8192_bf16 b64x16x128_t128_s6",
        2.0,
        clock=clock,
        sleep=clock.sleep,
        on_hang=lambda *a: hangs.append((clock.now, *a)),
    )
    ((at, what, seconds),) = hangs
    assert 2.0 < at < 2.01 and seconds == 2.0
    assert what == "gemm m16_n8192_k8192_bf16 b64x16x128_t128_s6"


def test_hung_exits_at_once_with_its_status_naming_the_kernel():
    """In a child process: ``hung`` must end the process even from inside a try block
    that would catch SystemExit, and say what hung and how to go on."""
    code = (
        "from harness.measure.correctness import hung\n"
        "try:\n"
        "    hung('gemm m96_n7168_k2048_f16_nt b128x96x64_t128_s4', 60.0)\n"
        "except BaseException:\n"
        "    print('caught')\n"
        "print('went on')\n"
    )
    got = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert got.returncode == EXIT_HUNG == 6
    assert "caught" not in got.stdout and "went on" not in got.stdout
    assert "gemm m96_n7168_k2048_f16_nt b128x96x64_t128_s4" in got.stderr
    assert "did not finish within 60 s" in got.stderr and "Leave the config out" in got.stderr


def test_hung_lets_each_command_keep_its_results_even_if_one_writer_fails(monkeypatch, capsys):
    kept, exits = [], []

    def broken(what):
        raise OSError("disk full")

    monkeypatch.setattr(correctness.os, "_exit", exits.append)
    with correctness.on_hang(kept.append), correctness.on_hang(broken):
        correctness.hung("gemm m1536_n1536_k1536_bf16_nt b128x192x64_t256_s4", 60.0)
    assert kept == ["gemm m1536_n1536_k1536_bf16_nt b128x192x64_t256_s4"]
    assert exits == [EXIT_HUNG]
    assert "could not keep the results so far: OSError('disk full')" in capsys.readouterr().err
    assert correctness._LAST_WORDS == []
