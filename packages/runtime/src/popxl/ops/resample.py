"""Resampling ops of `popxl.ops`: `interpolate` and `roi_align`."""

from __future__ import annotations

from collections.abc import Sequence

from popxl.op import create_op
from popxl.opdefs import resample
from popxl.tensor import Tensor


def interpolate(
    t: Tensor,
    scale_factor: Sequence[float] | None = (1.0, 1.0, 1.0, 1.0),
    mode: str | None = "nearest",
    nearest_mode: str | None = "round_prefer_floor",
    coordinate_transformation_mode: str | None = "half_pixel",
) -> Tensor:
    """`t` resized by `scale_factor` (one per axis; each output axis `floor(size * scale)` long) as ONNX's
    Resize does: 'nearest', 'linear' or 'cubic', with ONNX's nearest rounding and coordinate transformations."""
    attrs = {
        "scale_factor": tuple(scale_factor or (1.0,) * t.rank),
        "mode": mode or "nearest",
        "nearest_mode": nearest_mode or "round_prefer_floor",
        "coordinate_transformation_mode": coordinate_transformation_mode or "half_pixel",
    }
    # popxl: `interpolate_out` (python/popxl/ops/interpolate.py).
    return create_op(resample.INTERPOLATE, [t], attrs, names=["interpolate_out"])[0]


def roi_align(
    t: Tensor,
    rois: Tensor,
    batch_index: Tensor,
    output_size: Sequence[int],
    spatial_scale: float,
    sampling_ratio: int,
) -> Tensor:
    """Each region `rois[k]` ([x1, y1, x2, y2] in input-image coordinates) of image `batch_index[k]` of `t`
    (N, C, H, W), pooled into `output_size` bins by averaging `sampling_ratio`² bilinear samples per bin."""
    attrs = {
        "output_size": tuple(int(s) for s in output_size),
        "spatial_scale": float(spatial_scale),
        "sampling_ratio": int(sampling_ratio),
    }
    # popxl: `roi_align_out` (python/popxl/ops/roialign.py).
    return create_op(resample.ROI_ALIGN, [t, rois, batch_index], attrs, names=["roi_align_out"])[0]
