"""popxl's host-data helpers: `to_numpy` and `table_to_string`."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from popxl import dtypes

# 64-bit host data narrows to what a device holds, as popxl narrows it.
DOWNCAST = {np.dtype(np.float64): np.dtype(np.float32), np.dtype(np.int64): np.dtype(np.int32)}
DOWNCAST[np.dtype(np.uint64)] = np.dtype(np.uint32)


def to_numpy(
    x: Any,
    dtype: dtypes.dtype | None = None,
    downcast: bool = True,
    copy: bool = True,
    log2_scale: int | None = None,
    nan_on_overflow: bool | None = None,
) -> np.ndarray[Any, Any]:
    """`x` (a NumPy array, a PyTorch tensor, a scalar or nested sequence) as a C-ordered NumPy array of `dtype`.

    Without `dtype`, 64-bit data is narrowed to 32 bits unless `downcast` is False. An `np.memmap` is
    returned as it is when `copy` is False.
    """
    if log2_scale is not None or nan_on_overflow is not None:
        raise RuntimeError("log2_scale and nan_on_overflow apply to float8 dtypes, which this runtime does not hold")
    if isinstance(x, np.memmap) and not copy:
        return x
    if type(x).__module__.startswith("torch"):
        x = x.detach().cpu().numpy()
    arr = np.asarray(x, dtype=dtype.as_numpy() if dtype is not None else None)
    if dtype is None and downcast and arr.dtype in DOWNCAST:
        arr = arr.astype(DOWNCAST[arr.dtype])
    if copy or not arr.flags.c_contiguous:
        return np.array(arr, order="C")
    return arr


def table_to_string(rows: Sequence[Sequence[Any]], delimiter: str = " | ", header: bool = True) -> str:
    """`rows` as a text table with columns padded to their widest item; with `header`, the first row underlined."""
    widths = [max(len(str(item)) for item in column) for column in zip(*rows)]
    lines = []
    for i, row in enumerate(rows):
        line = delimiter.join(f"{item!s: <{w}}" for item, w in zip(row, widths)) + "\n"
        lines.append(line)
        if header and i == 0 and len(rows) > 1:
            lines.append("-" * len(line) + "\n")
    return "".join(lines)
