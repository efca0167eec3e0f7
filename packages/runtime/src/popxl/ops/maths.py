"""Maths and shape ops of `popxl.ops`."""

from __future__ import annotations

import builtins
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from popxl import dtypes, ipu_only
from popxl.creation import constant
from popxl.op import OpDef, create_op
from popxl.opdefs import elementwise as ew
from popxl.opdefs import linalg, reduce
from popxl.opdefs import shape as shape_ops
from popxl.ops.indexing import gather
from popxl.tensor import Tensor


def _one(
    opdef: OpDef, inputs: Sequence[Tensor], attrs: dict[str, Any] | None = None, name: str | None = None
) -> Tensor:
    return create_op(opdef, inputs, attrs, names=[name])[0]


def add(lhs: Tensor, rhs: Tensor) -> Tensor:
    """Elementwise `lhs + rhs` with broadcasting."""
    return _one(ew.ADD, [lhs, rhs])


def add_(lhs: Tensor, rhs: Tensor) -> Tensor:
    """`lhs += rhs` in place; returns the updated `lhs`."""
    # popxl (add.py): `add_lhs_inplace_out`.
    return _one(ew.ADD_INPLACE, [lhs, rhs], name="add_lhs_inplace_out")


def sub(lhs: Tensor, rhs: Tensor) -> Tensor:
    """Elementwise `lhs - rhs` with broadcasting."""
    return _one(ew.SUB, [lhs, rhs])


def mul(lhs: Tensor, rhs: Tensor) -> Tensor:
    """Elementwise `lhs * rhs` with broadcasting."""
    return _one(ew.MUL, [lhs, rhs])


def div(lhs: Tensor, rhs: Tensor) -> Tensor:
    """Elementwise `lhs / rhs`; truncating division on integers."""
    return _one(ew.DIV, [lhs, rhs])


def fmod(lhs: Tensor, rhs: Tensor) -> Tensor:
    """Elementwise C-style remainder."""
    return _one(ew.FMOD, [lhs, rhs])


def pow(lhs: Tensor, rhs: Tensor) -> Tensor:
    """Elementwise `lhs ** rhs`."""
    return _one(ew.POW, [lhs, rhs])


def maximum(lhs: Tensor, rhs: Tensor) -> Tensor:
    """Elementwise maximum."""
    return _one(ew.MAXIMUM, [lhs, rhs])


def minimum(lhs: Tensor, rhs: Tensor) -> Tensor:
    """Elementwise minimum."""
    return _one(ew.MINIMUM, [lhs, rhs])


def equal(lhs: Tensor, rhs: Tensor) -> Tensor:
    """Elementwise `lhs == rhs` as bool."""
    return _one(ew.EQUAL, [lhs, rhs])


def greater(lhs: Tensor, rhs: Tensor) -> Tensor:
    """Elementwise `lhs > rhs` as bool."""
    return _one(ew.GREATER, [lhs, rhs])


def less(lhs: Tensor, rhs: Tensor) -> Tensor:
    """Elementwise `lhs < rhs` as bool."""
    return _one(ew.LESS, [lhs, rhs])


def logical_and(lhs: Tensor, rhs: Tensor) -> Tensor:
    """Elementwise logical and."""
    # popxl (logical_and.py): `and_out`.
    return _one(ew.LOGICAL_AND, [lhs, rhs], name="and_out")


def logical_or(lhs: Tensor, rhs: Tensor) -> Tensor:
    """Elementwise logical or."""
    # popxl (logical_or.py): `or_out`.
    return _one(ew.LOGICAL_OR, [lhs, rhs], name="or_out")


def logical_not(t: Tensor) -> Tensor:
    """Elementwise logical not."""
    # popxl (logical_not.py): `not_out`.
    return _one(ew.LOGICAL_NOT, [t], name="not_out")


def negate(t: Tensor) -> Tensor:
    """Elementwise `-t`."""
    return _one(ew.NEGATE, [t])


