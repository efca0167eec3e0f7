"""In-place updates of `popxl.ops.var_updates`."""

from __future__ import annotations

import numpy as np

from popxl import dtypes, ipu_only
from popxl.creation import constant
from popxl.op import create_op
from popxl.opdefs import elementwise as ew
from popxl.opdefs import var_updates as vu
from popxl.tensor import Tensor


def _factor(f: float | Tensor, like: Tensor) -> Tensor:
    # Factors stay float32 for floating tensors: updates compute in float32 at least, as popart's do.
    dtype = dtypes.float32 if like.dtype.is_floating_point else like.dtype
    return f if isinstance(f, Tensor) else constant(f, dtype)


# popxl names each update's output `<prefix>__<t.name>`.
_PREFIX = {
    "accumulate": "accumulate",
    "accumulate_square": "accumulate_square",
    "accumulate_mean": "accumulate_mean",
    "accumulate_moving_average": "accumulate_moving_avg",
    "accumulate_moving_average_square": "accumulate_moving_avg_square",
    "accumulator_scale": "accumulator_scale",
    "scaled_add": "scaled_add",
    "copy": "updated",
}


def _update(kind: str, t: Tensor, *inputs: Tensor, named_as: str | None = None) -> Tensor:
    """The update `kind` of `t`, its output named as popxl names the update `named_as` (`kind` by default)."""
    name = f"{_PREFIX[named_as or kind]}__{t.name}"
    return create_op(vu.VAR_UPDATE, [t, *inputs], {"kind": kind}, names=[name])[0]


def accumulate_(t: Tensor, X: Tensor, f: float | Tensor = 1.0) -> Tensor:
    """`t += f * X` in place."""
    return _update("accumulate", t, X, _factor(f, t))


def accumulate_square_(t: Tensor, X: Tensor, f: float | Tensor = 1.0) -> Tensor:
    """`t += f * X**2` in place."""
    return _update("accumulate_square", t, X, _factor(f, t))


def accumulate_mean_(t: Tensor, X: Tensor, step: float | Tensor) -> Tensor:
    """Running mean in place: `t = t * step/(step+1) + X/(step+1)`."""
    return _update("accumulate_mean", t, X, _factor(step, t))


def _in_type(x: Tensor, dtype: dtypes.dtype) -> Tensor:
    return x if x.dtype == dtype else create_op(ew.CAST, [x], {"dtype": dtype})[0]


def _moving_average(kind: str, t: Tensor, X: Tensor, f: float | Tensor) -> Tensor:
    if not t.dtype.is_floating_point or t.dtype.itemsize >= 4:
        return _update(kind, t, X, _factor(f, t))
    # A narrower float accumulator (float16): popart casts X to the accumulator's type and applies f and
    # 1 - f, each rounded to that type, so the weights the average gives X are float16 numbers (0.1 is
    # 0.09997559), as are the bias corrections popart's Adam updater divides by.
    x = _in_type(X, t.dtype)
    if kind == "accumulate_moving_average_square":
        x = create_op(ew.MUL, [x, x])[0]
    if isinstance(f, Tensor):
        keep, take = _in_type(f, t.dtype), _in_type(1 - f, t.dtype)
    else:
        f32 = np.float32(f)  # popart's factors are float32 before they meet the accumulator
        keep, take = constant(f32, t.dtype), constant(np.float32(1) - f32, t.dtype)
    return _update("scaled_add", t, x, keep, take, named_as=kind)


def accumulate_moving_average_(t: Tensor, X: Tensor, f: float | Tensor) -> Tensor:
    """`t = f * t + (1 - f) * X` in place.

    A float16 `t` follows popart: `X` is cast to float16, and `f` and `1 - f` are float16 numbers.
    """
    return _moving_average("accumulate_moving_average", t, X, f)


def scaled_add_(X: Tensor, Y: Tensor, a: float | Tensor = 1.0, b: float | Tensor = 1.0) -> Tensor:
    """`X = a * X + b * Y` in place."""
    return _update("scaled_add", X, Y, _factor(a, X), _factor(b, X))


def copy_var_update_(t: Tensor, X: Tensor) -> Tensor:
    """`t = X` in place."""
    return _update("copy", t, X)


def accumulate_moving_average_square_(t: Tensor, X: Tensor, f: float | Tensor) -> Tensor:
    """`t = f * t + (1 - f) * X**2` in place, a float16 `t` as in `accumulate_moving_average_`."""
    return _moving_average("accumulate_moving_average_square", t, X, f)


def accumulator_scale_(t: Tensor, f: float | Tensor) -> Tensor:
    """`t = f * t` in place."""
    return _update("accumulator_scale", t, _factor(f, t))


def accumulator_zero_(t: Tensor) -> Tensor:
    """`t = 0` in place."""
    return accumulator_scale_(t, 0.0)


