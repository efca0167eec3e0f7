"""Matrix multiplication."""

from __future__ import annotations

from collections.abc import Sequence

import jax.numpy as jnp

from popxl.op import Attrs, OpDef, register
from popxl.opdefs.common import broadcast_shapes, same_dtype, vjp_grad
from popxl.tensor import TensorSpec


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
    return [TensorSpec(matmul_shape(a.shape, b.shape), same_dtype("matmul", specs))]


MATMUL = register(
    OpDef(
        "matmul",
        _infer,
        lambda ctx, attrs, a, b: [jnp.matmul(a, b, preferred_element_type=a.dtype)],
        grad=vjp_grad({0: (1,), 1: (0,)}),
    )
)
