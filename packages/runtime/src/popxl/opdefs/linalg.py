"""Matrix multiplication."""

from __future__ import annotations

from collections.abc import Sequence

import jax.numpy as jnp
import numpy as np

from popxl.op import Attrs, OpDef, register
from popxl.opdefs.common import same_dtype, vjp_grad
from popxl.tensor import TensorSpec


def _infer(specs: Sequence[TensorSpec], attrs: Attrs) -> list[TensorSpec]:
    a, b = specs
    dt = same_dtype("matmul", specs)
    if a.shape == () or b.shape == ():
        raise ValueError(f"matmul needs inputs of rank >= 1, got shapes {a.shape} and {b.shape}")
    try:
        out = np.matmul(np.empty(a.shape, np.int8), np.empty(b.shape, np.int8)).shape
    except ValueError as e:
        raise ValueError(f"matmul shapes {a.shape} and {b.shape} do not match") from e
    return [TensorSpec(out, dt)]


MATMUL = register(
    OpDef(
        "matmul",
        _infer,
        lambda ctx, op, a, b: [jnp.matmul(a, b, preferred_element_type=a.dtype)],
        grad=vjp_grad({0: (1,), 1: (0,)}),
    )
)