def exp(t: Tensor) -> Tensor:
    """Elementwise exponential."""
    return _one(ew.EXP, [t])


def log(t: Tensor) -> Tensor:
    """Elementwise natural logarithm."""
    return _one(ew.LOG, [t])


def sqrt(t: Tensor) -> Tensor:
    """Elementwise square root."""
    return _one(ew.SQRT, [t])


def tanh(t: Tensor) -> Tensor:
    """Elementwise hyperbolic tangent."""
    return _one(ew.TANH, [t])


def sigmoid(t: Tensor) -> Tensor:
    """Elementwise logistic sigmoid."""
    return _one(ew.SIGMOID, [t])


def relu(t: Tensor) -> Tensor:
    """Elementwise max(t, 0)."""
    return _one(ew.RELU, [t])


def gelu(t: Tensor) -> Tensor:
    """Elementwise GELU (tanh approximation, as popxl computes it)."""
    return _one(ew.GELU, [t])


def abs(t: Tensor) -> Tensor:
    """Elementwise absolute value."""
    return _one(ew.ABS, [t])


def sin(t: Tensor) -> Tensor:
    """Elementwise sine."""
    return _one(ew.SIN, [t])


def cos(t: Tensor) -> Tensor:
    """Elementwise cosine."""
    return _one(ew.COS, [t])


def square(t: Tensor) -> Tensor:
    """Elementwise square."""
    return _one(ew.SQUARE, [t])


def reciprocal(t: Tensor) -> Tensor:
    """Elementwise 1 / t."""
    return _one(ew.RECIPROCAL, [t])


def identity(t: Tensor, output_name: str | None = None) -> Tensor:
    """A copy of `t`, named `output_name` (by default `identity_<t>`)."""
    # popxl (identity.py): an empty or missing `output_name` gives `identity_<t.name>`.
    return _one(ew.IDENTITY, [t], name=output_name or f"identity_{t.name}")


def detach(t: Tensor) -> Tensor:
    """A copy of `t` through which no gradient flows."""
    return _one(ew.DETACH, [t])


def cast(t: Tensor, data_type: Any) -> Tensor:
    """`t` converted to `data_type`."""
    dt = dtypes.as_dtype(data_type)
    # popxl (cast.py): `<t.name>_<dtype name>`.
    return _one(ew.CAST, [t], {"dtype": dt}, name=f"{t.name}_{dt.name}")


def where(condition: Tensor, lhs: Tensor, rhs: Tensor) -> Tensor:
    """Elementwise `lhs` where `condition` holds, else `rhs`; a non-bool `condition` is cast to bool first."""
    if condition.dtype is not dtypes.bool_:
        # popxl (where.py) casts the condition with `cast_if_needed`, so it is named `<condition>_bool`.
        condition = cast(condition, dtypes.bool_)
    return _one(ew.WHERE, [condition, lhs, rhs])


def matmul(
    lhs: Tensor,
    rhs: Tensor,
    available_memory_proportion: float | None = None,
    output_type: Any | None = None,
    partials_type: Any | None = None,
) -> Tensor:
    """Matrix product with NumPy's broadcasting rules, in `lhs`'s type unless `output_type` is given.

    `available_memory_proportion` and `partials_type` tune the IPU's matmul and change nothing here.
    """
    attrs = {"output_type": dtypes.as_dtype(output_type) if output_type is not None else None}
    out = _one(linalg.MATMUL, [lhs, rhs], attrs)
    ipu_only.record(out, available_memory_proportion=available_memory_proportion, partials_type=partials_type)
    return out


def _reduce(opdef: OpDef, t: Tensor, axis: int | Iterable[int] | None, keepdims: bool, name: str) -> Tensor:
    ax = axis if axis is None or isinstance(axis, int) else tuple(axis)
    return _one(opdef, [t], {"axis": ax, "keepdims": keepdims}, name=name)


def softmax(t: Tensor, axis: int) -> Tensor:
    """Softmax along `axis`."""
    if not -t.rank <= axis < t.rank:
        raise ValueError(f"softmax axis {axis} is out of range for {t}")
    return _one(reduce.SOFTMAX, [t], {"axis": axis})


