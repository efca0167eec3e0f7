"""Shape ops of `popxl.ops`: reshapes, transposes, slices, concatenation, broadcasting and indexing."""

from __future__ import annotations

import builtins
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from popxl import dtypes
from popxl.creation import constant
from popxl.op import create_op
from popxl.opdefs import shape as shape_ops
from popxl.ops.elementwise import where
from popxl.ops.indexing import gather
from popxl.tensor import Tensor


def reshape(t: Tensor, shape: Iterable[int]) -> Tensor:
    """`t` with a new shape of the same size (one -1 allowed)."""
    # popxl (reshape.py): `<t.name>_reshaped`, for flatten and squeeze too.
    return create_op(shape_ops.RESHAPE, [t], {"shape": tuple(shape)}, names=[f"{t.name}_reshaped"])[0]


def reshape_(t: Tensor, shape: Iterable[int]) -> Tensor:
    """A view of `t` with a new shape: in-place updates of either are seen through both."""
    # popxl (reshape.py): `<t.name>_reshaped`, for flatten_ too.
    return create_op(shape_ops.RESHAPE_INPLACE, [t], {"shape": tuple(shape)}, names=[f"{t.name}_reshaped"])[0]


def flatten(t: Tensor) -> Tensor:
    """`t` as a 1-D tensor."""
    return reshape(t, (-1,))


def flatten_(t: Tensor) -> Tensor:
    """A 1-D view of `t`."""
    return reshape_(t, (-1,))


def transpose(t: Tensor, permutation: Iterable[int] | None = None) -> Tensor:
    """`t` with its axes permuted (reversed by default)."""
    perm = None if permutation is None else tuple(permutation)
    # popxl (transpose.py): `<t.name>_T`.
    return create_op(shape_ops.TRANSPOSE, [t], {"permutation": perm}, names=[f"{t.name}_T"])[0]


def transpose_(t: Tensor, permutation: Iterable[int] | None = None) -> Tensor:
    """A view of `t` with its axes permuted (reversed by default)."""
    perm = None if permutation is None else tuple(permutation)
    # popxl (transpose.py): `<t.name>_T`.
    return create_op(shape_ops.TRANSPOSE_INPLACE, [t], {"permutation": perm}, names=[f"{t.name}_T"])[0]


def _per_axis(value: int | Sequence[int] | None, n: int) -> list[int | None]:
    if value is None or isinstance(value, int):
        return [value] * n
    return list(value)


def slice(
    t: Tensor,
    start: int | Sequence[int] | None = None,
    stop: int | Sequence[int] | None = None,
    step: int | Sequence[int] | None = None,
    axis: int | Sequence[int] | None = None,
) -> Tensor:
    """Static slice of `t` along `axis` (the leading axes by default)."""
    return create_op(shape_ops.SLICE, [t], {"slices": _slices(t, start, stop, step, axis)})[0]


def slice_(
    t: Tensor,
    start: int | Sequence[int] | None = None,
    stop: int | Sequence[int] | None = None,
    step: int | Sequence[int] | None = None,
    axis: int | Sequence[int] | None = None,
) -> Tensor:
    """A view of a static slice of `t`: in-place updates of either are seen through both."""
    # popxl (slice.py): `slice_out`, as the copying form.
    return create_op(
        shape_ops.SLICE_INPLACE, [t], {"slices": _slices(t, start, stop, step, axis)}, names=["slice_out"]
    )[0]


def _slices(
    t: Tensor,
    start: int | Sequence[int] | None,
    stop: int | Sequence[int] | None,
    step: int | Sequence[int] | None,
    axis: int | Sequence[int] | None,
) -> tuple[tuple[Any, Any, Any], ...]:
    lengths = [len(v) for v in (start, stop, step, axis) if v is not None and not isinstance(v, int)]
    n = lengths[0] if lengths else 1
    axes = list(range(n)) if axis is None else _per_axis(axis, n)
    slices: list[tuple[Any, Any, Any]] = [(None, None, None)] * t.rank
    for ax, a, b, c in zip(axes, _per_axis(start, n), _per_axis(stop, n), _per_axis(step, n)):
        assert ax is not None
        slices[ax] = (a, b, c)
    return tuple(slices)


def concat(ts: Sequence[Tensor], axis: int = 0) -> Tensor:
    """Concatenation of `ts` along `axis`."""
    return create_op(shape_ops.CONCAT, list(ts), {"axis": axis})[0]


def concat_(ts: Sequence[Tensor], axis: int = 0) -> Tensor:
    """A view of `ts` concatenated along `axis`: in-place updates of it reach each of `ts`."""
    # popxl (concat.py): `concat_out`, as the copying form.
    return create_op(shape_ops.CONCAT_INPLACE, list(ts), {"axis": axis}, names=["concat_out"])[0]


