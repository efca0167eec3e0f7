"""Indexing ops of `popxl.ops`."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from popxl import ipu_only
from popxl.creation import constant
from popxl.op import create_op
from popxl.opdefs import indexing as ix
from popxl.opdefs import scatter as sc
from popxl.tensor import Tensor


def _indices(value: Any) -> Tensor:
    return value if isinstance(value, Tensor) else constant(np.asarray(value, np.int32))


def gather(
    t: Tensor,
    indices: Tensor | Any,
    axis: int = 0,
    available_memory_proportion: float | None = None,
    zero_OOR: bool = False,
) -> Tensor:
    """Elements of `t` at `indices` along `axis` (as numpy.take); out-of-range ones are zeros with `zero_OOR`.

    Indices lie in [0, size): a negative one is out of range too, as popart reads gather indices as unsigned.
    Without `zero_OOR` an out-of-range index makes a checked run raise `popxl.OutOfRangeError`; with
    `checks=False` it is clamped into [0, size), as XLA does.
    `available_memory_proportion` is IPU-only (`popxl.ipu_only`)."""
    out = create_op(ix.GATHER, [t, _indices(indices)], {"axis": axis, "zero_OOR": zero_OOR})[0]
    ipu_only.record(out, available_memory_proportion=available_memory_proportion)
    return out


def dynamic_slice(
    t: Tensor, index: Tensor, axes: Sequence[int], sizes: Sequence[int], no_overlap: bool = False
) -> Tensor:
    """A slice of `sizes` along `axes`, starting at the run-time `index` (one start per axis).

    A start outside [0, dim - size] makes a checked run raise `popxl.OutOfRangeError`; with `checks=False`
    it is clamped into that range, as XLA does (so index 100 of 8 elements, size 2, gives the last two).

    `no_overlap` is popxl's promise that each region has one writer, which lets an IPU skip work; the
    gradient here is right either way, so it is IPU-only (`popxl.ipu_only`)."""
    out = create_op(ix.DYNAMIC_SLICE, [t, index], {"axes": list(axes), "sizes": list(sizes)})[0]
    ipu_only.record(out, no_overlap=no_overlap)
    return out


def dynamic_update(
    t: Tensor, index: Tensor, t_update: Tensor, axes: Sequence[int], sizes: Sequence[int], no_overlap: bool = False
) -> Tensor:
    """A copy of `t` with `t_update` written at the run-time `index` along `axes` (`no_overlap`, and an
    out-of-range `index`: raised when checked, else clamped, as for `dynamic_slice`)."""
    out = create_op(ix.DYNAMIC_UPDATE, [t, t_update, index], {"axes": list(axes), "sizes": list(sizes)})[0]
    ipu_only.record(out, no_overlap=no_overlap)
    return out


def dynamic_update_(
    t: Tensor, index: Tensor, t_update: Tensor, axes: Sequence[int], sizes: Sequence[int], no_overlap: bool = False
) -> Tensor:
    """`dynamic_update` in place on `t`."""
    attrs = {"axes": list(axes), "sizes": list(sizes)}
    # popxl: `dynamicupdateinplace_out` (python/popxl/ops/dynamic_update.py: dynamic_update_).
    out = create_op(ix.DYNAMIC_UPDATE_INPLACE, [t, t_update, index], attrs, names=["dynamicupdateinplace_out"])[0]
    ipu_only.record(out, no_overlap=no_overlap)
    return out


def onehot(t: Tensor, num_classes: Tensor | int, values: Tensor, axis: int = -1) -> Tensor:
    """`values[1]` where an axis position equals the index in `t`, `values[0]` elsewhere.

    An index outside [0, num_classes) makes a checked run raise `popxl.OutOfRangeError`; with
    `checks=False` its row is all `values[0]`."""
    classes = (
        num_classes if isinstance(num_classes, int) else int(np.asarray(getattr(num_classes, "data", num_classes)))
    )
    return create_op(ix.ONEHOT, [t, values], {"num_classes": classes, "axis": axis})[0]


def argmax(t: Tensor, dim: int = 0, keepdim: bool = False) -> Tensor:
    """Indices of the maxima along `dim` (int32)."""
    return create_op(ix.ARGMAX, [t], {"dim": dim, "keepdim": keepdim})[0]


def argmin(t: Tensor, dim: int = 0, keepdim: bool = False) -> Tensor:
    """Indices of the minima along `dim` (int32)."""
    return create_op(ix.ARGMIN, [t], {"dim": dim, "keepdim": keepdim})[0]


def tied_gather(
    t: Tensor,
    indices: Tensor | Any,
    axis: int = 0,
    available_memory_proportion: float | None = None,
    zero_OOR: bool = False,
) -> Tensor:
    """`gather` for a weight shared with a matmul (the tie changes IPU tile layout only; values and index
    checks are the same)."""
    # popxl names it `tiedgather_out` (python/popxl/ops/gather.py: tied_gather).
    attrs = {"axis": axis, "zero_OOR": zero_OOR}
    out = create_op(ix.GATHER, [t, _indices(indices)], attrs, names=["tiedgather_out"])[0]
    ipu_only.record(out, available_memory_proportion=available_memory_proportion)
    return out


def topk(
    t: Tensor, k: int, axis: int, largest: bool, sorted: bool, available_memory_proportion: float | None = None
) -> tuple[Tensor, Tensor]:
    """The `k` largest (or smallest) elements along `axis` and their int32 indices.

    They come sorted whatever `sorted` says: `sorted=False` (ONNX TopK's 'any order') allows that order too.
    `available_memory_proportion` is IPU-only (`popxl.ipu_only`)."""
    if sorted not in (True, False):
        raise ValueError(f"topk's sorted must be a bool, got {sorted!r}")
    attrs = {"k": int(k), "axis": axis, "largest": bool(largest)}
    # popxl's names (python/popxl/ops/topk.py).
    values, indices = create_op(ix.TOPK, [t], attrs, names=["topk_out_value", "topk_out_indices"])
    ipu_only.record(values, available_memory_proportion=available_memory_proportion)
    return values, indices


def scatter(
    t: Tensor, indices: Tensor, values: Tensor, axis: int = 0, available_memory_proportion: float | None = None
) -> Tensor:
    """A copy of `t` with `values` written where `indices` point along `axis` (ONNX ScatterElements).

    As ONNX, an index in [-size, 0) counts from the end. One outside [-size, size) makes a checked run
    raise `popxl.OutOfRangeError`; with `checks=False` its entry writes nothing, as XLA's scatter.
    `available_memory_proportion` is IPU-only (`popxl.ipu_only`)."""
    out = create_op(sc.SCATTER, [t, _indices(indices), values], {"axis": axis})[0]
    ipu_only.record(out, available_memory_proportion=available_memory_proportion)
    return out


def groupedgather(
    t: Tensor,
    indices: Tensor | Any,
    axis: int = 0,
    group_size: int | None = 1,
    available_memory_proportion: float | None = None,
    zero_OOR: bool = False,
) -> Tensor:
    """`gather` in each of `group_size` groups: `t` and `indices` have a leading group axis, and `axis` (after
    it) is gathered within each group; out-of-range indices as for `gather`."""
    attrs = {"axis": axis, "group_size": group_size or 1, "zero_OOR": zero_OOR}
    # popxl's gather and groupedgather both name it `gather_out` (python/popxl/ops/gather.py).
    out = create_op(ix.GROUPED_GATHER, [t, _indices(indices)], attrs, names=["gather_out"])[0]
    ipu_only.record(out, available_memory_proportion=available_memory_proportion)
    return out


def scatter_reduce(
    data: Tensor,
    indices: Tensor | Any,
    reduction: str,
    initial_values: Tensor | None = None,
    axis: int = 0,
    axis_size: int | None = None,
    enable_index_broadcast: bool = True,
    available_memory_proportion: float | None = None,
) -> Tensor:
    """`data` reduced ('sum', 'min', 'max', or 'none': written) into `axis_size` positions along `axis`, element
    i going to `indices[i]`; starting from `initial_values` if given, else zero (positions no element reaches
    stay zero).

    With `enable_index_broadcast` (popart's default) `indices` of the data's shape, or a vector along `axis`
    broadcast to it, give an output of the data's shape but for `axis`. popart's
    `enable_index_broadcast=False` keeps the indices' own shape instead (the output follows it); for indices
    of the data's shape that is the same op, and any other indices are refused naming it.
    An index outside [0, axis_size) makes a checked run raise `popxl.OutOfRangeError`; with `checks=False`
    its element reduces into nothing, as XLA's scatter drops it.
    `available_memory_proportion` is IPU-only (`popxl.ipu_only`)."""
    index = _indices(indices)
    if not isinstance(enable_index_broadcast, bool | int | np.bool_) or int(enable_index_broadcast) not in (0, 1):
        raise ValueError(f"enable_index_broadcast must be a bool (or 0 or 1), got {enable_index_broadcast!r}")
    if not enable_index_broadcast and index.shape != data.shape:
        raise ValueError(
            f"scatter_reduce with enable_index_broadcast=False keeps the indices' shape {index.shape}, and this "
            f"runtime supports that only for indices of the data's shape {data.shape}: give indices of that "
            f"shape, or enable_index_broadcast=True to broadcast a vector of indices along axis {axis}"
        )
    inputs = [data, index, *([initial_values] if initial_values is not None else [])]
    attrs = {"reduction": reduction, "axis": axis, "axis_size": axis_size}
    # popxl: `scatterreduce_out` (python/popxl/ops/scatter_reduce.py).
    out = create_op(sc.SCATTER_REDUCE, inputs, attrs, names=["scatterreduce_out"])[0]
    ipu_only.record(out, available_memory_proportion=available_memory_proportion)
    return out
