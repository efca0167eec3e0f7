"""Matrix multiplication."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

import jax
import jax.numpy as jnp

from popxl import dtypes
from popxl.op import Attrs, OpDef, PopartFacts, register
from popxl.opdefs.common import broadcast_shapes, vjp_grad
from popxl.tensor import TensorSpec

if TYPE_CHECKING:
    from popxl.lowering.interpreter import LoweringContext


def matmul_shape(a: tuple[int, ...], b: tuple[int, ...]) -> tuple[int, ...]:
    """NumPy's matmul output shape for operands of shapes `a` and `b`, or a ValueError."""
    if a == () or b == ():
        raise ValueError(f"matmul needs inputs of rank >= 1, got shapes {a} and {b}")
    # A vector operand is a matrix with a 1 prepended (lhs) or appended (rhs), dropped again afterwards.
    lhs = (1, *a) if len(a) == 1 else a
    rhs = (*b, 1) if len(b) == 1 else b
    if lhs[-1] != rhs[-2]:
        raise ValueError(f"matmul shapes {a} and {b} do not match: {lhs[-1]} != {rhs[-2]}")
    try:
        batch = broadcast_shapes(lhs[:-2], rhs[:-2])
    except ValueError as e:
        raise ValueError(f"matmul shapes {a} and {b} do not match: batch axes do not broadcast") from e
    return (*batch, *lhs[-2:-1][len(a) == 1 :], *rhs[-1:][len(b) == 1 :])


def _infer(specs: Sequence[TensorSpec], attrs: Attrs) -> list[TensorSpec]:
    a, b = specs
    # As popart: the result has the left operand's type unless an output type is asked for.
    out = attrs.get("output_type") or a.dtype
    return [TensorSpec(matmul_shape(a.shape, b.shape), out)]


def _lower(ctx: LoweringContext, attrs: Attrs, a: jax.Array, b: jax.Array) -> list[jax.Array]:
    out = (attrs.get("output_type") or dtypes.as_dtype(a.dtype)).as_numpy()
    if a.dtype != b.dtype:
        common = jnp.promote_types(a.dtype, b.dtype)
        a, b = a.astype(common), b.astype(common)
    return [jnp.matmul(a, b, preferred_element_type=a.dtype).astype(out)]


def _flops(in_specs: Sequence[TensorSpec], out_specs: Sequence[TensorSpec], attrs: Attrs) -> int:
    # A multiplication and an addition per contracted element (the left operand's last axis) of each output.
    return 2 * in_specs[0].shape[-1] * math.prod(out_specs[0].shape)


MATMUL = register(
    OpDef(
        "matmul",
        _infer,
        _lower,
        grad=vjp_grad({0: (1,), 1: (0,)}),
        popart=PopartFacts(
            flops=_flops,
            op_type="MatMul",
            ipu_settings=frozenset({"available_memory_proportion", "fully_connected_pass"}),
        ),
    )
)
