"""More elementwise ops of `popxl.ops`: rounding, predicates, clipping, activations, and in-place forms."""

from __future__ import annotations

from popxl.op import OpDef, create_op
from popxl.opdefs import elementwise as ew
from popxl.ops.maths import logical_not, logical_or
from popxl.tensor import Tensor


def _one(opdef: OpDef, t: Tensor, **attrs: object) -> Tensor:
    return create_op(opdef, [t], attrs)[0]


def _inplace(opdef: OpDef, t: Tensor, name: str, **attrs: object) -> Tensor:
    # popxl names the in-place forms `<op>_inplace_out` (e.g. python/popxl/ops/relu.py: relu_).
    return create_op(opdef, [t], attrs, names=[name])[0]


def ceil(t: Tensor) -> Tensor:
    """Elementwise ceiling; NaN stays NaN."""
    return _one(ew.CEIL, t)


def floor(t: Tensor) -> Tensor:
    """Elementwise floor; NaN stays NaN."""
    return _one(ew.FLOOR, t)


def sign(t: Tensor) -> Tensor:
    """Elementwise sign: -1, 0 or 1 (0 for NaN)."""
    return _one(ew.SIGN, t)


def isnan(t: Tensor) -> Tensor:
    """Which elements are NaN (bool)."""
    return _one(ew.ISNAN, t)


def isinf(t: Tensor) -> Tensor:
    """Which elements are positive or negative infinity (bool)."""
    return _one(ew.ISINF, t)


def isfinite(t: Tensor) -> Tensor:
    """Which elements are neither NaN nor infinite (bool)."""
    # As popxl (python/popxl/ops/isfinite.py): the result renamed `isfinite_out` by an identity.
    out = logical_not(logical_or(isnan(t), isinf(t)))
    return create_op(ew.IDENTITY, [out], names=["isfinite_out"])[0]


def clip(t: Tensor, min: float = float("-inf"), max: float = float("inf")) -> Tensor:
    """`t` with every element brought into [min, max]; NaN stays NaN."""
    return _one(ew.CLIP, t, min=float(min), max=float(max))


clamp = clip


def swish(t: Tensor) -> Tensor:
    """Elementwise swish, `t * sigmoid(t)`."""
    return _one(ew.SWISH, t)


def geluerf(t: Tensor) -> Tensor:
    """Elementwise GELU with the exact error function."""
    return _one(ew.GELU_ERF, t)


def increment_mod(t: Tensor, increment: float, modulus: float) -> Tensor:
    """`(t + increment)` modulo `modulus`, with the sign of the dividend as in C."""
    return _one(ew.INCREMENT_MOD, t, **_increment_mod_attrs("increment_mod", increment, modulus))


def _increment_mod_attrs(op: str, increment: float, modulus: float) -> dict[str, float]:
    if modulus == 0:
        raise ValueError(f"{op}: modulus must not be zero")
    return {"increment": increment, "modulus": modulus}


def relu_(t: Tensor) -> Tensor:
    """Elementwise max(t, 0), in place."""
    return _inplace(ew.RELU_INPLACE, t, "relu_inplace_out")


def gelu_(t: Tensor) -> Tensor:
    """Elementwise GELU (tanh approximation), in place."""
    return _inplace(ew.GELU_INPLACE, t, "gelu_inplace_out")


def geluerf_(t: Tensor) -> Tensor:
    """Elementwise GELU with the exact error function, in place."""
    return _inplace(ew.GELU_ERF_INPLACE, t, "geluerf_inplace_out")


def exp_(t: Tensor) -> Tensor:
    """Elementwise exponential, in place."""
    return _inplace(ew.EXP_INPLACE, t, "exp_inplace_out")


def swish_(t: Tensor) -> Tensor:
    """Elementwise swish, in place."""
    return _inplace(ew.SWISH_INPLACE, t, "swish_inplace_out")


def increment_mod_(t: Tensor, increment: float, modulus: float) -> Tensor:
    """`increment_mod`, in place."""
    attrs = _increment_mod_attrs("increment_mod_", increment, modulus)
    return _inplace(ew.INCREMENT_MOD_INPLACE, t, "increment_mod_inplace_out", **attrs)


def detach_(t: Tensor) -> Tensor:
    """`t`, in place, with no gradient flowing through the result."""
    return _one(ew.DETACH_INPLACE, t)
