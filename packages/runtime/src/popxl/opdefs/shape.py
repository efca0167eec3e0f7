"""Ops that rearrange elements: reshape, transpose, slice, concat, expand."""

from __future__ import annotations

import math
from collections.abc import Sequence

import jax.numpy as jnp
import numpy as np

from popxl.op import Attrs, OpDef, register
from popxl.opdefs.common import same_dtype, vjp_grad
from popxl.tensor import TensorSpec


def _reshape_infer(specs: Sequence[TensorSpec], attrs: Attrs) -> list[TensorSpec]:
    (s,) = specs
    shape = list(attrs["shape"])
    n = math.prod(s.shape)
    if shape.count(-1) == 1:
        known = math.prod(d for d in shape if d != -1)
        shape[shape.index(-1)] = n // known if known else 0
    if math.prod(shape) != n:
        raise ValueError(f"Cannot reshape a tensor of shape {s.shape} to {tuple(attrs['shape'])}")
    attrs["shape"] = tuple(shape)
    return [TensorSpec(tuple(shape), s.dtype)]


RESHAPE = register(
    OpDef("reshape", _reshape_infer, lambda ctx, op, x: [x.reshape(op.attrs["shape"])], grad=vjp_grad(linear=True))
)


def _transpose_infer(specs: Sequence[TensorSpec], attrs: Attrs) -> list[TensorSpec]:
    (s,) = specs
    perm = attrs["permutation"]
    perm = tuple(reversed(range(len(s.shape)))) if perm is None else tuple(perm)
    if sorted(perm) != list(range(len(s.shape))):
        raise ValueError(f"{perm} is not a permutation of the axes of a tensor of shape {s.shape}")
    attrs["permutation"] = perm
    return [TensorSpec(tuple(s.shape[p] for p in perm), s.dtype)]


TRANSPOSE = register(
    OpDef(
        "transpose",
        _transpose_infer,
        lambda ctx, op, x: [jnp.transpose(x, op.attrs["permutation"])],
        grad=vjp_grad(linear=True),
    )
)


def _slice_infer(specs: Sequence[TensorSpec], attrs: Attrs) -> list[TensorSpec]:
    (s,) = specs
    index = tuple(slice(*se) for se in attrs["slices"])
    if len(index) > len(s.shape):
        raise ValueError(f"Too many slices ({len(index)}) for a tensor of shape {s.shape}")
    shape = np.empty(s.shape, np.int8)[index].shape
    return [TensorSpec(shape, s.dtype)]


SLICE = register(
    OpDef(
        "slice",
        _slice_infer,
        lambda ctx, op, x: [x[tuple(slice(*se) for se in op.attrs["slices"])]],
        grad=vjp_grad(linear=True),
    )
)


def _concat_infer(specs: Sequence[TensorSpec], attrs: Attrs) -> list[TensorSpec]:
    dt = same_dtype("concat", specs)
    rank = len(specs[0].shape)
    axis = attrs["axis"] % rank
    attrs["axis"] = axis
    for s in specs:
        if len(s.shape) != rank or any(d != e for i, (d, e) in enumerate(zip(s.shape, specs[0].shape)) if i != axis):
            raise ValueError(f"concat along axis {axis} needs matching shapes, got {[x.shape for x in specs]}")
    shape = list(specs[0].shape)
    shape[axis] = sum(s.shape[axis] for s in specs)
    return [TensorSpec(tuple(shape), dt)]


CONCAT = register(
    OpDef(
        "concat",
        _concat_infer,
        lambda ctx, op, *xs: [jnp.concatenate(xs, axis=op.attrs["axis"])],
        grad=vjp_grad(linear=True),
    )
)


def _expand_infer(specs: Sequence[TensorSpec], attrs: Attrs) -> list[TensorSpec]:
    (s,) = specs
    try:
        shape = tuple(np.broadcast_shapes(s.shape, tuple(attrs["shape"])))
    except ValueError as e:
        raise ValueError(f"Cannot expand shape {s.shape} to {tuple(attrs['shape'])}") from e
    attrs["shape"] = shape
    return [TensorSpec(shape, s.dtype)]


EXPAND = register(
    OpDef(
        "expand",
        _expand_infer,
        lambda ctx, op, x: [jnp.broadcast_to(x, op.attrs["shape"])],
        grad=vjp_grad(linear=True),
    )
)
