"""How a tracked value reads to a person, in every report: asv's units for time."""

from __future__ import annotations


def human(value: float, unit: str) -> str:
    """asv's rendering for seconds (``1.23ms``, ``197μs``); anything else, a ratio, as is."""
    if unit == "seconds":
        from asv.util import human_value

        return human_value(value, unit)
    return f"{value:.4g}"
