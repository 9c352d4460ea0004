"""Every operator family by name, and the one walk from a combination to a built kernel.

The dense GEMM is built in (``harness.ops.gemm``); every other family is a package of its
own (its kernel, its operator, its asv classes: ``families/<name>/``), registered by
one line of configuration, the ``families`` list of pyproject.toml's
``[tool.tilelang-gemm-perf]`` table. This module loads each listed package's ``op``
module and takes its ``OPERATOR``; whatever walks the suite (precompile, shard, cost, the
gate's worker, the asv families) reaches kernels through ``operator`` and
``build_combination`` only."""

from __future__ import annotations

import importlib
import re
from pathlib import Path
from typing import Any

import tomllib

from harness.ops.contract import DeviceSpec, Operator
from harness.ops.gemm import GEMM

PYPROJECT = Path(__file__).resolve().parent.parent.parent / "pyproject.toml"
TABLE = "tilelang-gemm-perf"  # [tool.tilelang-gemm-perf]
# A family package's modules, by the convention docs/add_a_family.md describes.
OPERATOR_MODULE = "op"  # its OPERATOR, the contract's implementation
ASV_MODULE = "bench"  # its ASV classes, which asv_bench/families.py binds
_PACKAGE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*")


def family_packages(path: Path = PYPROJECT) -> tuple[str, ...]:
    """The family packages ``path`` registers (``[tool.tilelang-gemm-perf] families``, a
    list of importable package names); none where the table does not list any. ValueError
    naming the field and the rule where the list is malformed."""
    where = f"{path.name} [tool.{TABLE}] families"
    try:
        with open(path, "rb") as f:
            data = tomllib.load(f)
    except OSError as err:
        raise ValueError(f"{path}: cannot read the family list ({err})") from None
    except tomllib.TOMLDecodeError as err:
        raise ValueError(f"{path}: not valid TOML ({err})") from None
    names = data.get("tool", {}).get(TABLE, {}).get("families", [])
    if not isinstance(names, list):
        raise ValueError(f"{where}={names!r}: must be a list of package names")
    for name in names:
        if not isinstance(name, str) or not _PACKAGE.fullmatch(name):
            raise ValueError(f"{where}: {name!r}: must be a dotted package name")
    if len(set(names)) != len(names):
        raise ValueError(f"{where}={names!r}: lists a package twice")
    return tuple(names)


def family_module(package: str, part: str):
    """Module ``part`` of family ``package`` (``"op"``, ``"bench"``), imported."""
    return importlib.import_module(f"{package}.{part}")


def family_folders(path: Path = PYPROJECT) -> list[Path]:
    """The folder of each registered family package (what its kernels are built from)."""
    return [
        Path(importlib.import_module(p).__file__).resolve().parent for p in family_packages(path)
    ]


def load_operators(path: Path = PYPROJECT) -> dict[str, Operator]:
    """``{name: operator}``: the GEMM and each registered family's ``OPERATOR``; ValueError
    naming the package where one has no operator or reuses a name."""
    out: dict[str, Operator] = {GEMM.name: GEMM}
    for package in family_packages(path):
        op = getattr(family_module(package, OPERATOR_MODULE), "OPERATOR", None)
        if not isinstance(op, Operator):
            raise ValueError(
                f"{package}.{OPERATOR_MODULE}.OPERATOR={op!r}: must implement "
                "harness.ops.contract.Operator"
            )
        if op.name in out:
            raise ValueError(f"{package}: operator name {op.name!r} is already registered")
        out[op.name] = op
    return out


OPERATORS: dict[str, Operator] = load_operators()


def operator(family: str | Operator) -> Operator:
    """The registered operator named ``family`` (an operator is returned as it is)."""
    if not isinstance(family, str):
        return family
    if family not in OPERATORS:
        raise ValueError(f"family={family!r}: must be one of {sorted(OPERATORS)}")
    return OPERATORS[family]


def operator_for(shape: Any) -> Operator:
    """The family whose shape type ``shape`` is."""
    for op in OPERATORS.values():
        if isinstance(shape, op.shape_type):
            return op
    raise ValueError(f"shape={shape!r}: not the shape of any family ({sorted(OPERATORS)})")


def build_combination(
    family: str | Operator, shape: Any, config: Any, device: DeviceSpec | None = None
):
    """Validate (shape, config) against the family's rules and compile it for ``device``
    (None: the visible GPU): the family's bind function, inputs -> launch. Raises
    ValueError naming the field and the rule for a combination that cannot build."""
    op = operator(family)
    op.validate(shape, config)
    return op.build(shape, config, device)
