"""interpolate against ONNX Resize written from its specification, one axis at a time."""

from __future__ import annotations

import math

import numpy as np
import pytest
from runtime_helpers import run_main

import popxl
from popxl import ops

X = np.random.default_rng(4).normal(size=(2, 5, 4)).astype(np.float32)


def _source(x: int, size: int, scale: float, mode: str) -> float:
    if mode == "align_corners":
        return x * (size - 1) / (scale * size - 1)
    if mode == "asymmetric":
        return x / scale
    return (x + 0.5) / scale - 0.5  # half_pixel


def _keys(d: float, a: float = -0.75) -> float:
    d = abs(d)
    if d <= 1:
        return (a + 2) * d**3 - (a + 3) * d**2 + 1
    return a * d**3 - 5 * a * d**2 + 8 * a * d - 4 * a if d < 2 else 0.0


def _resize_axis(v: np.ndarray, axis: int, scale: float, mode: str, nearest: str, coords: str) -> np.ndarray:
    size = v.shape[axis]
    out = math.floor(size * scale)
    moved = np.moveaxis(v.astype(np.float64), axis, 0)
    rows = []
    for x in range(out):
        src = _source(x, size, scale, coords)
        at = lambda i: moved[min(max(i, 0), size - 1)]  # noqa: E731  (edge padding)
        if mode == "nearest":
            frac = src - math.floor(src)
            pick = {
                "round_prefer_floor": math.floor(src) + (frac > 0.5),
                "round_prefer_ceil": math.floor(src) + (frac >= 0.5),
                "floor": math.floor(src),
                "ceil": math.ceil(src),
            }[nearest]
            rows.append(at(pick))
        elif mode == "linear":
            lo = math.floor(src)
            rows.append((1 - (src - lo)) * at(lo) + (src - lo) * at(lo + 1))
        else:
            lo = math.floor(src)
            rows.append(sum(_keys(src - i) * at(i) for i in range(lo - 1, lo + 3)))
    return np.moveaxis(np.stack(rows), 0, axis)


@pytest.mark.parametrize(
    ("mode", "nearest", "coords"),
    [
        ("nearest", "round_prefer_floor", "half_pixel"),
        ("nearest", "round_prefer_ceil", "asymmetric"),
        ("nearest", "floor", "half_pixel"),
        ("nearest", "ceil", "align_corners"),
        ("linear", "round_prefer_floor", "align_corners"),
        ("linear", "round_prefer_floor", "asymmetric"),
        ("cubic", "round_prefer_floor", "half_pixel"),
        ("cubic", "round_prefer_floor", "align_corners"),
    ],
)
def test_interpolate_matches_onnx(mode: str, nearest: str, coords: str) -> None:
    scales = (1.0, 2.5, 1.5)
    got = run_main(lambda: {"y": ops.interpolate(popxl.constant(X), scales, mode, nearest, coords)})["y"]
    want = X
    for axis, scale in enumerate(scales):
        if scale != 1.0:
            want = _resize_axis(want, axis, scale, mode, nearest, coords)
    assert got.shape == (2, 12, 6)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_interpolate_errors_name_the_attribute() -> None:
    with popxl.Ir().main_graph:
        t = popxl.constant(X)
        with pytest.raises(ValueError, match="one scale per axis"):
            ops.interpolate(t, (2.0, 2.0))
        with pytest.raises(ValueError, match="mode must be one of"):
            ops.interpolate(t, (1.0, 1.0, 2.0), "bilinear")
        with pytest.raises(NotImplementedError, match="sampling_ratio"):
            ops.roi_align(
                popxl.constant(np.zeros((1, 1, 4, 4), np.float32)),
                popxl.constant(np.zeros((1, 4), np.float32)),
                popxl.constant(np.zeros(1, np.int32)),
                (2, 2),
                1.0,
                0,
            )
