"""In-place updates of `popxl.ops.var_updates`."""

from __future__ import annotations

from popxl.creation import constant
from popxl.op import create_op
from popxl.opdefs.var_updates import VAR_UPDATE
from popxl.tensor import Tensor


def _factor(f: float | Tensor, like: Tensor) -> Tensor:
    return f if isinstance(f, Tensor) else constant(f, like.dtype)


def _update(kind: str, t: Tensor, *inputs: Tensor) -> Tensor:
    name = t.name.split("/")[-1] + "_" + kind
    return create_op(VAR_UPDATE, [t, *inputs], {"kind": kind}, names=[name])[0]


def accumulate_(t: Tensor, X: Tensor, f: float | Tensor = 1.0) -> Tensor:
    """`t += f * X` in place."""
    return _update("accumulate", t, X, _factor(f, t))


def accumulate_square_(t: Tensor, X: Tensor, f: float | Tensor = 1.0) -> Tensor:
    """`t += f * X**2` in place."""
    return _update("accumulate_square", t, X, _factor(f, t))


def accumulate_mean_(t: Tensor, X: Tensor, step: float | Tensor) -> Tensor:
    """Running mean in place: `t = t * step/(step+1) + X/(step+1)`."""
    return _update("accumulate_mean", t, X, _factor(step, t))


def accumulate_moving_average_(t: Tensor, X: Tensor, f: float | Tensor) -> Tensor:
    """`t = f * t + (1 - f) * X` in place."""
    return _update("accumulate_moving_average", t, X, _factor(f, t))


def scaled_add_(X: Tensor, Y: Tensor, a: float | Tensor = 1.0, b: float | Tensor = 1.0) -> Tensor:
    """`X = a * X + b * Y` in place."""
    return _update("scaled_add", X, Y, _factor(a, X), _factor(b, X))


def copy_var_update_(t: Tensor, X: Tensor) -> Tensor:
    """`t = X` in place."""
    return _update("copy", t, X)
