"""What the command-line tools share: exit codes, and argparse types whose errors name
the rule."""

from __future__ import annotations

import argparse
import os
import re
import signal
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

# Exit codes of the gate, bisect, backfill and the self-test.
EXIT_OK = 0  # nothing regressed; bisect: a culprit was found
EXIT_REGRESSION = 1  # a confirmed regression; bisect: no regression between GOOD and BAD
EXIT_FAILURE = 2  # a benchmark failed to build or run, bad input, or the tool failed
EXIT_INTERRUPTED = 130  # Ctrl-C: what finished is kept
# Exit codes of the measuring commands (bench_gemm, tune_gemm, offtable, a family's CLI).
EXIT_NO_GPU = 3  # GPU work asked for where no CUDA device is visible
EXIT_INCORRECT = 4  # a kernel's result disagreed with the reference
EXIT_FAILED = 5  # a config failed to build or run (its row says why); the rest ran
# A kernel's first launch never finished (a deadlocked pipeline): a launch cannot be
# cancelled, so the process exits at once; what it wrote before is kept.
EXIT_HUNG = 6


def progress_bar(console, transient: bool = False):
    """The measuring commands' rich progress bar: what it is doing, the bar, done of total,
    time so far (rich imported here: the gate's tools import this module without it)."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    return Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console,
        transient=transient,
    )


@contextmanager
def sigterm_as_interrupt() -> Iterator[None]:
    """Within it, SIGTERM (``timeout``, a CI job's time limit, a runner cancelling) is taken
    as Ctrl-C: the measuring commands keep and write what finished and exit 130, where
    the signal's default would end the process with nothing written. Outside the main
    thread, where no handler can be set, nothing changes."""

    def interrupt(signum, frame):
        raise KeyboardInterrupt

    try:
        before = signal.signal(signal.SIGTERM, interrupt)
    except ValueError:  # not the main thread
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, before)


def sweep_status(interrupted: bool, incorrect: bool, failed: bool) -> int:
    """A measuring command's exit status: an interruption first, then a wrong result,
    then a failed row."""
    if interrupted:
        return EXIT_INTERRUPTED
    if incorrect:
        return EXIT_INCORRECT
    return EXIT_FAILED if failed else EXIT_OK


def _int(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None


def positive_int(text: str) -> int:
    value = _int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} must be >= 1")
    return value


def count(text: str) -> int:
    value = _int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"{value} must be >= 0")
    return value


def fraction(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not 0 < value < 1:
        raise argparse.ArgumentTypeError(f"{value} must be a fraction between 0 and 1 (0.05 = 5%)")
    return value


def gpu_list(text: str) -> str:
    """``all`` or comma-separated GPU indices (``0,1``); checked against the GPUs that are
    actually visible later, once CUDA is up."""
    parts = [x.strip() for x in text.split(",")]
    if text != "all" and not (parts and all(x.isdigit() for x in parts)):
        raise argparse.ArgumentTypeError(f"{text!r} must be 'all' or indices like 0,1")
    return text


def regex(text: str) -> str:
    """A regular expression that compiles (``--bench``): an invalid one is refused as
    invalid, not reported later as matching nothing."""
    try:
        re.compile(text)
    except re.error as err:
        raise argparse.ArgumentTypeError(f"{text!r} is not a valid regex: {err}") from None
    return text


def config_id(text: str):
    """A ``GemmConfig`` from its id (``b128x256x64_t256_s3_w16_e``); the config's own
    rule, naming the field, where the id or its values are invalid."""
    from kernels import GemmConfig

    try:
        return GemmConfig.from_id(text)
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from None


def config_change(text: str):
    """A ``kernels.changes.ConfigChange`` (``num_stages=+1``, ``block_n=144,multicast=b``);
    the rule, naming the field, where it is not one."""
    from kernels.changes import ConfigChange

    try:
        return ConfigChange.parse(text)
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from None


def output_file(text: str) -> Path:
    """A file the command will write: its folder must exist (or be creatable) and be
    writable, checked before any GPU work so that no measurement is lost at the end."""
    path = Path(text)
    if path.exists() and path.is_dir():
        raise argparse.ArgumentTypeError(f"{text!r} is a folder, not a file")
    if path.exists() and not os.access(path, os.W_OK):
        raise argparse.ArgumentTypeError(f"{text!r} exists and is not writable")
    _check_writable(path.parent if str(path.parent) else Path("."), text)
    return path


def output_dir(text: str) -> Path:
    """A folder the command will write into (created if missing), checked up front."""
    path = Path(text)
    if path.exists() and not path.is_dir():
        raise argparse.ArgumentTypeError(f"{text!r} exists and is not a folder")
    _check_writable(path, text)
    return path


def _check_writable(folder: Path, text: str) -> None:
    existing = folder
    while not existing.exists():
        existing = existing.parent
    if not existing.is_dir() or not os.access(existing, os.W_OK | os.X_OK):
        raise argparse.ArgumentTypeError(f"{text!r}: {existing} is not a writable folder")
    try:
        folder.mkdir(parents=True, exist_ok=True)
        probe = folder / f".write-probe-{os.getpid()}"
        probe.write_text("")
        probe.unlink()
    except OSError as err:
        raise argparse.ArgumentTypeError(f"{text!r}: cannot write there ({err.strerror})") from None


def gate_options(parser: argparse.ArgumentParser, method_help: str) -> None:
    """The ``--method`` and ``--bench`` options every command that measures the gate's
    way takes (calibration, the self-test)."""
    parser.add_argument(
        "--method", choices=("paired", "process"), default="paired", help=method_help
    )
    parser.add_argument(
        "--bench",
        type=regex,
        default=None,
        help="regex on benchmark names (default: the suite's GATE_SUBSET)",
    )
