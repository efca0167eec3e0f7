"""Figures as people read them: bytes in binary units and numbers to three significant digits.

Used where the runtime and the tools around it print sizes (out-of-memory errors, reports), so that
one size reads the same everywhere. Not part of popxl's API.
"""

from __future__ import annotations

import math

__all__ = ["format_bytes", "significant"]

_BYTE_UNITS = ("B", "KiB", "MiB", "GiB", "TiB")


def significant(value: float, digits: int = 3) -> str:
    """`value` to `digits` significant digits, in fixed notation, keeping trailing zeros (1.50, 12.0, 150)."""
    if value == 0:
        return "0"
    decimals = max(digits - 1 - math.floor(math.log10(abs(value))), 0)
    text = f"{value:.{decimals}f}"
    # Rounding may add a digit (9.996 -> 10.00): one decimal fewer keeps the count.
    if decimals and len(text.lstrip("-").replace(".", "").lstrip("0")) > digits:
        text = f"{value:.{decimals - 1}f}"
    return text


def format_bytes(n: float) -> str:
    """A byte count in B, KiB, MiB, GiB or TiB: exact below 1 KiB, else three significant digits (a
    difference keeps its sign)."""
    if n < 0:
        return f"-{format_bytes(-n)}"
    if n < 1024:
        return f"{n:.0f} B"
    value, unit = float(n), 0
    # Move up while the rounded figure would read 1024 or more of a unit.
    while unit < len(_BYTE_UNITS) - 1 and float(significant(value)) >= 1024:
        value, unit = value / 1024, unit + 1
    return f"{significant(value)} {_BYTE_UNITS[unit]}"
