"""A kernel family lives in its own folder: outside ``families/<name>/`` (and the prose
and tests about it: docs/, reports/, tests/, README.md) the only line of the project that
names it is its registration in pyproject.toml. Measured records (``calibration/``, per
benchmark) name it as ``reports/`` do. The rule counts source, not tests: a
family's tests live in ``tests/families/<name>/``."""

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# Where a family may be named besides its folder: prose, records and tests.
EXEMPT = ("docs", "reports", "calibration", "tests", "README.md")
# Hidden folders that are the project's (CI); the others are tools' caches and git's.
PROJECT_HIDDEN = (".github", ".ci")
# Each family package and what names it: its folder's name, spelled as code and prose do.
FAMILIES = {"grouped_gemm": re.compile(r"grouped[ _-]?gemm", re.IGNORECASE)}


def project_files(root: Path):
    """The project's files: what git tracks or would (``.gitignore`` leaves out build
    output such as the egg-info an editable install writes, whose PKG-INFO copies the
    README); outside a git checkout, every file but hidden folders and caches."""
    listed = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard"],
        cwd=root,
        capture_output=True,
        text=True,
    )
    if listed.returncode == 0 and (root / ".git").exists():
        paths = [Path(line) for line in listed.stdout.splitlines()]
    else:
        paths = [p.relative_to(root) for p in root.rglob("*")]
    for rel in sorted(paths):
        hidden = any(
            (p.startswith(".") and p not in PROJECT_HIDDEN) or p == "__pycache__" for p in rel.parts
        )
        if (root / rel).is_file() and not hidden and rel.parts[0] not in EXEMPT:
            yield rel


def naming_lines(root: Path, package: str, pattern: re.Pattern) -> list[str]:
    """``path:line: text`` of every line outside ``families/<package>/`` naming it."""
    own = Path("families", package)
    found = []
    for rel in project_files(root):
        if rel.is_relative_to(own) or rel.suffix in (".pyc", ".png", ".so"):
            continue
        try:
            text = (root / rel).read_text()
        except UnicodeDecodeError:
            continue
        found += [
            f"{rel}:{i}: {line.strip()}"
            for i, line in enumerate(text.splitlines(), 1)
            if pattern.search(line)
        ]
    return found


def test_a_family_is_named_outside_its_folder_only_by_its_registration():
    for package, pattern in FAMILIES.items():
        assert naming_lines(ROOT, package, pattern) == [
            f'pyproject.toml:{_registration_line()}: families = ["families.{package}"]'
        ]


def _registration_line() -> int:
    lines = (ROOT / "pyproject.toml").read_text().splitlines()
    return next(i for i, line in enumerate(lines, 1) if line.startswith("families = "))


def test_the_rule_catches_a_family_named_elsewhere(tmp_path):
    (tmp_path / "families" / "grouped_gemm").mkdir(parents=True)
    (tmp_path / "families" / "grouped_gemm" / "kernel.py").write_text("grouped_gemm = 1\n")
    (tmp_path / "kernels").mkdir()
    (tmp_path / "kernels" / "grouped.py").write_text("x = 1\n# the Grouped GEMM\n")
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "a.md").write_text("grouped GEMM\n")
    found = naming_lines(tmp_path, "grouped_gemm", FAMILIES["grouped_gemm"])
    assert found == ["kernels/grouped.py:2: # the Grouped GEMM"]
