"""Tensor's operators and op-building methods, set on `popxl.Tensor` from the ops layer.

Every op takes and makes Tensors, so `popxl.tensor` sits below the ops and cannot import them without
an import circle. As JAX sets its array methods on `jax.Array` from its numpy layer
(`jax/_src/numpy/array_methods.py`), `popxl.ops` sets these on Tensor when it is imported, which
`import popxl` does. `popxl.tensor` declares each of them, with its signature, under
`if TYPE_CHECKING:` in the class, so that type checkers see them on Tensor; `METHODS` must name
exactly those (a test holds the two together).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from popxl.creation import constant
from popxl.ops import elementwise, linalg, shape
from popxl.ops.elementwise import ipu_copy
from popxl.tensor import Tensor

__all__ = ["METHODS", "attach"]


def _operand(like: Tensor, value: Any) -> Tensor:
    """`value` as a tensor: itself if it is one, else a constant of `like`'s dtype."""
    if isinstance(value, Tensor):
        return value
    data = np.asarray(value)
    if data.size == 0:
        raise ValueError(f"Operand {value!r} of an op with {like} has no elements.")
    return constant(data.astype(like.dtype.as_numpy()), like.dtype)


def _left(op: Callable[[Tensor, Tensor], Tensor]) -> Callable[[Tensor, Any], Tensor]:
    def method(self: Tensor, other: Any) -> Tensor:
        return op(self, _operand(self, other))

    return method


def _right(op: Callable[[Tensor, Tensor], Tensor]) -> Callable[[Tensor, Any], Tensor]:
    def method(self: Tensor, other: Any) -> Tensor:
        return op(_operand(self, other), self)

    return method


def _iadd(self: Tensor, other: Any) -> Tensor:
    # As in popxl, the name keeps this tensor, whose value the add updates in place.
    elementwise.add_(self, _operand(self, other))
    return self


# Operators build ops in the current graph; non-tensor operands take this tensor's dtype.
_BINARY: dict[str, Callable[[Tensor, Tensor], Tensor]] = {
    "add": elementwise.add,
    "sub": elementwise.sub,
    "mul": elementwise.mul,
    "truediv": elementwise.div,
    "mod": elementwise.fmod,
    "pow": elementwise.pow,
    "and": elementwise.logical_and,
    "or": elementwise.logical_or,
    "matmul": linalg.matmul,
}

# The methods that are one op on this tensor are the op itself, bound to it.
METHODS: dict[str, Callable[..., Tensor]] = {
    **{f"__{name}__": _left(op) for name, op in _BINARY.items()},
    **{f"__r{name}__": _right(op) for name, op in _BINARY.items()},
    "__iadd__": _iadd,
    "__neg__": elementwise.negate,
    "__invert__": elementwise.logical_not,
    "__getitem__": shape.getitem,
    "reshape": shape.reshape,
    "reshape_": shape.reshape_,
    "transpose": shape.transpose,
    "transpose_": shape.transpose_,
    "flatten": shape.flatten,
    "flatten_": shape.flatten_,
    "detach": elementwise.detach,
    "detach_": elementwise.detach_,
    "copy_to_ipu": ipu_copy,
}


def attach() -> None:
    """Set `METHODS` on Tensor."""
    for name, method in METHODS.items():
        setattr(Tensor, name, method)
