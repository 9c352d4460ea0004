"""The registry reads the family packages from pyproject.toml and loads their operators;
a malformed list or a package without an operator is named."""

from types import SimpleNamespace

import pytest

from harness.ops import registry


def _pyproject(tmp_path, body: str):
    path = tmp_path / "pyproject.toml"
    path.write_text(f"[tool.tilelang-gemm-perf]\n{body}\n")
    return path


def test_the_registered_families_are_loaded():
    assert registry.family_packages() == ("families.grouped_gemm",)
    assert set(registry.OPERATORS) == {"gemm", "grouped_gemm"}
    assert registry.OPERATORS["grouped_gemm"].__module__ == "families.grouped_gemm.op"
    assert [p.name for p in registry.family_folders()] == ["grouped_gemm"]


def test_no_table_registers_no_family(tmp_path):
    path = tmp_path / "pyproject.toml"
    path.write_text("[project]\nname = 'x'\n")
    assert registry.family_packages(path) == ()
    assert list(registry.load_operators(path)) == ["gemm"]


@pytest.mark.parametrize(
    "body, message",
    [
        ('families = "families.conv"', r"families='families.conv': must be a list"),
        ('families = ["families/conv"]', r"'families/conv': must be a dotted package name"),
        ("families = [3]", r"3: must be a dotted package name"),
        ('families = ["a", "a"]', r"lists a package twice"),
        ("families = [", r"not valid TOML"),
    ],
)
def test_a_malformed_family_list_is_named(tmp_path, body, message):
    with pytest.raises(ValueError, match=message):
        registry.family_packages(_pyproject(tmp_path, body))


def test_a_package_without_an_operator_is_named(tmp_path, monkeypatch):
    path = _pyproject(tmp_path, 'families = ["fake_family"]')
    monkeypatch.setattr(registry, "family_module", lambda package, part: SimpleNamespace())
    with pytest.raises(ValueError, match=r"fake_family.op.OPERATOR=None: must implement"):
        registry.load_operators(path)
    gemm = SimpleNamespace(OPERATOR=registry.GEMM)
    monkeypatch.setattr(registry, "family_module", lambda package, part: gemm)
    with pytest.raises(ValueError, match=r"fake_family: operator name 'gemm' is already"):
        registry.load_operators(path)