def group_norm(t: Tensor, weight: Tensor, bias: Tensor, num_groups: int, eps: float = 1e-5) -> Tensor:
    """Normalise each group of channels of `t` (N, C, ...), then scale and shift per channel."""
    return _one(reduce.GROUP_NORM, [t, weight, bias], {"num_groups": num_groups, "eps": eps})


def layer_norm(t: Tensor, weight: Tensor, bias: Tensor, eps: float = 1e-5) -> Tensor:
    """Normalise each row of `t` (N, C), then scale and shift per channel."""
    return group_norm(t, weight, bias, 1, eps)


def reshape(t: Tensor, shape: Iterable[int]) -> Tensor:
    """`t` with a new shape of the same size (one -1 allowed)."""
    # popxl (reshape.py): `<t.name>_reshaped`, for flatten and squeeze too.
    return _one(shape_ops.RESHAPE, [t], {"shape": tuple(shape)}, name=f"{t.name}_reshaped")


def reshape_(t: Tensor, shape: Iterable[int]) -> Tensor:
    """A view of `t` with a new shape: in-place updates of either are seen through both."""
    # popxl (reshape.py): `<t.name>_reshaped`, for flatten_ too.
    return _one(shape_ops.RESHAPE_INPLACE, [t], {"shape": tuple(shape)}, name=f"{t.name}_reshaped")


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
    return _one(shape_ops.TRANSPOSE, [t], {"permutation": perm}, name=f"{t.name}_T")


def transpose_(t: Tensor, permutation: Iterable[int] | None = None) -> Tensor:
    """A view of `t` with its axes permuted (reversed by default)."""
    perm = None if permutation is None else tuple(permutation)
    # popxl (transpose.py): `<t.name>_T`.
    return _one(shape_ops.TRANSPOSE_INPLACE, [t], {"permutation": perm}, name=f"{t.name}_T")


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
    return _one(shape_ops.SLICE, [t], {"slices": _slices(t, start, stop, step, axis)})


def slice_(
    t: Tensor,
    start: int | Sequence[int] | None = None,
    stop: int | Sequence[int] | None = None,
    step: int | Sequence[int] | None = None,
    axis: int | Sequence[int] | None = None,
) -> Tensor:
    """A view of a static slice of `t`: in-place updates of either are seen through both."""
    # popxl (slice.py): `slice_out`, as the copying form.
    return _one(shape_ops.SLICE_INPLACE, [t], {"slices": _slices(t, start, stop, step, axis)}, name="slice_out")


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
    return _one(shape_ops.CONCAT, list(ts), {"axis": axis})


def concat_(ts: Sequence[Tensor], axis: int = 0) -> Tensor:
    """A view of `ts` concatenated along `axis`: in-place updates of it reach each of `ts`."""
    # popxl (concat.py): `concat_out`, as the copying form.
    return _one(shape_ops.CONCAT_INPLACE, list(ts), {"axis": axis}, name="concat_out")


def expand(t: Tensor, shape: Iterable[int]) -> Tensor:
    """`t` broadcast to `shape`."""
    return _one(shape_ops.EXPAND, [t], {"shape": tuple(shape)})


def squeeze(t: Tensor, axes: Iterable[int] | None = None) -> Tensor:
    """`t` without its size-1 axes (or just `axes`)."""
    drop = {a % t.rank for a in axes} if axes is not None else {i for i, d in enumerate(t.shape) if d == 1}
    return reshape(t, tuple(d for i, d in enumerate(t.shape) if i not in drop))


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
    out = _one(shape_ops.SLICE, [t], {"slices": tuple(slices)}, name="slice_out")
    if builtins.any(v != 1 for v in strides):
        out = _one(shape_ops.SUBSAMPLE, [out], {"strides": strides}, name="subsample_out")
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


