"""Indexing ops: gather, dynamic slices and updates, one-hot encoding, arg-max and arg-min."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp

from popxl import dtypes
from popxl.op import Attrs, Op, OpDef, register
from popxl.opdefs.common import vjp_grad
from popxl.tensor import TensorSpec


def _check_index(what: str, spec: TensorSpec) -> None:
    if not spec.dtype.is_int:
        raise ValueError(f"The indices of {what} must be integers, got {spec.dtype.name}")


def _gather_infer(specs: Sequence[TensorSpec], attrs: Attrs) -> list[TensorSpec]:
    t, indices = specs
    _check_index("gather", indices)
    axis = attrs["axis"] % len(t.shape)
    attrs["axis"] = axis
    return [TensorSpec((*t.shape[:axis], *indices.shape, *t.shape[axis + 1 :]), t.dtype)]


def _lower_gather(ctx: Any, op: Op, t: jax.Array, indices: jax.Array) -> list[jax.Array]:
    axis = op.attrs["axis"]
    size = t.shape[axis]
    out = jnp.take(t, jnp.clip(indices, 0, size - 1), axis=axis)
    if op.attrs["zero_OOR"]:
        inside = (indices >= 0) & (indices < size)
        shape = (1,) * axis + indices.shape + (1,) * (t.ndim - axis - 1)
        out = jnp.where(inside.reshape(shape), out, jnp.zeros_like(out))
    return [out]


GATHER = register(OpDef("gather", _gather_infer, _lower_gather, grad=vjp_grad({0: (1,)})))


def _slice_infer(specs: Sequence[TensorSpec], attrs: Attrs) -> list[TensorSpec]:
    t, index = specs[0], specs[-1]
    _check_index("dynamic_slice", index)
    axes, sizes = attrs["axes"], attrs["sizes"]
    if index.shape != (len(axes),) or len(sizes) != len(axes):
        raise ValueError(
            f"dynamic slicing needs one index and one size per axis {axes}, got index {index.shape} and sizes {sizes}"
        )
    shape = list(t.shape)
    for a, s in zip(axes, sizes):
        if not 0 < s <= shape[a]:
            raise ValueError(f"Slice size {s} does not fit axis {a} of size {shape[a]}")
        shape[a] = s
    return [TensorSpec(tuple(shape), t.dtype)]


def _starts(t: jax.Array, index: jax.Array, axes: Sequence[int]) -> list[jax.Array]:
    starts = [jnp.int32(0)] * t.ndim
    for k, a in enumerate(axes):
        starts[a] = index[k].astype(jnp.int32)
    return starts


def _lower_dynamic_slice(ctx: Any, op: Op, t: jax.Array, index: jax.Array) -> list[jax.Array]:
    sizes = list(t.shape)
    for a, s in zip(op.attrs["axes"], op.attrs["sizes"]):
        sizes[a] = s
    return [jax.lax.dynamic_slice(t, _starts(t, index, op.attrs["axes"]), sizes)]


DYNAMIC_SLICE = register(OpDef("dynamic_slice", _slice_infer, _lower_dynamic_slice, grad=vjp_grad({0: (1,)})))


def _update_infer(specs: Sequence[TensorSpec], attrs: Attrs) -> list[TensorSpec]:
    t, update, index = specs
    (sliced,) = _slice_infer([t, index], attrs)
    if (update.shape, update.dtype) != (sliced.shape, t.dtype):
        raise ValueError(
            f"dynamic_update needs an update of {t.dtype.name} {sliced.shape}, got {update.dtype.name} {update.shape}"
        )
    return [t]


def _update(op: Op, t: jax.Array, update: jax.Array, index: jax.Array) -> jax.Array:
    return jax.lax.dynamic_update_slice(t, update, _starts(t, index, op.attrs["axes"]))


DYNAMIC_UPDATE = register(
    OpDef(
        "dynamic_update",
        _update_infer,
        lambda ctx, op, t, u, i: [_update(op, t, u, i)],
        grad=vjp_grad({0: (2,), 1: (2,)}),
    )
)


def _lower_update_inplace(ctx: Any, op: Op, t: jax.Array, update: jax.Array, index: jax.Array) -> Any:
    out = _update(op, t, update, index)
    return [out], {0: out}


DYNAMIC_UPDATE_INPLACE = register(
    OpDef("dynamic_update_", _update_infer, _lower_update_inplace, output_names=("dynamic_update_out",))
)


def _onehot_infer(specs: Sequence[TensorSpec], attrs: Attrs) -> list[TensorSpec]:
    t, values = specs
    _check_index("onehot", t)
    if values.shape != (2,):
        raise ValueError(f"onehot values must be [off, on] of shape (2,), got {values.shape}")
    axis = attrs["axis"] % (len(t.shape) + 1)
    attrs["axis"] = axis
    shape = list(t.shape)
    shape.insert(axis, attrs["num_classes"])
    return [TensorSpec(tuple(shape), values.dtype)]


def _lower_onehot(ctx: Any, op: Op, t: jax.Array, values: jax.Array) -> list[jax.Array]:
    hot = jax.nn.one_hot(t, op.attrs["num_classes"], axis=op.attrs["axis"], dtype=jnp.bool_)
    return [jnp.where(hot, values[1], values[0])]


ONEHOT = register(OpDef("onehot", _onehot_infer, _lower_onehot, grad=vjp_grad({1: (0,)})))


def _arg_infer(specs: Sequence[TensorSpec], attrs: Attrs) -> list[TensorSpec]:
    (t,) = specs
    dim = attrs["dim"] % len(t.shape)
    attrs["dim"] = dim
    shape = (
        [1 if i == dim else d for i, d in enumerate(t.shape)]
        if attrs["keepdim"]
        else [d for i, d in enumerate(t.shape) if i != dim]
    )
    return [TensorSpec(tuple(shape), dtypes.int32)]


def _arg(fn: Any) -> Any:
    def lower(ctx: Any, op: Op, t: jax.Array) -> list[jax.Array]:
        return [fn(t, axis=op.attrs["dim"], keepdims=op.attrs["keepdim"]).astype(jnp.int32)]

    return lower


ARGMAX = register(OpDef("argmax", _arg_infer, _arg(jnp.argmax)))
ARGMIN = register(OpDef("argmin", _arg_infer, _arg(jnp.argmin)))
