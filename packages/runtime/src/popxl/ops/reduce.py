"""Reductions of `popxl.ops`, with softmax, normalisations and histograms."""

from __future__ import annotations

from collections.abc import Iterable

from popxl.op import OpDef, create_op
from popxl.opdefs import elementwise as ew
from popxl.opdefs import reduce
from popxl.opdefs import shape as shape_ops
from popxl.tensor import Tensor


def _reduce(opdef: OpDef, t: Tensor, axis: int | Iterable[int] | None, keepdims: bool, name: str) -> Tensor:
    ax = axis if axis is None or isinstance(axis, int) else tuple(axis)
    return create_op(opdef, [t], {"axis": ax, "keepdims": keepdims}, names=[name])[0]


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


def prod(t: Tensor, axis: int | Iterable[int] | None = None, keepdims: bool = False) -> Tensor:
    """Product over `axis` (all axes by default)."""
    # popxl (prod.py): `prod_out`.
    return _reduce(reduce.REDUCE_PROD, t, axis, keepdims, "prod_out")


def median(t: Tensor, axis: int | Iterable[int] | None = None, keepdims: bool = False) -> Tensor:
    """Median over `axis` (all axes by default); the lower middle element of an even count, as popxl."""
    # popxl (median.py): `median_out`.
    return _reduce(reduce.REDUCE_MEDIAN, t, axis, keepdims, "median_out")


def l1(t: Tensor, axis: int | Iterable[int] | None = None, keepdims: bool = False) -> Tensor:
    """Sum of magnitudes over `axis` (all axes by default)."""
    # popxl (l1.py): `l1_out`.
    return _reduce(reduce.REDUCE_L1, t, axis, keepdims, "l1_out")


def l2(t: Tensor, axis: int | Iterable[int] | None = None, keepdims: bool = False) -> Tensor:
    """Square root of the sum of squares over `axis` (all axes by default)."""
    # popxl (l2.py): `l2_out`.
    return _reduce(reduce.REDUCE_L2, t, axis, keepdims, "l2_out")


def logsum(t: Tensor, axis: int | Iterable[int] | None = None, keepdims: bool = False) -> Tensor:
    """Log of the sum over `axis` (all axes by default)."""
    # popxl (logsum.py): `logsum_out`.
    return _reduce(reduce.REDUCE_LOG_SUM, t, axis, keepdims, "logsum_out")


def sumsquare(t: Tensor, axis: int | Iterable[int] | None = None, keepdims: bool = False) -> Tensor:
    """Sum of squares over `axis` (all axes by default)."""
    # popxl (sumsquare.py) is one op, `sumsquare_out`; the square is named so as to take no name of popxl's.
    (square,) = create_op(ew.MUL, [t, t], names=["sumsquare_square"])
    return _reduce(reduce.REDUCE_SUM, square, axis, keepdims, "sumsquare_out")


def logsumexp(t: Tensor, axis: int | Iterable[int] | None = None, keepdims: bool = False) -> Tensor:
    """log(sum(exp(t))) over `axis`, computed stably."""
    # popxl (logsumexp.py) is one op, `logsumexp_out`; the steps here are named so as to take no name of
    # popxl's (which a later op of the user's would then find taken).
    (peak,) = create_op(
        ew.DETACH, [_reduce(reduce.REDUCE_MAX, t, axis, True, "logsumexp_max")], names=["logsumexp_peak"]
    )
    (shifted,) = create_op(ew.SUB, [t, peak], names=["logsumexp_shifted"])
    (exps,) = create_op(ew.EXP, [shifted], names=["logsumexp_exp"])
    (total,) = create_op(
        ew.LOG, [_reduce(reduce.REDUCE_SUM, exps, axis, True, "logsumexp_sum")], names=["logsumexp_log"]
    )
    if keepdims:
        return create_op(ew.ADD, [total, peak], names=["logsumexp_out"])[0]
    (out,) = create_op(ew.ADD, [total, peak], names=["logsumexp_kept"])
    ax = tuple(range(t.rank)) if axis is None else ((axis,) if isinstance(axis, int) else tuple(axis))
    drop = {a % t.rank for a in ax}
    kept = tuple(d for i, d in enumerate(out.shape) if i not in drop)
    return create_op(shape_ops.RESHAPE, [out], {"shape": kept}, names=["logsumexp_out"])[0]


def cumsum(t: Tensor, dim: int = 0) -> Tensor:
    """Cumulative sum along `dim`."""
    return create_op(reduce.CUMSUM, [t], {"dim": int(dim)})[0]


def lamb_square(t: Tensor) -> Tensor:
    """The sum of squares of every element of `t`, in float32 (LAMB's squared norms)."""
    return create_op(reduce.LAMB_SQUARE, [t])[0]


def softmax(t: Tensor, axis: int) -> Tensor:
    """Softmax along `axis`."""
    if not -t.rank <= axis < t.rank:
        raise ValueError(f"softmax axis {axis} is out of range for {t}")
    return create_op(reduce.SOFTMAX, [t], {"axis": axis})[0]


def group_norm(t: Tensor, weight: Tensor, bias: Tensor, num_groups: int, eps: float = 1e-5) -> Tensor:
    """Normalise each group of channels of `t` (N, C, ...), then scale and shift per channel."""
    return create_op(reduce.GROUP_NORM, [t, weight, bias], {"num_groups": num_groups, "eps": eps})[0]


def layer_norm(t: Tensor, weight: Tensor, bias: Tensor, eps: float = 1e-5) -> Tensor:
    """Normalise each row of `t` (N, C), then scale and shift per channel."""
    return group_norm(t, weight, bias, 1, eps)


def batch_norm_inference(
    t: Tensor, scale: Tensor, bias: Tensor, mean: Tensor, var: Tensor, epsilon: float = 1e-5, momentum: float = 0.9
) -> Tensor:
    """`t` (N, C, ...) normalised per channel by the estimates `mean` and `var`, then scaled and shifted;
    `momentum` concerns training and has no effect."""
    attrs = {"epsilon": float(epsilon)}
    # popxl (batch_norm.py): `batch_norm_out`.
    return create_op(reduce.BATCH_NORM_INFERENCE, [t, scale, bias, mean, var], attrs, names=["batch_norm_out"])[0]


def histogram(t: Tensor, levels: Iterable[float], absolute_of_input: bool) -> Tensor:
    """Counts of the values of `t` (or their magnitudes) below the first level, between consecutive levels
    (each bin including its lower level) and at or above the last, as uint32."""
    attrs = {"levels": tuple(levels), "absolute_of_input": bool(absolute_of_input)}
    return create_op(reduce.HISTOGRAM, [t], attrs)[0]
