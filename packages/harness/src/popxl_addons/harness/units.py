"""Numbers as a reader wants them: bytes and seconds in human units, to three significant digits."""

from __future__ import annotations

import math

from popxl import units as popxl_units
from popxl.units import significant

MISSING = "\u2013"  # an en dash
TIMES = "\u00d7"  # the multiplication sign, after ratios
_SECOND_UNITS = ((1e-9, "ns"), (1e-6, "µs"), (1e-3, "ms"), (1.0, "s"))


def format_bytes(n: float | None) -> str:
    """A byte count in B, KiB, MiB, GiB or TiB (as the runtime writes sizes), or a dash where there is none."""
    if n is None or not math.isfinite(n) or n < 0:
        return MISSING
    return popxl_units.format_bytes(n)


def format_seconds(s: float | None) -> str:
    """A duration in ns, µs, ms or s, to three significant digits."""
    if s is None or not math.isfinite(s) or s < 0:
        return MISSING
    if s == 0:
        return "0 s"
    # The first unit in which the figure reads below 1000; seconds however long.
    scale, unit = next(((c, u) for c, u in _SECOND_UNITS if float(significant(s / c)) < 1000), _SECOND_UNITS[-1])
    return f"{significant(s / scale)} {unit}"


def format_ratio(r: float | None) -> str:
    """A ratio such as serialised time over normal time: `1.25` and the multiplication sign."""
    return MISSING if r is None or not math.isfinite(r) else f"{significant(r)}{TIMES}"


def format_diff(d: float | None) -> str:
    """An absolute difference between results: `0`, `3.81e-06`, `0.25`."""
    if d is None:
        return MISSING
    if math.isinf(d):
        return "∞"
    if not math.isfinite(d):
        return MISSING
    return "0" if d == 0 else f"{d:.3g}"


def format_range(low: float | None, high: float | None, fmt: str) -> str:
    """`low to high` in the named format (bytes, seconds or ratio), or one figure when they read alike."""
    formatter = {"bytes": format_bytes, "seconds": format_seconds, "ratio": format_ratio}
    a, b = formatter[fmt](low), formatter[fmt](high)
    return a if a == b else f"{a} to {b}"