def sparse_accumulate_(
    t: Tensor, X: Tensor, indices: Tensor, axis: int = 0, f: float | Tensor | None = None, W: Tensor | None = None
) -> Tensor:
    """Add each slice of `X` (times `f`) to the slice of `t` that `indices` names along `axis`, in place.

    `X` holds the slices as a gather along `axis` would give them; repeated indices add up. An index outside
    [0, size) makes a checked run raise `popxl.OutOfRangeError`; with `checks=False` its slice adds to nothing.
    `W` only guides tile layout on an IPU: it is recorded (`popxl.ipu_only`) and changes nothing here.
    """
    inputs = [t, X, indices] + ([_factor(f, t)] if f is not None else [])
    name = f"sparse_accumulate__{t.name}"
    out = create_op(vu.SPARSE_ACCUMULATE, inputs, {"axis": axis}, names=[name])[0]
    ipu_only.record(out, tile_layout_reference=W)
    return out


def _scalar(value: float | Tensor | None, default: float) -> Tensor:
    if isinstance(value, Tensor):
        return value
    return constant(default if value is None else value, dtypes.float32)


def _updater(
    mode: str,
    m: Tensor,
    v: Tensor,
    weight: Tensor | None,
    time_step: Tensor | None,
    weight_decay: float | Tensor | None,
    beta1: float | Tensor | None,
    beta2: float | Tensor | None,
    epsilon: float | Tensor,
) -> Tensor:
    # The bias-corrected modes ("adam", "lamb": a time step was given) need both betas.
    if mode in ("adam", "lamb") and (beta1 is None or beta2 is None):
        raise ValueError("Bias correction requires both beta1 and beta2 to not be None.")
    decays = isinstance(weight_decay, Tensor) or (weight_decay is not None and weight_decay != 0.0)
    if decays and weight is None:
        raise ValueError("Weight decay requires weight to not be None.")
    use_weight = decays and weight is not None
    inputs = [m, v, *([weight] if use_weight and weight is not None else [])]
    inputs += [time_step] if time_step is not None else []
    inputs += [_scalar(weight_decay, 0.0), _scalar(beta1, 0.0), _scalar(beta2, 0.0), _scalar(epsilon, 1e-7)]
    attrs = {"mode": mode, "weight": use_weight, "step": time_step is not None}
    return create_op(vu.ADAM_UPDATER, inputs, attrs)[0]


def adam_updater(
    acc_first_order: Tensor,
    acc_second_order: Tensor,
    weight: Tensor | None = None,
    time_step: Tensor | None = None,
    weight_decay: float | Tensor | None = None,
    beta1: float | Tensor | None = None,
    beta2: float | Tensor | None = None,
    epsilon: float | Tensor = 1e-07,
) -> Tensor:
    """Adam's update term `m̂ / (sqrt(v̂) + eps) + wd * w`, bias-corrected when `time_step` is given.

    `time_step` is incremented in place first, and the corrections use the new step.
    """
    mode = "adam" if time_step is not None else "adam_no_bias"
    return _updater(mode, acc_first_order, acc_second_order, weight, time_step, weight_decay, beta1, beta2, epsilon)


def lamb_updater(
    acc_first_order: Tensor,
    acc_second_order: Tensor,
    weight: Tensor | None = None,
    time_step: Tensor | None = None,
    weight_decay: float | Tensor | None = None,
    beta1: float | Tensor | None = None,
    beta2: float | Tensor | None = None,
    epsilon: float | Tensor = 1e-07,
) -> Tensor:
    """LAMB's update term: the same as Adam's (the trust ratio is applied by `adam_var_update`)."""
    mode = "lamb" if time_step is not None else "lamb_no_bias"
    return _updater(mode, acc_first_order, acc_second_order, weight, time_step, weight_decay, beta1, beta2, epsilon)


def adamax_updater(
    acc_first_order: Tensor,
    acc_second_order: Tensor,
    weight: Tensor | None = None,
    time_step: Tensor | None = None,
    weight_decay: float | Tensor | None = None,
    beta1: float | Tensor = 0.9,
    epsilon: float | Tensor = 1e-07,
) -> Tensor:
    """AdaMax's update term `m̂ / (u + eps) + wd * w` (`u` the infinity-norm moment), `m` bias-corrected."""
    if time_step is None:
        raise ValueError("AdaMax requires time_step to not be None.")
    return _updater("adamax", acc_first_order, acc_second_order, weight, time_step, weight_decay, beta1, 0.0, epsilon)


def adam_var_update(
    t: Tensor,
    x: Tensor,
    r1: Tensor,
    r2: Tensor,
    learning_rate: float | Tensor | None = None,
    max_weight_norm: float | Tensor | None = None,
) -> Tensor:
    """`t -= lr * ratio * x` in place, `ratio` the LAMB trust ratio `min(sqrt(r1), mwn) / sqrt(r2)`.

    `r1` and `r2` are the squared norms of the weight and of the update term; the
    ratio is 1 where either is 0 or the max weight norm is 0 (plain Adam).
    """
    inputs = [t, x, r1, r2, _scalar(learning_rate, 0.0), _scalar(max_weight_norm, 0.0)]
    return create_op(vu.ADAM_VAR_UPDATE, inputs, names=["adam_var_update_out"])[0]
