"""argparse types shared by the command-line tools: each error names the rule."""

from __future__ import annotations

import argparse


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
