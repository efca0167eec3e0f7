"""popxl's float8 ops of `popxl.ops`: scaled casts, and scaled matmuls and convolutions of float8 operands."""

from __future__ import annotations

from collections.abc import Sequence

from popxl import dtypes, ipu_only
from popxl.op import create_op
from popxl.opdefs import float8 as f8
from popxl.ops.conv import PadType, conv_attrs, conv_transpose_attrs, record_conv_options
from popxl.tensor import Tensor


def pow2scale_cast_to_fp8(t: Tensor, log2_scale: Tensor, data_type: dtypes.dtype) -> Tensor:
    """`cast(t * 2**log2_scale, data_type)` for a float8 `data_type`; `log2_scale` an int32 scalar."""
    # popxl: `<t>_<dtype name>` (python/popxl/ops/cast.py).
    attrs = {"data_type": data_type}
    return create_op(f8.POW2SCALE_CAST_TO_FP8, [t, log2_scale], attrs, names=[f"{t.name}_{data_type.name}"])[0]


def pow2scale_cast_from_fp8(t: Tensor, log2_scale: Tensor, data_type: dtypes.dtype) -> Tensor:
    """`cast(t, data_type) * 2**log2_scale` of a float8 `t` to float16 or float32."""
    attrs = {"data_type": data_type}
    return create_op(f8.POW2SCALE_CAST_FROM_FP8, [t, log2_scale], attrs, names=[f"{t.name}_{data_type.name}"])[0]


def matmul_pow2scaled(
    lhs: Tensor, rhs: Tensor, log2_scale: Tensor, available_memory_proportion: float | None = None
) -> Tensor:
    """`(lhs @ rhs) * 2**log2_scale` of float8 operands, as float16 (`available_memory_proportion` is
    IPU-only: `popxl.ipu_only`)."""
    # popxl: `matmul_pow2scaled_out` (python/popxl/ops/matmul.py).
    out = create_op(f8.MATMUL_POW2SCALED, [lhs, rhs, log2_scale], {}, names=["matmul_pow2scaled_out"])[0]
    ipu_only.record(out, available_memory_proportion=available_memory_proportion)
    return out


def conv_pow2scaled(
    t: Tensor,
    weight: Tensor,
    log2_scale: Tensor,
    stride: Sequence[int] | None = (1, 1),
    padding: Sequence[int] | None = (0, 0, 0, 0),
    dilation: Sequence[int] | None = (1, 1),
    groups: int | None = 1,
    pad_type: PadType | None = "not_set",
    available_memory_proportions: list[float] | None = None,
    partials_types: list[str] | None = None,
    enable_conv_dithering: list[int] | None = None,
) -> Tensor:
    """`conv(t, weight) * 2**log2_scale` of float8 operands, as float16."""
    attrs = conv_attrs(t, stride, padding, dilation, groups, pad_type)
    # popxl: `conv_out` (python/popxl/ops/conv.py: conv_pow2scaled).
    out = create_op(f8.CONV_POW2SCALED, [t, weight, log2_scale], attrs, names=["conv_out"])[0]
    record_conv_options(out, available_memory_proportions, partials_types, enable_conv_dithering)
    return out


def conv_transpose_pow2scaled(
    t: Tensor,
    weight: Tensor,
    log2_scale: Tensor,
    stride: Sequence[int] | None = (1, 1),
    padding: Sequence[int] | None = (0, 0, 0, 0),
    dilation: Sequence[int] | None = (1, 1),
    groups: int | None = 1,
    pad_type: PadType | None = "not_set",
    output_padding: Sequence[int] | None = (),
    output_shape: Sequence[int] | None = (),
    available_memory_proportions: list[float] | None = None,
    partials_types: list[str] | None = None,
    enable_conv_dithering: list[int] | None = None,
) -> Tensor:
    """`conv_transpose(t, weight) * 2**log2_scale` of float8 operands, as float16."""
    attrs = conv_transpose_attrs(t, stride, padding, dilation, groups, pad_type, output_padding, output_shape)
    # popxl: `convtranspose_out` (python/popxl/ops/conv.py: conv_transpose_pow2scaled).
    out = create_op(f8.CONV_TRANSPOSE_POW2SCALED, [t, weight, log2_scale], attrs, names=["convtranspose_out"])[0]
    record_conv_options(out, available_memory_proportions, partials_types, enable_conv_dithering)
    return out
