"""Elementwise unary and binary ops, casts and selection."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import jax
import jax.numpy as jnp

from popxl import dtypes
from popxl.op import Aliasing, Attrs, FlopsFn, OpDef, PopartFacts, register
from popxl.opdefs.common import broadcast, like_input, modifies_first, same_dtype, vjp_grad
from popxl.tensor import TensorSpec

if TYPE_CHECKING:
    from popxl.lowering.interpreter import LoweringContext

Fn = Callable[..., jax.Array]


def _unary(name: str, fn: Fn, differentiable: bool = True, departure: str = "") -> OpDef:
    return register(
        OpDef(
            name,
            like_input(0),
            lambda ctx, attrs, x: [fn(x)],
            grad=vjp_grad() if differentiable else None,
            departure=departure,
        )
    )


def _gelu(x: jax.Array) -> jax.Array:
    return jax.nn.gelu(x, approximate=True)


NEGATE = _unary("negate", jnp.negative)
EXP = _unary("exp", jnp.exp)
LOG = _unary("log", jnp.log)
SQRT = _unary("sqrt", jnp.sqrt)
TANH = _unary("tanh", jnp.tanh)
SIGMOID = _unary("sigmoid", jax.nn.sigmoid, departure="not exported by popxl.ops")
RELU = _unary("relu", jax.nn.relu)
GELU = _unary("gelu", _gelu)
ABS = _unary("abs", jnp.abs)
SIN = _unary("sin", jnp.sin)
COS = _unary("cos", jnp.cos)
SQUARE = _unary("square", jnp.square, departure="not exported by popxl.ops")
RECIPROCAL = _unary("reciprocal", jnp.reciprocal, departure="not exported by popxl.ops")
LOGICAL_NOT = _unary("logical_not", jnp.logical_not, differentiable=False)
# popart defines no gradient for these: their derivative is zero almost everywhere.
CEIL = _unary("ceil", jnp.ceil, differentiable=False)
FLOOR = _unary("floor", jnp.floor, differentiable=False, departure="not exported by popxl.ops")
SIGN = _unary("sign", lambda x: jnp.where(jnp.isnan(x), jnp.zeros_like(x), jnp.sign(x)), differentiable=False)
SWISH = _unary("swish", lambda x: x * jax.nn.sigmoid(x))
GELU_ERF = _unary("geluerf", lambda x: jax.nn.gelu(x, approximate=False))


def _predicate(name: str, fn: Fn) -> OpDef:
    return register(
        OpDef(
            name,
            lambda specs, attrs: [TensorSpec(specs[0].shape, dtypes.bool_)],
            lambda ctx, attrs, x: [fn(x)],
        )
    )


ISNAN = _predicate("isnan", jnp.isnan)
ISINF = _predicate("isinf", jnp.isinf)


def _clip(x: jax.Array, attrs: Attrs) -> jax.Array:
    return jnp.minimum(jnp.maximum(x, jnp.asarray(attrs["min"], x.dtype)), jnp.asarray(attrs["max"], x.dtype))


CLIP = register(OpDef("clip", like_input(0), lambda ctx, attrs, x: [_clip(x, attrs)], grad=vjp_grad()))


def _increment_mod(x: jax.Array, attrs: Attrs) -> jax.Array:
    # popart: Rem(x + increment, modulus), the C remainder, in the tensor's own type.
    return jnp.fmod(x + jnp.asarray(attrs["increment"], x.dtype), jnp.asarray(attrs["modulus"], x.dtype))


INCREMENT_MOD = register(OpDef("increment_mod", like_input(0), lambda ctx, attrs, x: [_increment_mod(x, attrs)]))


def _inplace(name: str, fn: Callable[[jax.Array, Attrs], jax.Array]) -> OpDef:
    """The in-place form of an elementwise op: it updates its input, which its output aliases."""
    return register(
        OpDef(
            name,
            like_input(0),
            lambda ctx, attrs, x: [fn(x, attrs)],
            output_names=(name.rstrip("_") + "_out",),
            aliasing=Aliasing(modifies=modifies_first),
        )
    )


RELU_INPLACE = _inplace("relu_", lambda x, a: jax.nn.relu(x))
GELU_INPLACE = _inplace("gelu_", lambda x, a: _gelu(x))
GELU_ERF_INPLACE = _inplace("geluerf_", lambda x, a: jax.nn.gelu(x, approximate=False))
EXP_INPLACE = _inplace("exp_", lambda x, a: jnp.exp(x))
SWISH_INPLACE = _inplace("swish_", lambda x, a: x * jax.nn.sigmoid(x))
INCREMENT_MOD_INPLACE = _inplace("increment_mod_", _increment_mod)
DETACH_INPLACE = _inplace("detach_", lambda x, a: jax.lax.stop_gradient(x))
IDENTITY = register(OpDef("identity", like_input(0), lambda ctx, attrs, x: [x], grad=vjp_grad(linear=True)))
DETACH = register(
    OpDef("detach", like_input(0), lambda ctx, attrs, x: [jax.lax.stop_gradient(x)], grad=lambda gb, op, grads: [None])
)


def _binary_infer(
    name: str, out_dtype: dtypes.dtype | None
) -> Callable[[Sequence[TensorSpec], Attrs], list[TensorSpec]]:
    def infer(specs: Sequence[TensorSpec], attrs: Attrs) -> list[TensorSpec]:
        dt = same_dtype(name, specs)
        return [TensorSpec(broadcast(name, specs), out_dtype or dt)]

    return infer


def _binary(
    name: str,
    fn: Fn,
    grad_needs: dict[int, tuple[int, ...]] | None = None,
    linear: bool = False,
    out_dtype: dtypes.dtype | None = None,
    differentiable: bool = True,
    departure: str = "",
    popart_type: str = "",
    flops: FlopsFn | None = None,
) -> OpDef:
    return register(
        OpDef(
            name,
            _binary_infer(name, out_dtype),
            lambda ctx, attrs, a, b: [fn(a, b)],
            grad=vjp_grad(grad_needs, linear) if differentiable else None,
            departure=departure,
            popart=PopartFacts(op_type=popart_type, flops=flops),
        )
    )


def _per_output_element(in_specs: Sequence[TensorSpec], out_specs: Sequence[TensorSpec], attrs: Attrs) -> int:
    return math.prod(out_specs[0].shape)


def _div(a: jax.Array, b: jax.Array) -> jax.Array:
    if jnp.issubdtype(a.dtype, jnp.integer):
        # C-style truncating division, as popxl defines `/` on integers.
        q = jnp.abs(a) // jnp.abs(b)
        return jnp.where((a < 0) != (b < 0), -q, q).astype(a.dtype)
    return a / b


def _fmod(a: jax.Array, b: jax.Array) -> jax.Array:
    return jnp.fmod(a, b)


# popxl-addons' FLOP estimate counts the four arithmetic kinds, one operation per output element.
ADD = _binary("add", jnp.add, linear=True, popart_type="Add", flops=_per_output_element)
SUB = _binary("sub", jnp.subtract, linear=True, popart_type="Sub", flops=_per_output_element)
MUL = _binary("mul", jnp.multiply, grad_needs={0: (1,), 1: (0,)}, popart_type="Mul", flops=_per_output_element)
DIV = _binary("div", _div, popart_type="Div", flops=_per_output_element)
FMOD = _binary("fmod", _fmod, differentiable=False)


def _pow(a: jax.Array, b: jax.Array) -> jax.Array:
    # Floating powers in float32: a ** (b - 1) and log(a) * a ** b of the gradient stay finite where the result does.
    if not jnp.issubdtype(a.dtype, jnp.floating) or a.dtype == jnp.float32:
        return jnp.power(a, b)
    return jnp.power(a.astype(jnp.float32), b.astype(jnp.float32)).astype(a.dtype)


POW = _binary("pow", _pow)
MAXIMUM = _binary("maximum", jnp.maximum)
MINIMUM = _binary("minimum", jnp.minimum, departure="not exported by popxl.ops")
EQUAL = _binary("equal", jnp.equal, out_dtype=dtypes.bool_, differentiable=False)
GREATER = _binary("greater", jnp.greater, out_dtype=dtypes.bool_, differentiable=False)
LESS = _binary("less", jnp.less, out_dtype=dtypes.bool_, differentiable=False, departure="not exported by popxl.ops")
LOGICAL_AND = _binary("logical_and", jnp.logical_and, out_dtype=dtypes.bool_, differentiable=False)
LOGICAL_OR = _binary("logical_or", jnp.logical_or, out_dtype=dtypes.bool_, differentiable=False)


def _add_inplace(ctx: LoweringContext, attrs: Attrs, a: jax.Array, b: jax.Array) -> list[jax.Array]:
    return [jnp.broadcast_to(a + b, a.shape).astype(a.dtype)]


def _inplace_infer(specs: Sequence[TensorSpec], attrs: Attrs) -> list[TensorSpec]:
    same_dtype("add_", specs)
    if broadcast("add_", specs) != specs[0].shape:
        raise ValueError(f"add_ cannot change the shape of its first input {specs[0].shape}")
    return [specs[0]]


ADD_INPLACE = register(
    OpDef("add_", _inplace_infer, _add_inplace, output_names=("add_out",), aliasing=Aliasing(modifies=modifies_first))
)


def _cast_infer(specs: Sequence[TensorSpec], attrs: Attrs) -> list[TensorSpec]:
    return [TensorSpec(specs[0].shape, attrs["dtype"], specs[0].meta_shape)]


CAST = register(
    OpDef(
        "cast",
        _cast_infer,
        lambda ctx, attrs, x: [x.astype(attrs["dtype"].as_numpy())],
        grad=vjp_grad(linear=True),
    )
)


def _where_infer(specs: Sequence[TensorSpec], attrs: Attrs) -> list[TensorSpec]:
    if specs[0].dtype is not dtypes.bool_:
        raise ValueError(f"The condition of where must be bool, got {specs[0].dtype.name}")
    dt = same_dtype("where", specs[1:])
    return [TensorSpec(broadcast("where", specs), dt)]


WHERE = register(
    OpDef(
        "where",
        _where_infer,
        lambda ctx, attrs, c, a, b: [jnp.where(c, a, b)],
        grad=vjp_grad({1: (0,), 2: (0,)}),
    )
)
