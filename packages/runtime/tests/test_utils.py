"""popxl.utils: host data conversion and text tables."""

from __future__ import annotations

import pathlib

import numpy as np

import popxl
from popxl.utils import table_to_string, to_numpy


def test_to_numpy_narrows_64_bit_data_unless_told_not_to(tmp_path: pathlib.Path) -> None:
    wide = np.arange(6, dtype=np.float64).reshape(2, 3)
    assert to_numpy(wide).dtype == np.float32 and to_numpy([1, 2]).dtype == np.int32
    assert to_numpy(wide, downcast=False).dtype == np.float64
    assert to_numpy(wide, popxl.float16).dtype == np.float16
    transposed = to_numpy(wide.T)
    assert transposed.flags.c_contiguous
    np.testing.assert_array_equal(transposed, wide.T)
    kept = np.zeros(3, np.float32)
    assert to_numpy(kept, copy=False) is kept and to_numpy(kept) is not kept
    mapped = np.memmap(str(tmp_path / "m.npy"), dtype=np.float32, shape=(2,), mode="w+")
    assert to_numpy(mapped, copy=False) is mapped
    assert to_numpy(3.5).shape == ()


def test_table_columns_line_up_under_an_underlined_header() -> None:
    rows = [["num", "name"], [3, "args"], [-10, "x"]]
    lines = table_to_string(rows).splitlines()
    assert len(lines) == 4 and set(lines[1]) == {"-"} and len(lines[1]) == len(lines[0]) + 1
    starts = {line.index("|") for i, line in enumerate(lines) if i != 1}
    assert starts == {len("num") + 1}
    assert [line.split(" | ")[1].strip() for i, line in enumerate(lines) if i != 1] == ["name", "args", "x"]
    assert "-" * 3 not in table_to_string(rows, header=False)
