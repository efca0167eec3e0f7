"""Scatter ops: scatter (ONNX ScatterElements) and scatter-reduce.

Their run-time indices are checked as the other indexing ops' are (`popxl.opdefs.indexing`): out of range, with
the Session's checks on, `Session.run` raises `popxl.OutOfRangeError`; with `checks=False` the entry is dropped.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import jax
import jax.numpy as jnp

from popxl.op import Attrs, Effects, OpDef, PopartFacts, register
from popxl.opdefs.common import axis_in, vjp_grad
from popxl.opdefs.indexing import GATHER_SCATTER_SETTINGS, check_index_type, check_indices, writes_check_result
from popxl.tensor import TensorSpec

if TYPE_CHECKING:
    from popxl.lowering.interpreter import LoweringContext


def _scatter_normalise(specs: Sequence[TensorSpec], attrs: Attrs) -> dict[str, Any]:
    t, indices, values = specs
    check_index_type("scatter", indices)
    if not (len(t.shape) == len(indices.shape) == len(values.shape)) or indices.shape != values.shape:
        raise ValueError(
            f"scatter needs indices and values of one shape and the rank of t, got t {t.shape}, "
            f"indices {indices.shape}, values {values.shape}"
        )
    if values.dtype is not t.dtype:
        raise ValueError(f"scatter values must be {t.dtype.name} like t, got {values.dtype.name}")
    return {**attrs, "axis": axis_in("scatter", attrs["axis"], len(t.shape))}


def _lower_scatter(
    ctx: LoweringContext, attrs: Attrs, t: jax.Array, indices: jax.Array, values: jax.Array
) -> list[jax.Array]:
    # ONNX ScatterElements: along `axis` the position comes from `indices`, along the others from the entry itself.
    axis = attrs["axis"]
    size = t.shape[axis]
    # As ONNX, an index in [-size, 0) counts from the end; entries outside [-size, size) write nothing.
    check_indices(ctx, indices, -size, size, f"scatter along axis {axis}")
    grid = list(jnp.indices(indices.shape, sparse=True))
    wrapped = jnp.where(indices < 0, indices + size, indices)
    grid[axis] = jnp.where((wrapped >= 0) & (wrapped < size), wrapped, size)
    return [t.at[tuple(grid)].set(values, mode="drop")]


SCATTER = register(
    OpDef(
        "scatter",
        lambda specs, attrs: [specs[0]],
        _lower_scatter,
        grad=vjp_grad({0: (1,), 2: (1,)}),
        normalise=_scatter_normalise,
        effects=Effects(writes=writes_check_result),
        popart=PopartFacts(ipu_settings=GATHER_SCATTER_SETTINGS),
    )
)


SCATTER_REDUCTIONS = ("sum", "min", "max", "none")


def _scatter_reduce_normalise(specs: Sequence[TensorSpec], attrs: Attrs) -> dict[str, Any]:
    data, indices = specs[0], specs[1]
    check_index_type("scatter_reduce", indices)
    if attrs["reduction"] not in SCATTER_REDUCTIONS:
        raise ValueError(f"The reduction must be one of {list(SCATTER_REDUCTIONS)}, got {attrs['reduction']!r}")
    axis = axis_in("scatter_reduce", attrs["axis"], len(data.shape))
    vector = len(indices.shape) == 1 and indices.shape[0] == data.shape[axis]
    if indices.shape != data.shape and not vector:
        raise ValueError(
            f"scatter_reduce indices of shape {indices.shape} must have the data's shape {data.shape}, or be a "
            f"vector of its axis {axis} (partial broadcasting is not supported, as in popxl)"
        )
    size = attrs["axis_size"]
    if len(specs) == 3:
        init = specs[2]
        size = init.shape[axis] if size is None else size
        want = (*data.shape[:axis], size, *data.shape[axis + 1 :])
        if (init.shape, init.dtype) != (want, data.dtype):
            raise ValueError(f"scatter_reduce initial_values must be {data.dtype.name} {want}, got {init}")
    if size is None:
        raise ValueError("One of initial_values and axis_size must be specified")
    return {**attrs, "axis": axis, "axis_size": int(size)}


def _scatter_reduce_infer(specs: Sequence[TensorSpec], attrs: Attrs) -> list[TensorSpec]:
    data = specs[0]
    axis = attrs["axis"]
    return [TensorSpec((*data.shape[:axis], attrs["axis_size"], *data.shape[axis + 1 :]), data.dtype)]


def _extreme(dtype: Any, highest: bool) -> jax.Array:
    if jnp.issubdtype(dtype, jnp.floating):
        return jnp.array(jnp.inf if highest else -jnp.inf, dtype)
    info = jnp.iinfo(dtype)
    return jnp.array(info.max if highest else info.min, dtype)


def _lower_scatter_reduce(
    ctx: LoweringContext, attrs: Attrs, data: jax.Array, indices: jax.Array, *initial: jax.Array
) -> list[jax.Array]:
    axis, reduction, size = attrs["axis"], attrs["reduction"], attrs["axis_size"]
    out_shape = (*data.shape[:axis], size, *data.shape[axis + 1 :])
    check_indices(ctx, indices, 0, size, f"scatter_reduce along axis {axis}")
    # Entries whose index is outside [0, axis_size), negative ones too, reduce into nothing.
    indices = jnp.where((indices >= 0) & (indices < size), indices, size)
    if indices.ndim == 1 and data.ndim > 1:
        indices = indices.reshape([-1 if i == axis else 1 for i in range(data.ndim)])
    where = list(jnp.indices(data.shape, sparse=True))
    where[axis] = jnp.broadcast_to(indices, data.shape)
    target = tuple(where)
    if initial:
        base = initial[0]
    elif reduction in ("min", "max"):
        base = jnp.full(out_shape, _extreme(data.dtype, highest=reduction == "min"))
    else:
        base = jnp.zeros(out_shape, data.dtype)
    at = base.at[target]
    if reduction == "sum":
        out = at.add(data, mode="drop")
    elif reduction == "max":
        out = at.max(data, mode="drop")
    elif reduction == "min":
        out = at.min(data, mode="drop")
    else:
        out = at.set(data, mode="drop")
    if not initial and reduction in ("min", "max"):
        # Positions no element reaches are zero, as popart fills them.
        hit = jnp.zeros(out_shape, bool).at[target].set(True, mode="drop")
        out = jnp.where(hit, out, jnp.zeros_like(out))
    return [out]


SCATTER_REDUCE = register(
    OpDef(
        "scatter_reduce",
        _scatter_reduce_infer,
        _lower_scatter_reduce,
        grad=vjp_grad(),
        normalise=_scatter_reduce_normalise,
        effects=Effects(writes=writes_check_result),
        popart=PopartFacts(ipu_settings=GATHER_SCATTER_SETTINGS),
    )
)
