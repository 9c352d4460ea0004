"""The suite's CPU tracks and the forkserver's premise, on the CPU."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent


def test_compile_time_runs_on_a_few_configs_that_static_also_builds():
    from asv_bench import static

    assert 1 <= len(static.COMPILE_CONFIGS) < len(static.CONFIGS)
    assert set(static.COMPILE_CONFIGS) <= set(static.CONFIGS)
    assert static.CompileTime.params == [static.COMPILE_CONFIGS]


def test_the_suite_imports_neither_torch_nor_tilelang():
    # asv's forkserver imports the suite once and forks every benchmark from it: a CUDA
    # context (or torch's CUDA state) made at import would be shared by every child.
    code = (
        "import sys, asv_bench.gemm, asv_bench.static; "
        "print(sorted(m for m in ('torch', 'tilelang', 'tvm') if m in sys.modules))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == "[]"
