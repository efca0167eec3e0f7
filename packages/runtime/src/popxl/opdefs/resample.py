"""Resampling: ONNX's Resize (`interpolate`) and region-of-interest alignment (`roi_align`).

`interpolate` is separable: along each axis the output is a fixed matrix times
the input, built at trace time from ONNX's reference rules (coordinate
transformation, the neighbours of each sample with edge padding, and the
nearest, linear or cubic (A = -0.75) coefficients). `roi_align` samples each
bin of each region on a regular grid with bilinear interpolation and averages,
as torchvision's `RoIAlign` (aligned=False) does, which popart matches.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from popxl.op import Attrs, OpDef, register
from popxl.opdefs.common import vjp_grad
from popxl.tensor import TensorSpec

MODES = ("nearest", "linear", "cubic")
NEAREST_MODES = ("round_prefer_floor", "round_prefer_ceil", "floor", "ceil")
COORDINATE_MODES = ("half_pixel", "pytorch_half_pixel", "align_corners", "asymmetric", "tf_crop_and_resize")


def _interpolate_normalise(specs: Sequence[TensorSpec], attrs: Attrs) -> dict[str, Any]:
    (t,) = specs
    scales = tuple(float(s) for s in attrs["scale_factor"])
    if len(scales) != len(t.shape):
        raise ValueError(f"interpolate needs one scale per axis of {t.shape}, got {scales}")
    for name, value, allowed in (
        ("mode", attrs["mode"], MODES),
        ("nearest_mode", attrs["nearest_mode"], NEAREST_MODES),
        ("coordinate_transformation_mode", attrs["coordinate_transformation_mode"], COORDINATE_MODES),
    ):
        if value not in allowed:
            raise ValueError(f"interpolate {name} must be one of {allowed}, got {value!r}")
    if not t.dtype.is_floating_point:
        raise ValueError(f"interpolate needs a floating point tensor, got {t.dtype.name}")
    return {**attrs, "scale_factor": scales}


def _interpolate_infer(specs: Sequence[TensorSpec], attrs: Attrs) -> list[TensorSpec]:
    (t,) = specs
    shape = tuple(math.floor(d * s) for d, s in zip(t.shape, attrs["scale_factor"]))
    if any(d < 1 for d in shape):
        raise ValueError(f"interpolate of {t.shape} by {attrs['scale_factor']} leaves an empty axis")
    return [TensorSpec(shape, t.dtype)]


def _source(x: int, size: int, out: int, scale: float, mode: str) -> float:
    """Where output position `x` samples the input (ONNX's coordinate transformation; the implicit ROI is all),
    in float32 arithmetic as the device computes it."""
    f = np.float32
    x_, size_, scale_ = f(x), f(size), f(scale)
    width = scale_ * size_
    if mode == "align_corners":
        return 0.0 if width == 1 else float(x_ * (size_ - f(1)) / (width - f(1)))
    if mode == "asymmetric":
        return float(x_ / scale_)
    if mode == "tf_crop_and_resize":
        return float((size_ - f(1)) / f(2)) if width == 1 else float(x_ * (size_ - f(1)) / (width - f(1)))
    if mode == "pytorch_half_pixel" and width == 1:
        return -0.5
    return float((x_ + f(0.5)) / scale_ - f(0.5))


def _coefficients(ratio: float, attrs: Attrs) -> list[float]:
    """Weights of the neighbours of a sample `ratio` past the left one, ratio in (0, 1]."""
    mode = attrs["mode"]
    if mode == "linear":
        return [1 - ratio, ratio]
    if mode == "cubic":
        a, r, s = -0.75, ratio, 1 - ratio
        return [
            ((a * (r + 1) - 5 * a) * (r + 1) + 8 * a) * (r + 1) - 4 * a,
            ((a + 2) * r - (a + 3)) * r * r + 1,
            ((a + 2) * s - (a + 3)) * s * s + 1,
            ((a * (s + 1) - 5 * a) * (s + 1) + 8 * a) * (s + 1) - 4 * a,
        ]
    if ratio == 1:
        return [0.0, 1.0]
    take_right = {
        "round_prefer_floor": ratio > 0.5,
        "round_prefer_ceil": ratio >= 0.5,
        "floor": False,
        "ceil": True,
    }[attrs["nearest_mode"]]
    return [0.0, 1.0] if take_right else [1.0, 0.0]


def resize_matrix(size: int, out: int, scale: float, attrs: Attrs) -> np.ndarray[Any, Any]:
    """The (out, size) matrix resampling one axis, with edge padding as ONNX's reference pads."""
    matrix = np.zeros((out, size), np.float32)
    for x in range(out):
        src = _source(x, size, out, scale, attrs["coordinate_transformation_mode"])
        # The left neighbour is the last index strictly below the sample, so that the ratio is in (0, 1].
        left = math.ceil(src) - 1
        coefficients = _coefficients(float(np.float32(src) - np.float32(left)), attrs)
        first = left - (len(coefficients) // 2 - 1)
        for k, c in enumerate(coefficients):
            matrix[x, min(max(first + k, 0), size - 1)] += c
    return matrix


def _lower_interpolate(ctx: Any, attrs: Attrs, t: jax.Array) -> list[jax.Array]:
    y = t.astype(jnp.float32)
    for axis, (size, scale) in enumerate(zip(t.shape, attrs["scale_factor"])):
        out = math.floor(size * scale)
        if out == size and scale == 1.0:
            continue
        matrix = jnp.asarray(resize_matrix(size, out, scale, attrs), jnp.float32)
        y = jnp.moveaxis(jnp.tensordot(matrix, y, axes=([1], [axis])), 0, axis)
    return [y.astype(t.dtype)]


INTERPOLATE = register(
    OpDef(
        "interpolate",
        _interpolate_infer,
        _lower_interpolate,
        grad=vjp_grad(linear=True),
        normalise=_interpolate_normalise,
        departure="'tf_crop_and_resize' uses the whole input as its region (popxl passes none)",
    )
)


def _roi_align_infer(specs: Sequence[TensorSpec], attrs: Attrs) -> list[TensorSpec]:
    t, rois, batch_index = specs
    if len(t.shape) != 4 or rois.shape[1:] != (4,) or batch_index.shape != rois.shape[:1]:
        raise ValueError(
            f"roi_align needs data (N, C, H, W), rois (K, 4) and batch_index (K,), got {t.shape}, "
            f"{rois.shape} and {batch_index.shape}"
        )
    if attrs["sampling_ratio"] <= 0:
        raise NotImplementedError(
            "roi_align with sampling_ratio <= 0 samples a number of points that depends on each region's size: "
            "give a positive sampling_ratio"
        )
    return [TensorSpec((rois.shape[0], t.shape[1], *attrs["output_size"]), t.dtype)]


def _bilinear(image: jax.Array, y: jax.Array, x: jax.Array) -> jax.Array:
    """torchvision's bilinear sample of `image` (C, H, W) at each (y, x): zero beyond one pixel outside."""
    h, w = image.shape[1:]
    outside = (y < -1.0) | (y > h) | (x < -1.0) | (x > w)
    y, x = jnp.maximum(y, 0.0), jnp.maximum(x, 0.0)
    y_low, x_low = jnp.floor(y).astype(jnp.int32), jnp.floor(x).astype(jnp.int32)
    y_edge, x_edge = y_low >= h - 1, x_low >= w - 1
    y_low, x_low = jnp.where(y_edge, h - 1, y_low), jnp.where(x_edge, w - 1, x_low)
    y, x = jnp.where(y_edge, y_low.astype(y.dtype), y), jnp.where(x_edge, x_low.astype(x.dtype), x)
    y_high, x_high = jnp.minimum(y_low + 1, h - 1), jnp.minimum(x_low + 1, w - 1)
    ly, lx = y - y_low, x - x_low
    hy, hx = 1 - ly, 1 - lx
    value = (
        hy * hx * image[:, y_low, x_low]
        + hy * lx * image[:, y_low, x_high]
        + ly * hx * image[:, y_high, x_low]
        + ly * lx * image[:, y_high, x_high]
    )
    return jnp.where(outside, 0.0, value)


def _lower_roi_align(ctx: Any, attrs: Attrs, t: jax.Array, rois: jax.Array, batch_index: jax.Array) -> list[jax.Array]:
    ph, pw = attrs["output_size"]
    grid = attrs["sampling_ratio"]
    # popart differentiates roi_align with respect to the data only.
    boxes = jax.lax.stop_gradient(rois.astype(jnp.float32)) * attrs["spatial_scale"]

    def one(box: jax.Array, index: jax.Array) -> jax.Array:
        x1, y1, x2, y2 = box[0], box[1], box[2], box[3]
        bin_h = jnp.maximum(y2 - y1, 1.0) / ph
        bin_w = jnp.maximum(x2 - x1, 1.0) / pw
        steps = (jnp.arange(grid, dtype=jnp.float32) + 0.5) / grid
        ys = y1 + (jnp.arange(ph, dtype=jnp.float32)[:, None] + steps[None]) * bin_h
        xs = x1 + (jnp.arange(pw, dtype=jnp.float32)[:, None] + steps[None]) * bin_w
        yy = jnp.broadcast_to(ys[:, :, None, None], (ph, grid, pw, grid))
        xx = jnp.broadcast_to(xs[None, None], (ph, grid, pw, grid))
        image = jnp.take(t, index, axis=0).astype(jnp.float32)
        samples = _bilinear(image, yy, xx)
        return samples.mean(axis=(2, 4))

    return [jax.vmap(one)(boxes, batch_index.astype(jnp.int32)).astype(t.dtype)]


ROI_ALIGN = register(
    OpDef(
        "roi_align",
        _roi_align_infer,
        _lower_roi_align,
        grad=vjp_grad({0: (1, 2)}),
        departure="no gradient for the regions (as popart); sampling_ratio must be positive (a static grid)",
    )
)
