"""More reductions of `popxl.ops`: product, median, norms, log of sum, and the cumulative sum."""

from __future__ import annotations

from collections.abc import Iterable

from popxl.op import OpDef, create_op
from popxl.opdefs import reduce
from popxl.opdefs.optimizers import LAMB_SQUARE
from popxl.tensor import Tensor


def _reduce(opdef: OpDef, t: Tensor, axis: int | Iterable[int] | None, keepdims: bool, name: str) -> Tensor:
    ax = axis if axis is None or isinstance(axis, int) else tuple(axis)
    return create_op(opdef, [t], {"axis": ax, "keepdims": keepdims}, names=[name])[0]


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


def cumsum(t: Tensor, dim: int = 0) -> Tensor:
    """Cumulative sum along `dim`."""
    return create_op(reduce.CUMSUM, [t], {"dim": int(dim)})[0]


def lamb_square(t: Tensor) -> Tensor:
    """The sum of squares of every element of `t`, in float32 (LAMB's squared norms)."""
    return create_op(LAMB_SQUARE, [t])[0]


def histogram(t: Tensor, levels: Iterable[float], absolute_of_input: bool) -> Tensor:
    """Counts of the values of `t` (or their magnitudes) below the first level, between consecutive levels
    (each bin including its lower level) and at or above the last, as uint32."""
    attrs = {"levels": tuple(levels), "absolute_of_input": bool(absolute_of_input)}
    return create_op(reduce.HISTOGRAM, [t], attrs)[0]


def batch_norm_inference(
    t: Tensor, scale: Tensor, bias: Tensor, mean: Tensor, var: Tensor, epsilon: float = 1e-5, momentum: float = 0.9
) -> Tensor:
    """`t` (N, C, ...) normalised per channel by the estimates `mean` and `var`, then scaled and shifted;
    `momentum` concerns training and has no effect."""
    attrs = {"epsilon": float(epsilon)}
    # popxl (batch_norm.py): `batch_norm_out`.
    return create_op(reduce.BATCH_NORM_INFERENCE, [t, scale, bias, mean, var], attrs, names=["batch_norm_out"])[0]
