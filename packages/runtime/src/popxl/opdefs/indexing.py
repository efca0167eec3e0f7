"""Indexing ops: gather (grouped too), dynamic slices and updates, one-hot encoding, arg-max and arg-min,
scatter and scatter-reduce.

Every run-time index is checked when the Session has checks on (the default): an index out of its range
makes `Session.run` raise `popxl.OutOfRangeError` naming the op and the index, and change nothing. With
`checks=False` each op does what XLA does with such an index, as its `popxl.ops` docstring says: gathers
and dynamic slices and updates clamp it, scatters drop the entry, one-hot encodings and nll labels give
no class.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import jax
import jax.numpy as jnp

from popxl import dtypes
from popxl.op import CHECK_RESULT, Attrs, OpDef, Resource, register
from popxl.opdefs.common import axis_in, modifies_first, vjp_grad
from popxl.tensor import TensorSpec

if TYPE_CHECKING:
    from popxl.lowering.interpreter import LoweringContext


def _checked(attrs: Attrs) -> frozenset[Resource]:
    return frozenset({CHECK_RESULT})


def _checked_unless_zero_oor(attrs: Attrs) -> frozenset[Resource]:
    return frozenset() if attrs["zero_OOR"] else frozenset({CHECK_RESULT})


def check_indices(ctx: LoweringContext, indices: jax.Array, low: int, high: int, what: str) -> None:
    """Record one run-time check that every entry of `indices` lies in [low, high); the first one outside
    is the offending index."""
    flat = jnp.ravel(indices).astype(jnp.int32)
    if flat.size == 0:
        ctx.check(jnp.bool_(True), what, jnp.int32(0), high, low=low)
        return
    outside = (flat < low) | (flat >= high)
    ctx.check(jnp.logical_not(jnp.any(outside)), what, flat[jnp.argmax(outside)], high, low=low)


def _check_index(what: str, spec: TensorSpec) -> None:
    if not spec.dtype.is_int:
        raise ValueError(f"The indices of {what} must be integers, got {spec.dtype.name}")


def _gather_normalise(specs: Sequence[TensorSpec], attrs: Attrs) -> dict[str, Any]:
    t, indices = specs
    _check_index("gather", indices)
    return {**attrs, "axis": axis_in("gather", attrs["axis"], len(t.shape))}


def _gather_infer(specs: Sequence[TensorSpec], attrs: Attrs) -> list[TensorSpec]:
    t, indices = specs
    axis = attrs["axis"]
    return [TensorSpec((*t.shape[:axis], *indices.shape, *t.shape[axis + 1 :]), t.dtype)]


def _gathered(t: jax.Array, indices: jax.Array, axis: int, zero_oor: bool) -> jax.Array:
    # Indices outside [0, size) are clamped, or give zeros with zero_OOR; negative ones too, as popart
    # reads gather indices as unsigned.
    size = t.shape[axis]
    out = jnp.take(t, jnp.clip(indices, 0, size - 1), axis=axis)
    if zero_oor:
        inside = (indices >= 0) & (indices < size)
        shape = (1,) * axis + indices.shape + (1,) * (t.ndim - axis - 1)
        out = jnp.where(inside.reshape(shape), out, jnp.zeros_like(out))
    return out


def _lower_gather(ctx: LoweringContext, attrs: Attrs, t: jax.Array, indices: jax.Array) -> list[jax.Array]:
    axis = attrs["axis"]
    if not attrs["zero_OOR"]:
        check_indices(ctx, indices, 0, t.shape[axis], f"gather along axis {axis}")
    return [_gathered(t, indices, axis, attrs["zero_OOR"])]


# popart lets transforms set the available memory proportion of its gathers and scatters.
_SETTINGS = frozenset({"available_memory_proportion"})

GATHER = register(
    OpDef(
        "gather",
        _gather_infer,
        _lower_gather,
        grad=vjp_grad({0: (1,)}),
        normalise=_gather_normalise,
        writes=_checked_unless_zero_oor,
        ipu_settings=_SETTINGS,
    )
)


def _slice_normalise(specs: Sequence[TensorSpec], attrs: Attrs) -> dict[str, Any]:
    t = specs[0]
    axes = tuple(axis_in("dynamic_slice", a, len(t.shape)) for a in attrs["axes"])
    return {**attrs, "axes": axes, "sizes": tuple(int(s) for s in attrs["sizes"])}


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


def _starts(t: jax.Array, index: jax.Array, attrs: Attrs) -> list[jax.Array]:
    # Clamped so that the slice fits (JAX alone would first count a negative start from the end).
    starts = [jnp.int32(0)] * t.ndim
    for k, (a, s) in enumerate(zip(attrs["axes"], attrs["sizes"])):
        starts[a] = jnp.clip(index[k].astype(jnp.int32), 0, t.shape[a] - s)
    return starts


def _check_starts(ctx: LoweringContext, what: str, t: jax.Array, index: jax.Array, attrs: Attrs) -> None:
    # A start is valid where the whole slice fits: [0, dim - size]; XLA clamps the others to fit.
    for k, (a, s) in enumerate(zip(attrs["axes"], attrs["sizes"])):
        check_indices(ctx, index[k], 0, t.shape[a] - s + 1, f"{what} along axis {a} (size {s} of {t.shape[a]})")


def _lower_dynamic_slice(ctx: LoweringContext, attrs: Attrs, t: jax.Array, index: jax.Array) -> list[jax.Array]:
    _check_starts(ctx, "dynamic_slice", t, index, attrs)
    sizes = list(t.shape)
    for a, s in zip(attrs["axes"], attrs["sizes"]):
        sizes[a] = s
    return [jax.lax.dynamic_slice(t, _starts(t, index, attrs), sizes)]


DYNAMIC_SLICE = register(
    OpDef(
        "dynamic_slice",
        _slice_infer,
        _lower_dynamic_slice,
        grad=vjp_grad({0: (1,)}),
        normalise=_slice_normalise,
        writes=_checked,
    )
)


def _update_infer(specs: Sequence[TensorSpec], attrs: Attrs) -> list[TensorSpec]:
    t, update, index = specs
    (sliced,) = _slice_infer([t, index], attrs)
    if (update.shape, update.dtype) != (sliced.shape, t.dtype):
        raise ValueError(
            f"dynamic_update needs an update of {t.dtype.name} {sliced.shape}, got {update.dtype.name} {update.shape}"
        )
    return [t]


def _lower_update(ctx: LoweringContext, attrs: Attrs, t: jax.Array, u: jax.Array, i: jax.Array) -> list[jax.Array]:
    _check_starts(ctx, "dynamic_update", t, i, attrs)
    return [jax.lax.dynamic_update_slice(t, u, _starts(t, i, attrs))]


DYNAMIC_UPDATE = register(
    OpDef(
        "dynamic_update",
        _update_infer,
        _lower_update,
        grad=vjp_grad({0: (2,), 1: (2,)}),
        normalise=_slice_normalise,
        writes=_checked,
    )
)

DYNAMIC_UPDATE_INPLACE = register(
    OpDef(
        "dynamic_update_",
        _update_infer,
        _lower_update,
        output_names=("dynamic_update_out",),
        normalise=_slice_normalise,
        modifies=modifies_first,
        writes=_checked,
    )
)


def _onehot_normalise(specs: Sequence[TensorSpec], attrs: Attrs) -> dict[str, Any]:
    t, values = specs
    _check_index("onehot", t)
    if values.shape != (2,):
        raise ValueError(f"onehot values must be [off, on] of shape (2,), got {values.shape}")
    return {**attrs, "axis": axis_in("onehot", attrs["axis"], len(t.shape) + 1)}


def _onehot_infer(specs: Sequence[TensorSpec], attrs: Attrs) -> list[TensorSpec]:
    t, values = specs
    shape = list(t.shape)
    shape.insert(attrs["axis"], attrs["num_classes"])
    return [TensorSpec(tuple(shape), values.dtype)]


def _lower_onehot(ctx: LoweringContext, attrs: Attrs, t: jax.Array, values: jax.Array) -> list[jax.Array]:
    check_indices(ctx, t, 0, attrs["num_classes"], "onehot")
    hot = jax.nn.one_hot(t, attrs["num_classes"], axis=attrs["axis"], dtype=jnp.bool_)
    return [jnp.where(hot, values[1], values[0])]


ONEHOT = register(
    OpDef(
        "onehot",
        _onehot_infer,
        _lower_onehot,
        grad=vjp_grad({1: (0,)}),
        normalise=_onehot_normalise,
        writes=_checked,
    )
)


def _arg_normalise(specs: Sequence[TensorSpec], attrs: Attrs) -> dict[str, Any]:
    return {**attrs, "dim": axis_in("argmax/argmin", attrs["dim"], len(specs[0].shape))}


def _arg_infer(specs: Sequence[TensorSpec], attrs: Attrs) -> list[TensorSpec]:
    (t,) = specs
    dim = attrs["dim"]
    shape = (
        [1 if i == dim else d for i, d in enumerate(t.shape)]
        if attrs["keepdim"]
        else [d for i, d in enumerate(t.shape) if i != dim]
    )
    return [TensorSpec(tuple(shape), dtypes.int32)]


def _arg(fn: Any) -> Any:
    def lower(ctx: LoweringContext, attrs: Attrs, t: jax.Array) -> list[jax.Array]:
        return [fn(t, axis=attrs["dim"], keepdims=attrs["keepdim"]).astype(jnp.int32)]

    return lower


ARGMAX = register(OpDef("argmax", _arg_infer, _arg(jnp.argmax), normalise=_arg_normalise))
ARGMIN = register(OpDef("argmin", _arg_infer, _arg(jnp.argmin), normalise=_arg_normalise))


def _topk_normalise(specs: Sequence[TensorSpec], attrs: Attrs) -> dict[str, Any]:
    (t,) = specs
    axis = axis_in("topk", attrs["axis"], len(t.shape))
    if not 0 < attrs["k"] <= t.shape[axis]:
        raise ValueError(f"topk: k={attrs['k']} must be in [1, {t.shape[axis]}] for axis {axis} of shape {t.shape}")
    return {**attrs, "axis": axis}


def _topk_infer(specs: Sequence[TensorSpec], attrs: Attrs) -> list[TensorSpec]:
    (t,) = specs
    shape = list(t.shape)
    shape[attrs["axis"]] = attrs["k"]
    return [TensorSpec(tuple(shape), t.dtype), TensorSpec(tuple(shape), dtypes.int32)]


def _lower_topk(ctx: LoweringContext, attrs: Attrs, t: jax.Array) -> list[jax.Array]:
    moved = jnp.moveaxis(t, attrs["axis"], -1)
    # Smallest first is the largest of the negation; the order among equal values follows their position.
    values, indices = jax.lax.top_k(moved if attrs["largest"] else -moved, attrs["k"])
    values = values if attrs["largest"] else -values
    return [jnp.moveaxis(values, -1, attrs["axis"]), jnp.moveaxis(indices.astype(jnp.int32), -1, attrs["axis"])]


TOPK = register(
    OpDef(
        "topk",
        _topk_infer,
        _lower_topk,
        grad=vjp_grad(),
        normalise=_topk_normalise,
        output_names=("topk_values", "topk_indices"),
    )
)


def _scatter_normalise(specs: Sequence[TensorSpec], attrs: Attrs) -> dict[str, Any]:
    t, indices, values = specs
    _check_index("scatter", indices)
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
        writes=_checked,
        ipu_settings=_SETTINGS,
    )
)


def _grouped_gather_normalise(specs: Sequence[TensorSpec], attrs: Attrs) -> dict[str, Any]:
    t, indices = specs
    _check_index("groupedgather", indices)
    axis = axis_in("groupedgather", attrs["axis"], len(t.shape))
    groups = attrs["group_size"]
    if groups > 1 and (axis == 0 or t.shape[0] != groups or indices.shape[:1] != (groups,)):
        raise ValueError(
            f"groupedgather with group_size {groups} needs data and indices with a leading group axis of that "
            f"size and a gather axis after it, got data {t.shape}, indices {indices.shape}, axis {axis}"
        )
    return {**attrs, "axis": axis}


def _grouped_gather_infer(specs: Sequence[TensorSpec], attrs: Attrs) -> list[TensorSpec]:
    t, indices = specs
    if attrs["group_size"] == 1:
        return _gather_infer(specs, attrs)
    axis = attrs["axis"]
    return [TensorSpec((*t.shape[:axis], *indices.shape[1:], *t.shape[axis + 1 :]), t.dtype)]


def _lower_grouped_gather(ctx: LoweringContext, attrs: Attrs, t: jax.Array, indices: jax.Array) -> list[jax.Array]:
    if attrs["group_size"] == 1:
        return _lower_gather(ctx, attrs, t, indices)
    axis, zero_oor = attrs["axis"], attrs["zero_OOR"]
    if not zero_oor:
        check_indices(ctx, indices, 0, t.shape[axis], f"groupedgather along axis {axis}")
    return [jax.vmap(lambda tg, ig: _gathered(tg, ig, axis - 1, zero_oor))(t, indices)]


GROUPED_GATHER = register(
    OpDef(
        "groupedgather",
        _grouped_gather_infer,
        _lower_grouped_gather,
        grad=vjp_grad({0: (1,)}),
        normalise=_grouped_gather_normalise,
        writes=_checked_unless_zero_oor,
        ipu_settings=_SETTINGS,
    )
)

SCATTER_REDUCTIONS = ("sum", "min", "max", "none")


def _scatter_reduce_normalise(specs: Sequence[TensorSpec], attrs: Attrs) -> dict[str, Any]:
    data, indices = specs[0], specs[1]
    _check_index("scatter_reduce", indices)
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
        writes=_checked,
        ipu_settings=_SETTINGS,
    )
)
