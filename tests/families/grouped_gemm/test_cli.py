"""The grouped-GEMM benchmark command on the CPU: bad input names the option and the
rule, the shape it builds, and the table from fixed timings."""

import pytest

from families.grouped_gemm import cli as bench
from families.grouped_gemm.kernel import GroupedGemmShape
from harness.cli import EXIT_NO_GPU
from harness.measure.device import no_gpu_reason


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--experts", "0"], "--experts: 0 must be >= 1"),
        (["--experts", "3", "--m-sizes", "1", "2"], "--m-sizes: 2 values for --experts 3"),
        (["--m-sizes", "-4"], "--m-sizes: -4 must be >= 0"),
        (["--experts", "2", "--m-sizes", "0", "0"], "--m-sizes: every expert has 0 rows"),
        (["--n", "0"], "--n: 0 must be >= 1"),
        (["--dtype", "f32"], "--dtype: invalid choice: 'f32'"),
        (["--repeat", "0"], "--repeat: 0 must be >= 1"),
        (["--config", "b128x128"], "must look like b128x256x64_t256_s3"),
        (["--config", "b128x128x64_t128_s3_w8"], "GemmConfig.swizzle=8: must be 0 for the grouped"),
        (["--config", "b100x128x64_t128_s3"], "GemmConfig.block_m=100"),
        (["--config", "b128x256x64_t256_s3_sk132"], "GemmConfig.stream_k=132: must be 0"),
        (
            ["--n", "1002", "--config", "b128x256x64_t256_s3"],
            "--config b128x256x64_t256_s3: GemmConfig.threads=256: with B rows of 1002",
        ),
    ],
)
def test_bad_input_names_the_option_and_rule(argv, message, capsys):
    with pytest.raises(SystemExit) as exit_info:
        bench.main(argv)
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


def test_one_size_serves_every_expert():
    args = bench.build_parser().parse_args(["--experts", "4", "--m-sizes", "96", "--dtype", "bf16"])
    assert bench.shape_of(args) == GroupedGemmShape((96,) * 4, 4096, 4096, "bfloat16")
    args = bench.build_parser().parse_args(["--experts", "3", "--m-sizes", "5", "0", "7"])
    assert bench.shape_of(args).m_sizes == (5, 0, 7)


# Refused before any GPU work where none is present.
@pytest.mark.skipif(no_gpu_reason() is None, reason="checks the no-GPU exit; a GPU is here")
def test_no_gpu_exits_3(capsys):
    assert bench.main(["--experts", "2", "--m-sizes", "64", "--n", "256", "--k", "256"]) == 3
    assert EXIT_NO_GPU == 3
    assert "this command times kernels on a GPU" in capsys.readouterr().err


def test_table_names_the_baseline_and_reports_speedup_and_tflops():
    shape = GroupedGemmShape((1024, 0, 512, 512), 4096, 2048)
    base = bench.Row("torch.matmul per expert", 0.6)
    kernels = [
        bench.Row("b128x256x64_t256_s3", 0.4, "ok (rel err 1.0e-03, tol 1e-02)"),
        bench.Row("b64x128x64_t128_s4", None, error="RuntimeError: launch failed"),
    ]
    lines = bench.table(shape, base, "torch 2.4 has no torch._grouped_mm", kernels)
    text = "\n".join(lines)
    assert "4 experts (3 with rows), sum M_g=2048" in text
    assert (
        "baseline: torch.matmul per expert (fallback: torch 2.4 has no torch._grouped_mm)" in text
    )
    kernel_line = next(line for line in lines if line.startswith("b128x256x64_t256_s3"))
    flops = 2 * 2048 * 4096 * 2048
    assert f"{flops / 0.4e-3 / 1e12:.1f}" in kernel_line
    assert kernel_line.split()[3] == "1.50"  # baseline 0.6 ms / kernel 0.4 ms
    failed = next(line for line in lines if line.startswith("b64x128x64_t128_s4"))
    assert "FAILED" in failed and "launch failed" in failed
    base_line = next(line for line in lines if line.startswith("torch.matmul per expert"))
    assert base_line.split()[-2] == "-"  # the baseline has no speedup over itself


def test_table_says_nothing_of_a_fallback_when_the_first_choice_ran():
    shape = GroupedGemmShape((64,), 256, 256)
    lines = bench.table(shape, bench.Row("torch._grouped_mm", 0.01), "", [])
    assert lines[1] == "baseline: torch._grouped_mm"
