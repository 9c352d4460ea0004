"""The sub-packages of ``harness`` form the layers ``harness.LAYERS`` declares: every
import of every module (those inside functions too) goes to its own sub-package or a lower
layer, so no two sub-packages import each other."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

import harness

HARNESS = Path(harness.__file__).resolve().parent
LEVEL = {name: i for i, tier in enumerate(harness.LAYERS) for name in tier}


def part(module: str) -> str | None:
    """The sub-package (or top-level module) of ``harness`` a dotted name lies in."""
    bits = module.split(".")
    return bits[1] if bits[0] == "harness" and len(bits) > 1 else None


def imports(path: Path, root: Path = HARNESS) -> list[tuple[int, str]]:
    """(line, module) of every harness import in ``path``, relative ones resolved."""
    package = ".".join(path.relative_to(root.parent).with_suffix("").parts[:-1])
    out = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*up, base] if base else up)
            out += [
                (node.lineno, f"{base}.{a.name}" if base == "harness" else base) for a in node.names
            ]
    return [(line, m) for line, m in out if m.split(".")[0] == "harness"]


def edges(root: Path = HARNESS) -> list[tuple[str, str, str]]:
    """(importing sub-package, imported sub-package, where) of every import that leaves
    its own sub-package."""
    out = []
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root)
        here = rel.parts[0].removesuffix(".py") if rel.parts[0] != "__init__.py" else None
        for line, module in imports(path, root):
            there = part(module)
            if here and there and there != here:
                out.append((here, there, f"{path.relative_to(root.parent)}:{line}"))
    return out


def violations(found: list[tuple[str, str, str]]) -> list[str]:
    """Every import against the declared layer order: upward, sideways within a layer,
    or into or out of a sub-package the order does not name."""
    bad = []
    for here, there, where in found:
        if here not in LEVEL or there not in LEVEL:
            bad.append(f"{where}: harness.{here} -> harness.{there}: not in harness.LAYERS")
        elif LEVEL[there] >= LEVEL[here]:
            bad.append(f"{where}: harness.{here} imports harness.{there}, not below it")
    return bad


def cycles(found: list[tuple[str, str, str]]) -> list[list[str]]:
    """The sub-packages that import each other, through any chain (strongly connected
    groups of more than one)."""
    graph: dict[str, set[str]] = {}
    for here, there, _ in found:
        graph.setdefault(here, set()).add(there)
        graph.setdefault(there, set())

    def reach(start: str) -> set[str]:
        seen, todo = set(), [start]
        while todo:
            for nxt in graph[todo.pop()]:
                if nxt not in seen:
                    seen.add(nxt)
                    todo.append(nxt)
        return seen

    groups = {frozenset({a} | {b for b in reach(a) if a in reach(b)}) for a in graph}
    return sorted(sorted(g) for g in groups if len(g) > 1)


def test_every_sub_package_is_in_a_layer():
    names = {p.name.removesuffix(".py") for p in HARNESS.iterdir() if not p.name.startswith("_")}
    names = {n for n in names if (HARNESS / n).is_dir() or (HARNESS / f"{n}.py").exists()}
    assert names - {"__pycache__"} <= set(LEVEL)


def test_no_import_cycle_between_sub_packages():
    assert cycles(edges()) == []


def test_every_import_follows_the_layers():
    assert violations(edges()) == []


def test_the_checks_catch_a_cycle_and_an_upward_import(tmp_path):
    root = tmp_path / "harness"
    for rel, text in {
        "suite/a.py": "def f():\n    from harness.gate import b\n",
        "gate/b.py": "from harness.suite import a\n",
    }.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    found = edges(root)
    assert cycles(found) == [["gate", "suite"]]
    assert violations(found) == [
        "harness/suite/a.py:2: harness.suite imports harness.gate, not below it"
    ]


def _stdlib_named(root: Path) -> list[str]:
    return sorted(
        str(p.relative_to(root.parent))
        for p in root.rglob("*.py")
        if p.stem in sys.stdlib_module_names
    )


def test_no_module_shadows_the_standard_library():
    # A script's folder comes first on sys.path: a bisect.py there stands in for the
    # standard library's (which ``statistics`` and ``random`` import).
    assert _stdlib_named(HARNESS) == []


@pytest.mark.parametrize("name", ["bisect.py", "statistics.py"])
def test_a_module_named_like_the_standard_library_is_found(tmp_path, name):
    (tmp_path / "harness" / "gate").mkdir(parents=True)
    (tmp_path / "harness" / "gate" / name).write_text("")
    assert _stdlib_named(tmp_path / "harness") == [f"harness/gate/{name}"]


# A kernel family's package (families/<name>/) sits beside kernels/ and harness.ops: its
# kernel, operator and asv classes import the shared kernel helpers, the operator contract
# and their own package, never the measuring, suite or gate layers (its command, cli.py
# and the cli_*.py modules it runs, is a command like benchmarks/ and may).
FAMILIES = HARNESS.parent / "families"
FAMILY_MAY_IMPORT = ("kernels", "harness.ops.contract", "families")
FAMILY_COMMAND = ("cli.py", "cli_")


def family_violations(root: Path = FAMILIES) -> list[str]:
    bad = []
    for path in sorted(root.rglob("*.py")):
        if path.name == FAMILY_COMMAND[0] or path.name.startswith(FAMILY_COMMAND[1]):
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and not node.level:
                names = [node.module or ""]
            else:
                continue
            for name in names:
                ours = name.split(".")[0] in ("kernels", "harness", "families", "asv_bench")
                if ours and not name.startswith(FAMILY_MAY_IMPORT):
                    where = path.relative_to(root.parent)
                    bad.append(f"{where}:{node.lineno}: imports {name}")
    return bad


def test_family_packages_import_only_kernels_and_the_contract():
    assert FAMILIES.is_dir()
    assert family_violations() == []


def test_the_family_check_catches_a_measuring_import(tmp_path):
    root = tmp_path / "families"
    (root / "conv").mkdir(parents=True)
    (root / "conv" / "op.py").write_text(
        "from harness.ops.contract import Baseline\nfrom harness.measure import timing\n"
    )
    (root / "conv" / "cli.py").write_text("from harness.measure import timing\n")
    assert family_violations(root) == ["families/conv/op.py:2: imports harness.measure"]


def test_no_family_module_shadows_the_standard_library():
    # Hence a family's operator lives in op.py: operator.py would stand in for the
    # standard library's ``operator`` in a script run from inside the folder.
    assert _stdlib_named(FAMILIES) == []
