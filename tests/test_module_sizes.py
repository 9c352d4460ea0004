"""No module under ``harness/`` passes ``MAX_LINES`` lines: a module that grows past it
holds more than one concern and is split by concern (``harness/suite/detector/`` is the
history detector's five jobs, once one module)."""

from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
HARNESS = ROOT / "harness"
MAX_LINES = 400


def _sizes() -> dict[str, int]:
    return {
        path.relative_to(ROOT).as_posix(): len(path.read_text().splitlines())
        for path in sorted(HARNESS.rglob("*.py"))
    }


def test_no_harness_module_passes_the_line_limit():
    over = {name: lines for name, lines in _sizes().items() if lines > MAX_LINES}
    assert not over, f"modules over {MAX_LINES} lines (split them by concern): {over}"
