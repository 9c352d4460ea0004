"""``kernels.changes.ConfigChange``: a change to a config as a command line writes it,
parsed with the field and the rule named where it is bad, and applied through the
config's own validator."""

from __future__ import annotations

import pytest

from kernels import GemmConfig
from kernels.changes import FIELDS, ConfigChange

PAIR = GemmConfig.from_id("b128x192x64_t256_s4_pr_e_a_mb")


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("num_stages=5", "b128x192x64_t256_s5_pr_e_a_mb"),
        ("num_stages=+1", "b128x192x64_t256_s5_pr_e_a_mb"),
        ("num_stages=-2", "b128x192x64_t256_s2_pr_e_a_mb"),
        ("block_n=144,num_stages=5", "b128x144x64_t256_s5_pr_e_a_mb"),
        ("multicast=none", "b128x192x64_t256_s4_pr_e_a"),
        ("async_mma=false, multicast=none", "b128x192x64_t256_s4_pr_e"),
        ("policy=square", "b128x192x64_t256_s4_e_a_mb"),
        ("persistent=132,multicast=ab", "b128x192x64_t256_s4_pr_e_p132_a_mab"),
        ("smem_epilogue=0,multicast=none,async_mma=0", "b128x192x64_t256_s4_pr"),
    ],
)
def test_a_change_applies_to_the_config(text, expected):
    assert ConfigChange.parse(text).apply(PAIR).id == expected


def test_a_config_id_replaces_the_whole_config():
    """An id sets every field, whatever the config it is applied to: the same config
    beside each shape's own pick."""
    whole = ConfigChange.parse("b128x208x64_t256_s4_w8_pr_e")
    for config in [PAIR, GemmConfig.from_id("b256x128x64_t256_s3_e_sk132_a")]:
        assert whole.apply(config) == GemmConfig.from_id("b128x208x64_t256_s4_w8_pr_e")
    assert ConfigChange.parse(" b192x192x64_t384_s3_w8_pr_e_sk132_a ").apply(PAIR).stream_k == 132


def test_a_move_is_taken_from_each_config_it_is_applied_to():
    deeper = ConfigChange.parse("num_stages=+1")
    assert deeper.apply(GemmConfig(128, 128, 64, 128, 3)).num_stages == 4
    assert deeper.apply(GemmConfig(128, 128, 64, 128, 4)).num_stages == 5


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("", "FIELD=VALUE"),
        ("num_stages", "'num_stages': must be FIELD=VALUE"),
        ("b128x208", "or a config id: GemmConfig id 'b128x208': must look like"),
        ("num_stage=5", "'num_stage': must be one of GemmConfig's fields"),
        ("accum_dtype=float16", "'accum_dtype': must be one of"),
        ("num_stages=five", "num_stages=five: must be a whole number, or +N/-N"),
        ("num_stages=+", "num_stages=+: must be a whole number"),
        ("num_stages=4,num_stages=+1", "num_stages: given twice"),
        ("async_mma=yes", "async_mma=yes: must be true or false"),
        ("multicast=c", "multicast=c: must be one of ['none', 'a', 'b', 'ab']"),
        ("policy=diagonal", "policy=diagonal: must be one of ['square', 'row', 'col']"),
    ],
)
def test_a_bad_change_names_the_field_and_the_rule(text, says):
    with pytest.raises(ValueError) as err:
        ConfigChange.parse(text)
    assert says in str(err.value)


def test_a_change_the_config_cannot_take_is_the_validators_error():
    too_deep = ConfigChange.parse("num_stages=+3")  # 7 stages of 128x192x64: over the budget
    with pytest.raises(ValueError, match="GemmConfig.num_stages=7: needs 286720 bytes"):
        too_deep.apply(PAIR)
    with pytest.raises(ValueError, match="GemmConfig.num_stages"):
        ConfigChange.parse("num_stages=-4").apply(PAIR)


def test_every_field_a_change_names_is_one_of_the_configs():
    assert set(FIELDS) <= set(GemmConfig.__dataclass_fields__)
    assert len(FIELDS) == len(set(FIELDS))
