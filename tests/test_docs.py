"""The docs cite tests by name (file::test, a bare ::test after a file, or `test_name`):
every one of them must exist, so a renamed test cannot leave the docs pointing at nothing."""

import re
import subprocess
import sys
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


# What the docs, the workflows and the CI script tell a person to run or open.
TEXTS = [*DOCS, *sorted((ROOT / ".github" / "workflows").glob("*.yml")), ROOT / ".ci" / "run"]
_PATH = re.compile(
    r"(?<![\w./-])((?:harness|kernels|families|benchmarks|asv_bench|tests|docs|calibration|deploy)"
    r"/[\w./-]*\w)(?![\w<*])"
)
# Files a command makes while it runs, named by the docs that say what becomes of them.
RUN_TIME = {"kernels/tuned_configs.lock"}
_MODULE = re.compile(r"python3? (?:-S )?-m ((?:harness|benchmarks|families|kernels)[\w.]*)")
_SESSION = re.compile(r"nox -s ((?:\w+)(?: (?!-)\w+)*)")


def _ids(paths):
    return [p.relative_to(ROOT).as_posix() for p in paths]


@pytest.mark.parametrize("doc", TEXTS, ids=_ids(TEXTS))
def test_every_file_and_module_the_docs_name_exists(doc):
    text = doc.read_text()
    missing = [
        p for p in _PATH.findall(text) if p not in RUN_TIME and not (ROOT / p.rstrip(".")).exists()
    ]
    for module in _MODULE.findall(text):
        base = ROOT.joinpath(*module.split("."))
        if not (base.with_suffix(".py").exists() or (base / "__main__.py").exists()):
            missing.append(f"python -m {module}")
    assert not missing, f"{doc.name} names what does not exist: {missing}"


@pytest.mark.parametrize("doc", TEXTS, ids=_ids(TEXTS))
def test_every_nox_session_the_docs_name_exists(doc):
    noxfile = (ROOT / "noxfile.py").read_text()
    sessions = set(re.findall(r"@nox\.session[^\n]*\ndef (\w+)", noxfile))
    named = {s for group in _SESSION.findall(doc.read_text()) for s in group.split()}
    assert named <= sessions, f"{doc.name} names sessions noxfile.py lacks: {named - sessions}"


def _commands(text: str):
    """(module, arguments) of each ``python -m`` command of the project in ``text``'s code
    blocks and inline code, continuation lines joined."""
    text = re.sub(r"\\\n\s*", " ", text)
    blocks = re.findall(r"```\w*\n(.*?)```", text, re.S)
    lines = [line for block in blocks for line in block.splitlines()]
    lines += re.findall(r"`([^`\n]+)`", re.sub(r"```.*?```", "", text, flags=re.S))
    for line in lines:
        for match in re.finditer(_MODULE.pattern + r"([^#|;&`]*)", line):
            yield match.group(1), match.group(2).split()


@pytest.mark.parametrize("doc", DOCS, ids=_ids(DOCS))
def test_every_option_the_docs_show_a_command_takes_exists(doc):
    helps: dict[tuple[str, ...], str] = {}
    wrong = []
    for module, args in _commands(doc.read_text()):
        command = (module, *args[:1]) if args[:1] in (["publish"], ["backfill"]) else (module,)
        if command not in helps:
            helps[command] = subprocess.run(
                [sys.executable, "-m", *command, "--help"], capture_output=True, text=True, cwd=ROOT
            ).stdout
        mine = args[: args.index("--")] if "--" in args else args  # the rest is asv's
        for option in [a.split("=")[0] for a in mine if re.match(r"--?[a-zA-Z]", a)]:
            if not re.search(rf"(?<![\w-]){re.escape(option)}\b", helps[command]):
                wrong.append(f"{' '.join(command)} {option}")
    assert not wrong, f"{doc.name} shows options its commands do not take: {sorted(set(wrong))}"


H100 = ROOT / "reports" / "h100"


def _h100_listed(readme: str) -> set[str]:
    """The files the table of ``reports/h100/README.md`` names in its first column,
    relative to that folder: ``a.{json,md}`` is two, and a bare `.md` after `a.json` names
    ``a.md``."""
    listed: set[str] = set()
    for row in re.findall(r"^\| (`.+?) \|", readme, re.M):
        last = None
        for name in re.findall(r"`([^`]+)`", row):
            if name.startswith(".") and last:
                name = last.rsplit(".", 1)[0] + name
            stems = [name]
            while any("{" in s for s in stems):
                s = next(s for s in stems if "{" in s)
                head, options, tail = re.match(r"(.*?)\{([^}]*)\}(.*)", s).groups()
                stems.remove(s)
                stems += [head + o + tail for o in options.split(",")]
            listed.update(stems)
            last = name
    return listed


def test_every_h100_record_is_named_in_its_readme_and_every_name_is_a_file():
    """The H100 panels are kept apart from the H200's records on purpose; the folder's
    README says what each one is. A record left out of its table, or a row naming a file
    that is not there, would leave a figure nobody can place."""
    readme = (H100 / "README.md").read_text()
    listed = _h100_listed(readme)
    folders = set(re.findall(r"`reports/h100/([\w-]+)/`", readme))
    files = {
        p.relative_to(H100).as_posix()
        for p in H100.rglob("*")
        if p.is_file() and p.name != "README.md"
    }
    unnamed = sorted(f for f in files if f not in listed and f.split("/")[0] not in folders)
    assert not unnamed, f"reports/h100/README.md does not name {unnamed}"
    ghosts = sorted(listed - files)
    assert not ghosts, f"reports/h100/README.md names what is no file: {ghosts}"
    assert len(listed) > 40
