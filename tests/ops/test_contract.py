"""Every registered operator family keeps the whole contract, on the CPU: types, config
space and validator, seeded inputs, float64 reference, flops and bytes, tracks; and the
correctness check built on it catches an unwritten or wrong output."""

import dataclasses

import pytest
import torch

from harness.measure.correctness import check_launch
from harness.ops.contract import CompileTarget, DeviceSpec, Operator, arch_of
from harness.ops.registry import OPERATORS, build_combination, operator, operator_for

# A compile target of 16 SMs: nothing here depends on the H200's count.
SM90 = CompileTarget(sm_count=16)

FAMILIES = sorted(OPERATORS)


@pytest.fixture(params=FAMILIES)
def op(request) -> Operator:
    return OPERATORS[request.param]


def test_every_family_is_an_operator(op):
    assert isinstance(op, Operator)
    assert operator(op.name) is op
    assert operator_for(op.example_shape()) is op
    assert isinstance(op.example_shape(), op.shape_type)


def test_shape_and_config_are_frozen_values(op):
    shape = op.example_shape()
    config = op.configs(shape, SM90)[0]
    for value in (shape, config):
        assert dataclasses.is_dataclass(value)
        with pytest.raises(dataclasses.FrozenInstanceError):
            setattr(value, dataclasses.fields(value)[0].name, 1)
        assert hash(value) == hash(dataclasses.replace(value))
        assert value.id  # readable asv and pytest ids


def test_config_space_is_valid_for_its_shape(op):
    shape = op.example_shape()
    configs = op.configs(shape, SM90)
    assert configs and len(set(configs)) == len(configs)
    for config in configs:
        assert isinstance(config, op.config_type)
        op.validate(shape, config)


def test_validator_names_the_field_of_a_bad_config(op):
    shape = op.example_shape()
    with pytest.raises(
        ValueError, match=rf"{op.name}: config=.*must be a {op.config_type.__name__}"
    ):
        op.validate(shape, "b128x128x32_t128_s3")
    with pytest.raises(ValueError, match=rf"{op.name}: shape=.*must be a {op.shape_type.__name__}"):
        op.validate(object(), op.configs(shape, SM90)[0])


# A config each family's validator must refuse for its example shape, and the field and
# rule its error names.
BAD = {
    "gemm": (
        lambda shape: dataclasses.replace(shape, n=1031),
        dict(
            block_m=64,
            block_n=128,
            block_k=64,
            threads=128,
            num_stages=4,
            split_k=4,
            smem_epilogue=True,
        ),
        r"GemmConfig.split_k=4: with smem_epilogue=True needs N \* 2 bytes to be a multiple",
    ),
    "grouped_gemm": (
        lambda shape: shape,
        dict(swizzle=8),
        r"GemmConfig.swizzle=8: must be 0 for the grouped GEMM",
    ),
}


def test_every_family_has_a_refused_combination_here():
    assert set(BAD) == set(OPERATORS)


def test_validator_refuses_a_combination_by_name(op):
    reshape, fields, message = BAD[op.name]
    shape = reshape(op.example_shape())
    config = op.config_type(**fields)
    with pytest.raises(ValueError, match=message):
        op.validate(shape, config)
    with pytest.raises(ValueError, match=message):  # the one walk validates first
        build_combination(op.name, shape, config, SM90)


def test_inputs_are_seeded_fresh_and_not_zero(op):
    shape = op.example_shape()
    first, again, other = (op.inputs(shape, seed, "cpu") for seed in (3, 3, 4))
    operands = [f.name for f in dataclasses.fields(first) if f.name not in ("shape", "out")]
    assert operands
    for name in operands:
        x, y, z = getattr(first, name), getattr(again, name), getattr(other, name)
        assert x.dtype == getattr(torch, shape.dtype)
        assert torch.equal(x, y), f"{name}: the same seed must give the same values"
        assert not torch.equal(x, z), f"{name}: another seed must give other values"
        assert x.count_nonzero() > x.numel() // 2, f"{name}: random, not zeros"
    assert first.out.dtype == getattr(torch, shape.dtype)


def test_reference_is_float64_per_part(op):
    inputs = op.inputs(op.example_shape(), 0, "cpu")
    parts, refs = inputs.parts(), op.reference(inputs)
    assert len(parts) == len(refs) >= 1
    for part, ref in zip(parts, refs, strict=True):
        assert ref.dtype == torch.float64
        assert ref.shape == part.shape
        assert part is inputs.out or part._base is inputs.out, "a part is a view of out"


def test_work_and_tracks(op):
    shape = op.example_shape()
    assert op.flops(shape) > 0 and op.bytes(shape) > 0
    assert 0 < op.tolerance(shape) < 0.1
    assert op.tracks and all(t.startswith("track_") for t in op.tracks)


def _kernel(op, damage=lambda inputs: None):
    """A bind that writes the float64 reference, rounded (what a correct kernel does),
    then applies ``damage`` to the inputs' output."""

    def bind(inputs):
        def launch():
            for part, ref in zip(inputs.parts(), op.reference(inputs), strict=True):
                part.copy_(ref)
            damage(inputs)

        return launch

    return bind


def test_correctness_passes_a_correct_output(op):
    check = check_launch(op, op.example_shape(), _kernel(op), seed=5, device="cpu")
    assert check.ok and check.unwritten == 0, str(check)


def _leave_poison(inputs):
    inputs.out[-1, -1] = float("nan")  # as if the poison survived there


def test_correctness_counts_what_a_kernel_left_unwritten(op):
    check = check_launch(op, op.example_shape(), _kernel(op, _leave_poison), seed=5, device="cpu")
    assert check.unwritten == 1 and not check.ok


def _scale_last_part(inputs):
    [p for p in inputs.parts() if p.numel()][-1].mul_(1.1)


def test_correctness_fails_a_wrong_part(op):
    bind = _kernel(op, _scale_last_part)
    check = check_launch(op, op.example_shape(), bind, seed=5, device="cpu")
    assert check.unwritten == 0 and not check.ok
    assert check.rel_error == pytest.approx(0.1, rel=0.05)


def test_unknown_family_is_named():
    with pytest.raises(
        ValueError, match=r"family='conv': must be one of \['gemm', 'grouped_gemm'\]"
    ):
        operator("conv")
    with pytest.raises(ValueError, match="not the shape of any family"):
        operator_for((1, 2, 3))


def test_device_spec_is_read_not_assumed():
    @dataclasses.dataclass
    class Present:  # a measured device: no arch, TileLang targets it
        sm_count: int = 132
        compute_capability: tuple = (9, 0)

    assert isinstance(Present(), DeviceSpec) and isinstance(SM90, DeviceSpec)
    assert arch_of(Present()) is None and arch_of(None) is None
    assert arch_of(SM90) == "sm_90a"


def test_a_compile_target_needs_its_sm_count():
    with pytest.raises(TypeError):
        CompileTarget()  # no default device
    with pytest.raises(ValueError, match="sm_count"):
        CompileTarget(sm_count=0)
