"""Maths and shape ops of `popxl.ops`."""

from __future__ import annotations

import builtins
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from popxl import dtypes
from popxl.creation import constant
from popxl.op import OpDef, create_op
from popxl.opdefs import elementwise as ew
from popxl.opdefs import linalg, reduce
from popxl.opdefs import shape as shape_ops
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
    return create_op(ew.ADD_INPLACE, [lhs, rhs])[0]


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
    return _one(ew.LOGICAL_AND, [lhs, rhs])


def logical_or(lhs: Tensor, rhs: Tensor) -> Tensor:
    """Elementwise logical or."""
    return _one(ew.LOGICAL_OR, [lhs, rhs])


def logical_not(t: Tensor) -> Tensor:
    """Elementwise logical not."""
    return _one(ew.LOGICAL_NOT, [t])


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
    """A copy of `t`."""
    return _one(ew.IDENTITY, [t], name=output_name)


def detach(t: Tensor) -> Tensor:
    """A copy of `t` through which no gradient flows."""
    return _one(ew.DETACH, [t])


def cast(t: Tensor, data_type: Any) -> Tensor:
    """`t` converted to `data_type`."""
    return _one(ew.CAST, [t], {"dtype": dtypes.as_dtype(data_type)})


def where(condition: Tensor, lhs: Tensor, rhs: Tensor) -> Tensor:
    """Elementwise `lhs` where `condition` holds, else `rhs`."""
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
    return _one(linalg.MATMUL, [lhs, rhs], attrs)


def _reduce(opdef: OpDef, t: Tensor, axis: int | Iterable[int] | None, keepdims: bool) -> Tensor:
    ax = axis if axis is None or isinstance(axis, int) else tuple(axis)
    return _one(opdef, [t], {"axis": ax, "keepdims": keepdims})


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
    return _one(shape_ops.RESHAPE, [t], {"shape": tuple(shape)})


def reshape_(t: Tensor, shape: Iterable[int]) -> Tensor:
    """A view of `t` with a new shape: in-place updates of either are seen through both."""
    return _one(shape_ops.RESHAPE_INPLACE, [t], {"shape": tuple(shape)})


def flatten(t: Tensor) -> Tensor:
    """`t` as a 1-D tensor."""
    return reshape(t, (-1,))


def flatten_(t: Tensor) -> Tensor:
    """A 1-D view of `t`."""
    return reshape_(t, (-1,))


def transpose(t: Tensor, permutation: Iterable[int] | None = None) -> Tensor:
    """`t` with its axes permuted (reversed by default)."""
    perm = None if permutation is None else tuple(permutation)
    return _one(shape_ops.TRANSPOSE, [t], {"permutation": perm})


def transpose_(t: Tensor, permutation: Iterable[int] | None = None) -> Tensor:
    """A view of `t` with its axes permuted (reversed by default)."""
    perm = None if permutation is None else tuple(permutation)
    return _one(shape_ops.TRANSPOSE_INPLACE, [t], {"permutation": perm})


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
    return _one(shape_ops.SLICE_INPLACE, [t], {"slices": _slices(t, start, stop, step, axis)})


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
    return _one(shape_ops.CONCAT_INPLACE, list(ts), {"axis": axis})


def expand(t: Tensor, shape: Iterable[int]) -> Tensor:
    """`t` broadcast to `shape`."""
    return _one(shape_ops.EXPAND, [t], {"shape": tuple(shape)})


def squeeze(t: Tensor, axes: Iterable[int] | None = None) -> Tensor:
    """`t` without its size-1 axes (or just `axes`)."""
    drop = {a % t.rank for a in axes} if axes is not None else {i for i, d in enumerate(t.shape) if d == 1}
    return reshape(t, tuple(d for i, d in enumerate(t.shape) if i not in drop))


def getitem(t: Tensor, key: Any) -> Tensor:
    """`t[key]` for integer and slice keys."""
    key = key if isinstance(key, tuple) else (key,)
    if len(key) > t.rank:
        raise IndexError(f"Too many indices ({len(key)}) for {t}")
    slices: list[tuple[Any, Any, Any]] = []
    drop = []
    for i, k in enumerate(key):
        if isinstance(k, int | np.integer):
            k = int(k) % t.shape[i]
            slices.append((k, k + 1, None))
            drop.append(i)
        elif isinstance(k, builtins.slice):
            slices.append((k.start, k.stop, k.step))
        else:
            raise TypeError(f"Unsupported index {k!r} for {t}: use ints and slices")
    out = _one(shape_ops.SLICE, [t], {"slices": tuple(slices)})
    return squeeze(out, drop) if drop else out


def sum(t: Tensor, axis: int | Iterable[int] | None = None, keepdims: bool = False) -> Tensor:
    """Sum over `axis` (all axes by default)."""
    return _reduce(reduce.REDUCE_SUM, t, axis, keepdims)


def mean(t: Tensor, axis: int | Iterable[int] | None = None, keepdims: bool = False) -> Tensor:
    """Mean over `axis` (all axes by default)."""
    return _reduce(reduce.REDUCE_MEAN, t, axis, keepdims)


def max(t: Tensor, axis: int | Iterable[int] | None = None, keepdims: bool = False) -> Tensor:
    """Maximum over `axis` (all axes by default)."""
    return _reduce(reduce.REDUCE_MAX, t, axis, keepdims)


def min(t: Tensor, axis: int | Iterable[int] | None = None, keepdims: bool = False) -> Tensor:
    """Minimum over `axis` (all axes by default)."""
    return _reduce(reduce.REDUCE_MIN, t, axis, keepdims)


def sumsquare(t: Tensor, axis: int | Iterable[int] | None = None, keepdims: bool = False) -> Tensor:
    """Sum of squares over `axis` (all axes by default)."""
    return sum(mul(t, t), axis, keepdims)


def logsumexp(t: Tensor, axis: int | Iterable[int] | None = None, keepdims: bool = False) -> Tensor:
    """log(sum(exp(t))) over `axis`, computed stably."""
    peak = detach(max(t, axis, keepdims=True))
    out = add(log(sum(exp(sub(t, peak)), axis, keepdims=True)), peak)
    if keepdims:
        return out
    ax = tuple(range(t.rank)) if axis is None else ((axis,) if isinstance(axis, int) else tuple(axis))
    return squeeze(out, [a % t.rank for a in ax])


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
    for length in splits:
        parts.append(slice(t, start, start + length, axis=axis))
        start += length
    return parts


def scaled_add(X: Tensor, Y: Tensor, a: float | Tensor = 1.0, b: float | Tensor = 1.0) -> Tensor:
    """`a * X + b * Y`."""
    return add(mul(_scalar(a, X), X), mul(_scalar(b, X), Y))


def _scalar(value: float | Tensor, like: Tensor) -> Tensor:
    return value if isinstance(value, Tensor) else constant(np.asarray(value, like.dtype.as_numpy()), like.dtype)
