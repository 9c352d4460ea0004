"""The docs cite tests by name (file::test, a bare ::test after a file, or `test_name`):
every one of them must exist, so a renamed test cannot leave the docs pointing at nothing."""

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
DOCS += sorted((ROOT / "reports").glob("*.md"))
_CITATION = re.compile(r"(tests/[\w/]+\.py)?::(test_\w+)|`(test_\w+)`|(tests/[\w/]+\.py)")


def _defined() -> dict[str, set[str]]:
    return {
        path.relative_to(ROOT).as_posix(): set(
            re.findall(r"^def (test_\w+)", path.read_text(), re.M)
        )
        for path in (ROOT / "tests").rglob("*.py")
    }


def _citations(text: str):
    """(file, test) per citation; a bare ``::test`` belongs to the file named last before
    it, and a bare `test_name` (file None) may live in any test file."""
    last = None
    for match in _CITATION.finditer(text):
        path, test, anywhere, alone = match.groups()
        if alone:
            last = alone
            yield alone, None
        elif test:
            last = path or last
            yield last, test
        else:
            yield None, anywhere


@pytest.mark.parametrize("doc", DOCS, ids=[p.relative_to(ROOT).as_posix() for p in DOCS])
def test_every_test_the_docs_cite_exists(doc):
    defined = _defined()
    everywhere = set().union(*defined.values())
    missing = []
    for path, test in _citations(doc.read_text()):
        if path is not None and path not in defined:
            missing.append(path)
        elif test is not None and test not in (everywhere if path is None else defined[path]):
            missing.append(f"{path or 'tests/'}::{test}")
    assert not missing, f"{doc.name} cites tests that do not exist: {missing}"
