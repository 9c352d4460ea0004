"""Report rendering from synthetic measurements, on the CPU."""

import random

from harness.cases import CaseResult
from harness.correctness import Check
from harness.report import render_stage04
from harness.timing import Timing
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
