"""Elementwise ops of `popxl.ops`: arithmetic, comparisons, logic, activations, rounding, predicates,
copies and casts, with their in-place forms."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from popxl import context, dtypes, ipu_only
from popxl.creation import constant
from popxl.op import OpDef, create_op
from popxl.opdefs import elementwise as ew
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


def pow(t: Tensor, e: Tensor) -> Tensor:
    """Elementwise `t ** e`."""
    return _one(ew.POW, [t, e])


def maximum(lhs: Tensor, rhs: Tensor) -> Tensor:
    """Elementwise maximum."""
    return _one(ew.MAXIMUM, [lhs, rhs])


def minimum(lhs: Tensor, rhs: Tensor) -> Tensor:
    """Elementwise minimum."""
    return _one(ew.MINIMUM, [lhs, rhs])


def equal(lhs: Tensor, rhs: Tensor) -> Tensor:
    """Elementwise `lhs == rhs` as bool."""
    return _one(ew.EQUAL, [lhs, rhs])


def greater(input: Tensor, other: Tensor) -> Tensor:
    """Elementwise `input > other` as bool."""
    return _one(ew.GREATER, [input, other])


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


def geluerf(t: Tensor) -> Tensor:
    """Elementwise GELU with the exact error function."""
    return _one(ew.GELU_ERF, [t])


def swish(t: Tensor) -> Tensor:
    """Elementwise swish, `t * sigmoid(t)`."""
    return _one(ew.SWISH, [t])


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


def ceil(t: Tensor) -> Tensor:
    """Elementwise ceiling; NaN stays NaN."""
    return _one(ew.CEIL, [t])


def floor(t: Tensor) -> Tensor:
    """Elementwise floor; NaN stays NaN."""
    return _one(ew.FLOOR, [t])


def sign(t: Tensor) -> Tensor:
    """Elementwise sign: -1, 0 or 1 (0 for NaN)."""
    return _one(ew.SIGN, [t])


def isnan(t: Tensor) -> Tensor:
    """Which elements are NaN (bool)."""
    return _one(ew.ISNAN, [t])


def isinf(t: Tensor) -> Tensor:
    """Which elements are positive or negative infinity (bool)."""
    return _one(ew.ISINF, [t])


def isfinite(t: Tensor) -> Tensor:
    """Which elements are neither NaN nor infinite (bool)."""
    # As popxl (python/popxl/ops/isfinite.py): the result renamed `isfinite_out` by an identity.
    out = logical_not(logical_or(isnan(t), isinf(t)))
    return _one(ew.IDENTITY, [out], name="isfinite_out")


def clip(t: Tensor, min: float = float("-inf"), max: float = float("inf")) -> Tensor:
    """`t` with every element brought into [min, max]; NaN stays NaN."""
    return _one(ew.CLIP, [t], {"min": float(min), "max": float(max)})


clamp = clip


def increment_mod(t: Tensor, increment: float, modulus: float) -> Tensor:
    """`(t + increment)` modulo `modulus`, with the sign of the dividend as in C."""
    return _one(ew.INCREMENT_MOD, [t], _increment_mod_attrs("increment_mod", increment, modulus))


def _increment_mod_attrs(op: str, increment: float, modulus: float) -> dict[str, float]:
    if modulus == 0:
        raise ValueError(f"{op}: modulus must not be zero")
    return {"increment": increment, "modulus": modulus}


def relu_(t: Tensor) -> Tensor:
    """Elementwise max(t, 0), in place."""
    # popxl names the in-place forms `<op>_inplace_out` (e.g. python/popxl/ops/relu.py: relu_).
    return _one(ew.RELU_INPLACE, [t], name="relu_inplace_out")


def gelu_(t: Tensor) -> Tensor:
    """Elementwise GELU (tanh approximation), in place."""
    return _one(ew.GELU_INPLACE, [t], name="gelu_inplace_out")


def geluerf_(t: Tensor) -> Tensor:
    """Elementwise GELU with the exact error function, in place."""
    return _one(ew.GELU_ERF_INPLACE, [t], name="geluerf_inplace_out")


def exp_(t: Tensor) -> Tensor:
    """Elementwise exponential, in place."""
    return _one(ew.EXP_INPLACE, [t], name="exp_inplace_out")


def swish_(t: Tensor) -> Tensor:
    """Elementwise swish, in place."""
    return _one(ew.SWISH_INPLACE, [t], name="swish_inplace_out")


def increment_mod_(t: Tensor, increment: float, modulus: float) -> Tensor:
    """`increment_mod`, in place."""
    attrs = _increment_mod_attrs("increment_mod_", increment, modulus)
    return _one(ew.INCREMENT_MOD_INPLACE, [t], attrs, name="increment_mod_inplace_out")


def identity(t: Tensor, output_name: str | None = None) -> Tensor:
    """A copy of `t`, named `output_name` (by default `identity_<t>`)."""
    # popxl (identity.py): an empty or missing `output_name` gives `identity_<t.name>`.
    return _one(ew.IDENTITY, [t], name=output_name or f"identity_{t.name}")


def rename(t: Tensor, name: str) -> Tensor:
    """A copy of `t` named `name`."""
    return _one(ew.IDENTITY, [t], name=name)


def ipu_copy(t: Tensor, destination: int, source: int | None = None) -> Tensor:
    """`t` copied to IPU `destination`: a copy here, recorded as placed on that IPU.

    popxl takes the source IPU from `t`'s producer unless `source` is given; here it only names where the
    copy reads from, so it is recorded (`popxl.ipu_only`) and changes nothing."""
    with context.ipu(destination):
        # popxl: `<t>_c<destination>`, `t.name` with its name scopes (python/popxl/ops/ipu_copy.py).
        out = _one(ew.IDENTITY, [t], name=f"{t.name}_c{destination}")
    ipu_only.record(out, source_ipu=source)
    return out


def detach(t: Tensor) -> Tensor:
    """A copy of `t` through which no gradient flows."""
    return _one(ew.DETACH, [t])


def detach_(t: Tensor) -> Tensor:
    """`t`, in place, with no gradient flowing through the result."""
    return _one(ew.DETACH_INPLACE, [t])


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