def sum(t: Tensor, axis: int | Iterable[int] | None = None, keepdims: bool = False) -> Tensor:
    """Sum over `axis` (all axes by default)."""
    # popxl (sum.py): `sum_out`.
    return _reduce(reduce.REDUCE_SUM, t, axis, keepdims, "sum_out")


def mean(t: Tensor, axis: int | Iterable[int] | None = None, keepdims: bool = False) -> Tensor:
    """Mean over `axis` (all axes by default)."""
    # popxl (mean.py): `mean_out`.
    return _reduce(reduce.REDUCE_MEAN, t, axis, keepdims, "mean_out")


def max(t: Tensor, axis: int | Iterable[int] | None = None, keepdims: bool = False) -> Tensor:
    """Maximum over `axis` (all axes by default)."""
    # popxl (max.py): `max_out`.
    return _reduce(reduce.REDUCE_MAX, t, axis, keepdims, "max_out")


def min(t: Tensor, axis: int | Iterable[int] | None = None, keepdims: bool = False) -> Tensor:
    """Minimum over `axis` (all axes by default)."""
    # popxl (min.py): `min_out`.
    return _reduce(reduce.REDUCE_MIN, t, axis, keepdims, "min_out")


def sumsquare(t: Tensor, axis: int | Iterable[int] | None = None, keepdims: bool = False) -> Tensor:
    """Sum of squares over `axis` (all axes by default)."""
    # popxl (sumsquare.py) is one op, `sumsquare_out`; the square is named so as to take no name of popxl's.
    return _reduce(reduce.REDUCE_SUM, _one(ew.MUL, [t, t], name="sumsquare_square"), axis, keepdims, "sumsquare_out")


def logsumexp(t: Tensor, axis: int | Iterable[int] | None = None, keepdims: bool = False) -> Tensor:
    """log(sum(exp(t))) over `axis`, computed stably."""
    # popxl (logsumexp.py) is one op, `logsumexp_out`; the steps here are named so as to take no name of
    # popxl's (which a later op of the user's would then find taken).
    peak = _one(ew.DETACH, [_reduce(reduce.REDUCE_MAX, t, axis, True, "logsumexp_max")], name="logsumexp_peak")
    shifted = _one(ew.EXP, [_one(ew.SUB, [t, peak], name="logsumexp_shifted")], name="logsumexp_exp")
    total = _one(ew.LOG, [_reduce(reduce.REDUCE_SUM, shifted, axis, True, "logsumexp_sum")], name="logsumexp_log")
    if keepdims:
        return _one(ew.ADD, [total, peak], name="logsumexp_out")
    out = _one(ew.ADD, [total, peak], name="logsumexp_kept")
    ax = tuple(range(t.rank)) if axis is None else ((axis,) if isinstance(axis, int) else tuple(axis))
    drop = {a % t.rank for a in ax}
    kept = tuple(d for i, d in enumerate(out.shape) if i not in drop)
    return _one(shape_ops.RESHAPE, [out], {"shape": kept}, name="logsumexp_out")


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
        parts.append(_one(shape_ops.SLICE, [t], {"slices": tuple(slices)}, name=f"{t.name}_split_{i}"))
        start += length
    return parts


def scaled_add(X: Tensor, Y: Tensor, a: float | Tensor = 1.0, b: float | Tensor = 1.0) -> Tensor:
    """`a * X + b * Y`."""
    # popxl (scaled_add.py) is one op, `scaled_add_out`; the steps here are named so as to take no name of
    # popxl's.
    aX = _one(ew.MUL, [_scalar(a, X, "scaled_add_a"), X], name="scaled_add_aX")
    bY = _one(ew.MUL, [_scalar(b, X, "scaled_add_b"), Y], name="scaled_add_bY")
    return _one(ew.ADD, [aX, bY], name="scaled_add_out")


def _scalar(value: float | Tensor, like: Tensor, name: str) -> Tensor:
    if isinstance(value, Tensor):
        return value
    return constant(np.asarray(value, like.dtype.as_numpy()), like.dtype, name=name)
