"""Convolutions and pooling of `popxl.ops`, with popxl's signatures."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

from popxl import ipu_only
from popxl.op import create_op
from popxl.opdefs import conv as c
from popxl.tensor import Tensor

PadType = Literal["not_set", "same_upper", "same_lower", "valid"]


def conv(
    t: Tensor,
    weight: Tensor,
    stride: Sequence[int] | None = (1, 1),
    padding: Sequence[int] | None = (0, 0, 0, 0),
    dilation: Sequence[int] | None = (1, 1),
    groups: int | None = 1,
    pad_type: PadType | None = "not_set",
    available_memory_proportions: list[float] | None = None,
    partials_types: list[str] | None = None,
    enable_conv_dithering: list[int] | None = None,
) -> Tensor:
    """Convolution of `t` (N, C, *spatial) with `weight` (M, C/groups, *kernel); pads are [begins..., ends...].

    The defaults are popxl's, written for 2-D; for 1-D or 3-D inputs give values per spatial axis. The
    memory, partials and dithering options tune the IPU's convolution and change nothing here (`popxl.ipu_only`).
    """
    out = create_op(c.CONV, [t, weight], conv_attrs(t, stride, padding, dilation, groups, pad_type))[0]
    record_conv_options(out, available_memory_proportions, partials_types, enable_conv_dithering)
    return out


def record_conv_options(
    out: Tensor,
    available_memory_proportions: list[float] | None,
    partials_types: list[str] | None,
    enable_conv_dithering: list[int] | None,
) -> None:
    """Check and record a convolution's IPU-only options on the op producing `out`."""
    ipu_only.record(
        out,
        available_memory_proportions=available_memory_proportions,
        partials_types=partials_types,
        enable_conv_dithering=enable_conv_dithering,
    )


def conv_attrs(
    t: Tensor,
    stride: Sequence[int] | None,
    padding: Sequence[int] | None,
    dilation: Sequence[int] | None,
    groups: int | None,
    pad_type: PadType | None,
) -> dict[str, Any]:
    """A convolution's attrs from popxl's arguments."""
    return {
        "stride": _spatial(stride, t, (1, 1)),
        "padding": _spatial(padding, t, (0, 0, 0, 0)),
        "dilation": _spatial(dilation, t, (1, 1)),
        "groups": groups or 1,
        "pad_type": pad_type or "not_set",
    }


def conv_transpose(
    t: Tensor,
    weight: Tensor,
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
    """Transposed convolution of `t` (N, C, *spatial) with `weight` (C, M/groups, *kernel), as ONNX's
    ConvTranspose: an `output_shape` sets the pads, which are otherwise `padding`. The memory, partials and
    dithering options are IPU-only, as for `conv`."""
    attrs = conv_transpose_attrs(t, stride, padding, dilation, groups, pad_type, output_padding, output_shape)
    # popxl: `convtranspose_out` (python/popxl/ops/conv.py).
    out = create_op(c.CONV_TRANSPOSE, [t, weight], attrs, names=["convtranspose_out"])[0]
    record_conv_options(out, available_memory_proportions, partials_types, enable_conv_dithering)
    return out


def conv_transpose_attrs(
    t: Tensor,
    stride: Sequence[int] | None,
    padding: Sequence[int] | None,
    dilation: Sequence[int] | None,
    groups: int | None,
    pad_type: PadType | None,
    output_padding: Sequence[int] | None,
    output_shape: Sequence[int] | None,
) -> dict[str, Any]:
    """A transposed convolution's attrs from popxl's arguments."""
    return {
        **conv_attrs(t, stride, padding, dilation, groups, pad_type),
        "output_padding": tuple(output_padding or ()),
        "output_shape": tuple(output_shape or ()),
    }


def _spatial(value: Sequence[int] | None, t: Tensor, default: tuple[int, ...]) -> tuple[int, ...] | None:
    """popxl's 2-D default stands for 'the default on every spatial axis' on inputs of other ranks."""
    if value is None or (tuple(value) == default and t.rank != 4):
        return None
    return tuple(value)


def _pool(
    opdef: Any,
    t: Tensor,
    kernel_size: Sequence[int],
    stride: Sequence[int] | None,
    padding: Sequence[int] | None,
    out_pads: Sequence[int] | None,
    dilation: Sequence[int] | None,
    in_dilations: Sequence[int] | None,
    auto_pad: PadType | None,
    ceil_mode: bool,
) -> Tensor:
    if out_pads and any(out_pads):
        raise NotImplementedError(f"Pooling with out_pads {tuple(out_pads)}: popxl documents no effect for them")
    attrs = {
        "kernel_size": tuple(kernel_size),
        "stride": stride,
        "padding": padding,
        "dilation": dilation,
        "in_dilations": in_dilations,
        "auto_pad": auto_pad or "not_set",
        "ceil_mode": bool(ceil_mode),
    }
    return create_op(opdef, [t], attrs)[0]


def average_pool(
    t: Tensor,
    kernel_size: Sequence[int],
    stride: Sequence[int] | None = None,
    padding: Sequence[int] | None = None,
    out_pads: Sequence[int] | None = None,
    dilation: Sequence[int] | None = None,
    in_dilations: Sequence[int] | None = None,
    auto_pad: PadType | None = "not_set",
    ceil_mode: bool = False,
) -> Tensor:
    """Average of each window of `t` (N, C, *spatial), padding not counted."""
    return _pool(c.AVERAGE_POOL, t, kernel_size, stride, padding, out_pads, dilation, in_dilations, auto_pad, ceil_mode)


def max_pool(
    t: Tensor,
    kernel_size: Sequence[int],
    stride: Sequence[int] | None = None,
    padding: Sequence[int] | None = None,
    out_pads: Sequence[int] | None = None,
    dilation: Sequence[int] | None = None,
    in_dilations: Sequence[int] | None = None,
    auto_pad: PadType | None = "not_set",
    ceil_mode: bool = False,
    storage_order: Literal["row", "column"] = "row",
) -> Tensor:
    """Maximum of each window of `t` (N, C, *spatial).

    `storage_order` ('row' or 'column') orders ONNX MaxPool's Indices output, which popxl does not return,
    so it changes no value; any other value is refused."""
    if storage_order not in ("row", "column"):
        raise ValueError(f"max_pool's storage_order must be 'row' or 'column', got {storage_order!r}")
    return _pool(c.MAX_POOL, t, kernel_size, stride, padding, out_pads, dilation, in_dilations, auto_pad, ceil_mode)
