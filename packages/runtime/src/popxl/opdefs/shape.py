"""Ops that rearrange elements: reshape, transpose, slice, concat, expand, and the in-place views of the first four."""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import jax.numpy as jnp
import numpy as np

from popxl.op import Attrs, OpDef, ViewUpdateFn, register
from popxl.opdefs.common import axis_in, broadcast_shapes, vjp_grad
from popxl.tensor import TensorSpec


def _reshape_normalise(specs: Sequence[TensorSpec], attrs: Attrs) -> dict[str, Any]:
    (s,) = specs
    shape = [int(d) for d in attrs["shape"]]
    n = math.prod(s.shape)
    if shape.count(-1) > 1 or any(d < -1 for d in shape):
        raise ValueError(f"Cannot reshape a tensor of shape {s.shape} to {tuple(attrs['shape'])}")
    if shape.count(-1) == 1:
        known = math.prod(d for d in shape if d != -1)
        shape[shape.index(-1)] = n // known if known else 0
    if math.prod(shape) != n:
        raise ValueError(f"Cannot reshape a tensor of shape {s.shape} to {tuple(attrs['shape'])}")
    return {**attrs, "shape": tuple(shape)}


RESHAPE = register(
    OpDef(
        "reshape",
        lambda specs, attrs: [TensorSpec(attrs["shape"], specs[0].dtype)],
        lambda ctx, attrs, x: [x.reshape(attrs["shape"])],
        grad=vjp_grad(linear=True),
        normalise=_reshape_normalise,
    )
)


def _transpose_normalise(specs: Sequence[TensorSpec], attrs: Attrs) -> dict[str, Any]:
    (s,) = specs
    perm = attrs["permutation"]
    perm = tuple(reversed(range(len(s.shape)))) if perm is None else tuple(int(p) for p in perm)
    if sorted(perm) != list(range(len(s.shape))):
        raise ValueError(f"{perm} is not a permutation of the axes of a tensor of shape {s.shape}")
    return {**attrs, "permutation": perm}


TRANSPOSE = register(
    OpDef(
        "transpose",
        lambda specs, attrs: [TensorSpec(tuple(specs[0].shape[p] for p in attrs["permutation"]), specs[0].dtype)],
        lambda ctx, attrs, x: [jnp.transpose(x, attrs["permutation"])],
        grad=vjp_grad(linear=True),
        normalise=_transpose_normalise,
    )
)


def _slice_normalise(specs: Sequence[TensorSpec], attrs: Attrs) -> dict[str, Any]:
    (s,) = specs
    given = tuple(attrs["slices"])
    if len(given) > len(s.shape):
        raise ValueError(f"Too many slices ({len(given)}) for a tensor of shape {s.shape}")
    full = given + ((None, None, None),) * (len(s.shape) - len(given))
    slices = []
    for (start, stop, step), d in zip(full, s.shape):
        if step == 0:
            raise ValueError(f"A slice step cannot be zero (slicing a tensor of shape {s.shape})")
        slices.append(slice(start, stop, step).indices(d))
    return {**attrs, "slices": tuple(slices)}


def _python_slice(start: int, stop: int, step: int) -> slice:
    # `slice.indices` gives stop -1 for "before index 0" with a negative step; as a slice that means "the last".
    return slice(start, None if stop < 0 else stop, step)


def _slice_infer(specs: Sequence[TensorSpec], attrs: Attrs) -> list[TensorSpec]:
    shape = tuple(len(range(*se)) for se in attrs["slices"])
    return [TensorSpec(shape, specs[0].dtype)]


SLICE = register(
    OpDef(
        "slice",
        _slice_infer,
        lambda ctx, attrs, x: [x[tuple(_python_slice(*se) for se in attrs["slices"])]],
        grad=vjp_grad(linear=True),
        normalise=_slice_normalise,
    )
)


