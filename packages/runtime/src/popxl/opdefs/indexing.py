"""Indexing ops: gather (grouped too), dynamic slices and updates, one-hot encoding, arg-max and arg-min, top-k;
the scatters are in `popxl.opdefs.scatter`.

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
from popxl.op import CHECK_RESULT, Aliasing, Attrs, Effects, OpDef, PopartFacts, Resource, register
from popxl.opdefs.common import axis_in, modifies_first, vjp_grad
from popxl.tensor import TensorSpec

if TYPE_CHECKING:
    from popxl.lowering.interpreter import LoweringContext


def writes_check_result(attrs: Attrs) -> frozenset[Resource]:
    """The effect of an op that checks its indices at run time: it writes the check result."""
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


def check_index_type(what: str, spec: TensorSpec) -> None:
    """Refuse indices of `what` that are not integers."""
    if not spec.dtype.is_int:
        raise ValueError(f"The indices of {what} must be integers, got {spec.dtype.name}")


def _gather_normalise(specs: Sequence[TensorSpec], attrs: Attrs) -> dict[str, Any]:
    t, indices = specs
    check_index_type("gather", indices)
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
GATHER_SCATTER_SETTINGS = frozenset({"available_memory_proportion"})

GATHER = register(
    OpDef(
        "gather",
        _gather_infer,
        _lower_gather,
        grad=vjp_grad({0: (1,)}),
        normalise=_gather_normalise,
        effects=Effects(writes=_checked_unless_zero_oor),
        popart=PopartFacts(ipu_settings=GATHER_SCATTER_SETTINGS),
    )
)


def _slice_normalise(specs: Sequence[TensorSpec], attrs: Attrs) -> dict[str, Any]:
    t = specs[0]
    axes = tuple(axis_in("dynamic_slice", a, len(t.shape)) for a in attrs["axes"])
    return {**attrs, "axes": axes, "sizes": tuple(int(s) for s in attrs["sizes"])}


def _slice_infer(specs: Sequence[TensorSpec], attrs: Attrs) -> list[TensorSpec]:
    t, index = specs[0], specs[-1]
    check_index_type("dynamic_slice", index)
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
        effects=Effects(writes=writes_check_result),
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
        effects=Effects(writes=writes_check_result),
    )
)

DYNAMIC_UPDATE_INPLACE = register(
    OpDef(
        "dynamic_update_",
        _update_infer,
        _lower_update,
        output_names=("dynamic_update_out",),
        normalise=_slice_normalise,
        effects=Effects(writes=writes_check_result),
        aliasing=Aliasing(modifies=modifies_first),
    )
)


def _onehot_normalise(specs: Sequence[TensorSpec], attrs: Attrs) -> dict[str, Any]:
    t, values = specs
    check_index_type("onehot", t)
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
        effects=Effects(writes=writes_check_result),
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


def _grouped_gather_normalise(specs: Sequence[TensorSpec], attrs: Attrs) -> dict[str, Any]:
    t, indices = specs
    check_index_type("groupedgather", indices)
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
        effects=Effects(writes=_checked_unless_zero_oor),
        popart=PopartFacts(ipu_settings=GATHER_SCATTER_SETTINGS),
    )
)
