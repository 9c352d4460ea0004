"""``tune_gemm --only``: the configs a focused re-tune ranks, and its bad input."""

import pytest

from benchmarks import tune_gemm
from kernels import GemmConfig, GemmShape


def test_buildable_keeps_what_the_shape_can_build_in_order_once():
    aligned = GemmConfig.from_id("b128x256x64_t256_s3_w16_e_p132_a")
    plain = GemmConfig.from_id("b128x128x64_t128_s3")
    # Rows of 1030 bytes: the asynchronous pipeline loads every tile by TMA and refuses.
    shape = GemmShape(4097, 1031, 515)
    assert tune_gemm.buildable(shape, [aligned, plain, plain]) == [plain]
    assert tune_gemm.buildable(GemmShape(4096, 4096, 4096), [aligned, plain, aligned]) == [
        aligned,
        plain,
    ]


@pytest.mark.parametrize(
    "argv, field",
    [
        (["--only", "b128x256x64_t256_s9"], "num_stages=9"),
        (["--only", "b128x256x64_t256_s3", "--remeasure"], "--only"),
        (["--only", "b128x256x64_t256_s3", "--async-mma"], "--only"),
        (["--only", "b128x256x64_t256_s3", "--list", "--sms", "132"], "--only"),
    ],
)
def test_only_bad_input_names_the_rule(argv, field, capsys):
    with pytest.raises(SystemExit) as exit_:
        tune_gemm.main(["--case", "square4096", *argv])
    assert exit_.value.code == 2
    assert field in capsys.readouterr().err