def _concat_normalise(specs: Sequence[TensorSpec], attrs: Attrs) -> dict[str, Any]:
    if len({s.dtype for s in specs}) != 1:
        raise TypeError(f"All inputs to a concat operation must have the same type: {[s.dtype.name for s in specs]}")
    rank = len(specs[0].shape)
    axis = axis_in("concat", attrs["axis"], rank)
    for s in specs:
        if len(s.shape) != rank or any(d != e for i, (d, e) in enumerate(zip(s.shape, specs[0].shape)) if i != axis):
            raise ValueError(f"concat along axis {axis} needs matching shapes, got {[x.shape for x in specs]}")
    return {**attrs, "axis": axis}


def _concat_infer(specs: Sequence[TensorSpec], attrs: Attrs) -> list[TensorSpec]:
    axis = attrs["axis"]
    shape = list(specs[0].shape)
    shape[axis] = sum(s.shape[axis] for s in specs)
    return [TensorSpec(tuple(shape), specs[0].dtype)]


CONCAT = register(
    OpDef(
        "concat",
        _concat_infer,
        lambda ctx, attrs, *xs: [jnp.concatenate(xs, axis=attrs["axis"])],
        grad=vjp_grad(linear=True),
        normalise=_concat_normalise,
    )
)


def _expand_normalise(specs: Sequence[TensorSpec], attrs: Attrs) -> dict[str, Any]:
    (s,) = specs
    try:
        shape = broadcast_shapes(s.shape, tuple(int(d) for d in attrs["shape"]))
    except ValueError as e:
        raise ValueError(f"Cannot expand shape {s.shape} to {tuple(attrs['shape'])}") from e
    return {**attrs, "shape": shape}


EXPAND = register(
    OpDef(
        "expand",
        lambda specs, attrs: [TensorSpec(attrs["shape"], specs[0].dtype)],
        lambda ctx, attrs, x: [jnp.broadcast_to(x, attrs["shape"])],
        grad=vjp_grad(linear=True),
        normalise=_expand_normalise,
        departure="not exported by popxl.ops",
    )
)


def _subsample_normalise(specs: Sequence[TensorSpec], attrs: Attrs) -> dict[str, Any]:
    (s,) = specs
    strides = [int(v) for v in attrs["strides"]]
    if len(strides) > len(s.shape):
        raise ValueError(f"subsample: {len(strides)} strides for a tensor of rank {len(s.shape)}")
    if any(v < 1 for v in strides):
        raise ValueError(f"subsample strides must be >= 1, got {strides}")
    return {**attrs, "strides": tuple(strides + [1] * (len(s.shape) - len(strides)))}


SUBSAMPLE = register(
    OpDef(
        "subsample",
        lambda specs, attrs: [
            TensorSpec(tuple(-(-d // k) for d, k in zip(specs[0].shape, attrs["strides"])), specs[0].dtype)
        ],
        lambda ctx, attrs, x: [x[tuple(slice(None, None, k) for k in attrs["strides"])]],
        grad=vjp_grad(linear=True),
        normalise=_subsample_normalise,
    )
)


def _view(opdef: OpDef, update: ViewUpdateFn) -> OpDef:
    """The in-place form of `opdef`, whose output is a view of its inputs (popxl's `reshape_`, `slice_`, ...)."""
    return register(replace(opdef, name=opdef.name + "_", aliasing=replace(opdef.aliasing, view_update=update)))


def _slice_update(attrs: Attrs, xs: Sequence[Any], view: Any) -> list[Any]:
    return [xs[0].at[tuple(_python_slice(*se) for se in attrs["slices"])].set(view)]


def _concat_update(attrs: Attrs, xs: Sequence[Any], view: Any) -> list[Any]:
    bounds = list(itertools.accumulate(x.shape[attrs["axis"]] for x in xs))[:-1]
    return list(jnp.split(view, bounds, axis=attrs["axis"]))


RESHAPE_INPLACE = _view(RESHAPE, lambda attrs, xs, view: [view.reshape(xs[0].shape)])
TRANSPOSE_INPLACE = _view(
    TRANSPOSE, lambda attrs, xs, view: [jnp.transpose(view, [int(i) for i in np.argsort(attrs["permutation"])])]
)
SLICE_INPLACE = _view(SLICE, _slice_update)
CONCAT_INPLACE = _view(CONCAT, _concat_update)
