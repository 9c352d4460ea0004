"""Markdown templates for the reports: the prose lives in ``templates/*.md``, the figures
come from the data the renderer passes in.

A template file is markdown with three additions, all HTML comments:

- ``$name`` (or ``${name}``) is a value (``string.Template``; ``$$`` is a dollar sign);
  a name the renderer does not supply is an error, not a blank;
- ``<!-- if name -->A<!-- else -->B<!-- endif -->`` keeps A when ``name`` has a value
  (not None, empty or False) and B otherwise (the else part is optional; not nested);
- ``<!-- define name -->`` starts a named piece that runs to the next one: the text
  before the first is the main template, a piece is filled once per item (a row, a
  shape). ``<!--# ... -->`` is a comment for the template's readers.

A marker alone on its line takes its line break with it.
"""

from __future__ import annotations

import functools
import re
import string
from collections.abc import Mapping
from pathlib import Path

TEMPLATES = Path(__file__).with_name("templates")
MAIN = "main"

_COMMENT = re.compile(r"<!--#.*?-->\n?", re.S)
_DEFINE = re.compile(r"^<!-- define (\w+) -->\n", re.M)
_IF = re.compile(
    r"<!-- if (\w+) -->\n?(?P<then>.*?)(?:<!-- else -->\n?(?P<else>.*?))?<!-- endif -->\n?", re.S
)


@functools.cache
def load(name: str) -> Mapping[str, str]:
    """The pieces of ``templates/<name>.md``: ``MAIN`` and each defined piece."""
    return parse((TEMPLATES / f"{name}.md").read_text())


def parse(text: str) -> dict[str, str]:
    text = _COMMENT.sub("", text)
    parts = _DEFINE.split(text)
    pieces = {MAIN: parts[0].strip("\n") + "\n"}
    for name, body in zip(parts[1::2], parts[2::2], strict=True):
        if name in pieces:
            raise ValueError(f"template piece {name!r} is defined twice")
        pieces[name] = body.strip("\n")
    return pieces


def fill(text: str, values: Mapping[str, object]) -> str:
    """``text`` with its conditional parts chosen and its ``$names`` replaced."""

    def choose(found: re.Match) -> str:
        if found.group(1) not in values:
            raise KeyError(f"template condition {found.group(1)!r} has no value")
        wanted = values[found.group(1)] not in (None, "", False, (), [])
        return found.group("then") if wanted else found.group("else") or ""

    return string.Template(_IF.sub(choose, text)).substitute(values)