def expand(t: Tensor, shape: Iterable[int]) -> Tensor:
    """`t` broadcast to `shape`."""
    return create_op(shape_ops.EXPAND, [t], {"shape": tuple(shape)})[0]


def squeeze(t: Tensor, axes: Iterable[int] | None = None) -> Tensor:
    """`t` without its size-1 axes (or just `axes`)."""
    drop = {a % t.rank for a in axes} if axes is not None else {i for i, d in enumerate(t.shape) if d == 1}
    return reshape(t, tuple(d for i, d in enumerate(t.shape) if i not in drop))


def split(t: Tensor, splits: int | Sequence[int], axis: int = 0) -> list[Tensor]:
    """`t` cut along `axis` into `splits` equal parts, or into parts of the given lengths."""
    axis = axis % t.rank
    if isinstance(splits, int):
        if t.shape[axis] % splits:
            raise ValueError(f"Axis {axis} of {t} does not split into {splits} equal parts")
        splits = [t.shape[axis] // splits] * splits
    if builtins.sum(splits) != t.shape[axis]:
        raise ValueError(f"Split lengths {list(splits)} do not add up to axis {axis} of {t}")
    parts, start = [], 0
    for i, length in enumerate(splits):
        slices: list[tuple[Any, Any, Any]] = [(None, None, None)] * t.rank
        slices[axis] = (start, start + length, None)
        # popxl (split.py): output i is `<t.name>_split_<i>`.
        parts.append(create_op(shape_ops.SLICE, [t], {"slices": tuple(slices)}, names=[f"{t.name}_split_{i}"])[0])
        start += length
    return parts


def subsample(t: Tensor, strides: int | Sequence[int]) -> Tensor:
    """Every `strides[i]`-th element along axis i (missing strides are 1)."""
    given = [strides] if isinstance(strides, int) else list(strides)
    return create_op(shape_ops.SUBSAMPLE, [t], {"strides": given})[0]


def _is_position(k: Any) -> bool:
    return isinstance(k, int | np.integer | builtins.slice) and not isinstance(k, bool | np.bool_)


def getitem(t: Tensor, key: Any) -> Tensor:
    """`t[key]`, as popxl's `Tensor.__getitem__`: ints and slices slice (an int drops its axis); a tensor
    or host array of integers gathers rows along axis 0; one of booleans keeps `t` where true, else 0."""
    if isinstance(key, bool | str | np.bool_):
        raise TypeError(f"Unsupported index {key!r} for {t}: use ints, slices, integer or boolean tensors")
    positions = key if isinstance(key, tuple) else (key,)
    if isinstance(key, Tensor) or not builtins.all(map(_is_position, positions)):
        return _index_with_tensor(t, key)
    key = positions
    if len(key) > t.rank:
        raise IndexError(f"Too many indices ({len(key)}) for {t}")
    slices: list[tuple[Any, Any, Any]] = []
    strides: list[int] = []
    drop = []
    for i, k in enumerate(key):
        if isinstance(k, int | np.integer):
            k = int(k) % t.shape[i]
            slices.append((k, k + 1, None))
            strides.append(1)
            drop.append(i)
        else:
            if k.step == 0:
                raise ValueError(f"A slice step cannot be zero (indexing {t})")
            # As popxl's Tensor.__getitem__: slice with the step's sign, then subsample by its size.
            step = None if k.step is None else (1 if k.step > 0 else -1)
            slices.append((k.start, k.stop, step))
            strides.append(1 if k.step is None else builtins.abs(k.step))
    # popxl: `slice_out`, then `subsample_out` (subsample.py) for steps other than +-1, then squeezed
    # (`<...>_reshaped`) for integer keys.
    out = create_op(shape_ops.SLICE, [t], {"slices": tuple(slices)}, names=["slice_out"])[0]
    if builtins.any(v != 1 for v in strides):
        out = create_op(shape_ops.SUBSAMPLE, [out], {"strides": strides}, names=["subsample_out"])[0]
    return squeeze(out, drop) if drop else out


def _index_with_tensor(t: Tensor, key: Any) -> Tensor:
    if not isinstance(key, Tensor):
        if not isinstance(key, np.ndarray | Iterable):
            raise TypeError(f"Unsupported index {key!r} for {t}: use ints, slices, integer or boolean tensors")
        key = constant(key)  # popxl takes host arrays and sequences as constants (64-bit ints narrowed)
    if key.dtype.is_int:
        return gather(t, key)
    if key.dtype is dtypes.bool_:
        # A mask, not NumPy's selection: the result keeps `t`'s shape, zero where the mask is false.
        return where(key, t, constant(0, t.dtype))
    raise TypeError(f"Unsupported index {key} for {t}: index tensors must hold integers or booleans")
