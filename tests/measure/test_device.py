"""DeviceSpec: validation, reading torch's device properties (faked, on the CPU), the
datasheet peaks table; and no GPU's figures written into the code."""

import json
import re
import sys
import types
from pathlib import Path

import pytest

from harness.measure import device
from harness.measure.device import DeviceSpec, DeviceSpecError, Peaks

ROOT = Path(__file__).resolve().parents[2]
GOOD = {
    "name": "NVIDIA Test GPU",
    "sm_count": 16,
    "smem_per_block_bytes": 101376,
    "l2_bytes": 4 * 2**20,
    "compute_capability": (8, 9),
}


def _props(**over):
    """What torch.cuda.get_device_properties returns, as far as DeviceSpec reads it."""
    fields = {
        "name": "NVIDIA Test GPU",
        "multi_processor_count": 16,
        "shared_memory_per_block_optin": 101376,
        "shared_memory_per_block": 49152,
        "L2_cache_size": 4 * 2**20,
        "major": 8,
        "minor": 9,
        **over,
    }
    return types.SimpleNamespace(**{k: v for k, v in fields.items() if v is not None})


def test_a_valid_spec_is_a_hashable_value():
    spec = DeviceSpec(**GOOD)
    assert spec.peaks is None and hash(spec) == hash(DeviceSpec(**GOOD))
    with pytest.raises(AttributeError):
        spec.sm_count = 8  # frozen


@pytest.mark.parametrize(
    "field, value, rule",
    [
        ("name", "", "must be a non-empty string"),
        ("name", None, "must be a non-empty string"),
        ("sm_count", 0, "must be an int > 0"),
        ("sm_count", 16.0, "must be an int > 0"),
        ("sm_count", True, "must be an int > 0"),
        ("smem_per_block_bytes", -1, "must be an int > 0"),
        ("l2_bytes", "4MB", "must be an int > 0"),
        ("compute_capability", (9,), "must be (major, minor)"),
        ("compute_capability", [9, 0], "must be (major, minor)"),
        ("compute_capability", (0, 0), "major >= 1"),
        ("compute_capability", (9, -1), "must be (major, minor)"),
        ("peaks", {"float16": 1.0}, "must be Peaks or None"),
    ],
)
def test_invalid_fields_are_named_with_their_rule(field, value, rule):
    with pytest.raises(DeviceSpecError) as err:
        DeviceSpec(**{**GOOD, field: value})
    assert f"DeviceSpec.{field}={value!r}" in str(err.value) and rule in str(err.value)


@pytest.mark.parametrize("field", ["float16_tflops", "bfloat16_tflops", "hbm_tbps"])
@pytest.mark.parametrize("value", [0, -1.0, float("nan"), float("inf"), "fast"])
def test_invalid_peaks_are_named(field, value):
    good = {"float16_tflops": 100.0, "bfloat16_tflops": 100.0, "hbm_tbps": 1.0}
    with pytest.raises(DeviceSpecError, match=rf"Peaks\.{field}=.*must be a finite number > 0"):
        Peaks(**{**good, field: value})


def test_read_takes_every_field_from_the_device(monkeypatch):
    seen = []

    def properties(index):
        seen.append(index)
        return _props()

    fake_cuda = types.SimpleNamespace(get_device_properties=properties)
    monkeypatch.setitem(sys.modules, "torch", types.SimpleNamespace(cuda=fake_cuda))
    monkeypatch.setattr(device, "no_gpu_reason", lambda: None)
    spec = DeviceSpec.read(1)
    assert seen == [1]
    assert spec == DeviceSpec(**GOOD)  # an unknown part: no peaks
    assert spec.record() == {
        "sm_count": 16,
        "smem_per_block_bytes": 101376,
        "l2_bytes": 4 * 2**20,
        "compute_capability": "8.9",
    }


def test_a_known_part_gets_its_datasheet_peaks():
    spec = DeviceSpec.from_properties(_props(name="NVIDIA H200", major=9, minor=0))
    assert spec.peaks == device.peaks_for("NVIDIA H200")
    assert spec.peaks.tflops("bfloat16") > 0 and spec.peaks.hbm_tbps > 0


def test_read_without_the_opt_in_shared_memory_says_what_it_looked_for():
    with pytest.raises(DeviceSpecError, match="shared_memory_per_block_optin"):
        DeviceSpec.from_properties(_props(shared_memory_per_block_optin=None))


def test_read_without_a_gpu_is_the_no_gpu_error(monkeypatch):
    monkeypatch.setattr(device, "no_gpu_reason", lambda: "no CUDA device visible")
    with pytest.raises(device.NoGpuError, match="no CUDA device visible"):
        DeviceSpec.read()


def test_unknown_device_has_no_peaks_and_says_so():
    assert device.peaks_for("NVIDIA Imaginary 9000") is None
    assert device.no_peaks("NVIDIA Imaginary 9000") == (
        "n/a (no peak figures for NVIDIA Imaginary 9000)"
    )


def test_the_peaks_table_is_checked(tmp_path):
    assert device.peak_table()  # the committed table parses
    bad = tmp_path / "peaks.json"
    bad.write_text(json.dumps({"GPU": {"dense_tflops": {"float16": 1.0}, "hbm_tbps": 1.0}}))
    with pytest.raises(DeviceSpecError, match=r"'GPU': needs dense_tflops\.float16"):
        device.peak_table(bad)
    bad.write_text(
        json.dumps({"GPU": {"dense_tflops": {"float16": 1, "bfloat16": 0}, "hbm_tbps": 1}})
    )
    with pytest.raises(DeviceSpecError, match=r"'GPU': Peaks\.bfloat16_tflops=0"):
        device.peak_table(bad)


# A GPU's figures live in data (the peaks table, the tuned table's sm_count); code that
# names one (an SM count, a constant named after a part) would be used for every GPU.
_NAMED = re.compile(r"\b(?:H100|H200|A100)_[A-Z_]+\b|\b132\b|\b989\.4\b")


def test_no_gpu_figure_is_written_into_kernels_or_harness():
    found = []
    for folder in ("kernels", "harness"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            for number, line in enumerate(path.read_text().splitlines(), 1):
                if _NAMED.search(line):
                    found.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()}")
    assert not found, "\n".join(found)
