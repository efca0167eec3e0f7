"""Collectives across the replicas of a group, and replicated tensor sharding."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import jax
import jax.numpy as jnp
import numpy as np

from popxl.creation import constant
from popxl.errors import AutodiffError
from popxl.op import Aliasing, Attrs, Effects, Op, OpDef, create_op, register
from popxl.opdefs.common import modifies_first
from popxl.opdefs.shape import RESHAPE
from popxl.replica_grouping import ReplicaGrouping
from popxl.tensor import Tensor, TensorSpec

if TYPE_CHECKING:
    from popxl.grad_builder import GradBuilder
    from popxl.lowering.interpreter import LoweringContext

REDUCE_OPS = ("add", "mean", "mul", "min", "max", "and", "or", "square_add", "local")


def _check_group(attrs: Attrs) -> None:
    g = attrs["group"]
    if not g.is_const:
        raise NotImplementedError(f"Collectives need a grouping with a constant stride, got {g}")


def group_of(attrs: Attrs) -> tuple[ReplicaGrouping]:
    """The grouping of a collective: its `group` attr."""
    return (attrs["group"],)


def all_reduce_values(ctx: LoweringContext, x: jax.Array, op: str, group: ReplicaGrouping) -> jax.Array:
    """`x` reduced with `op` over the replicas of `group` (for use by lowerings)."""
    axes = ctx.group_axes(group)
    if op == "local":  # no communication: each replica keeps its own value
        return x
    if not axes:
        return x * x if op == "square_add" else x
    if op == "add":
        return jax.lax.psum(x, axes)
    if op in ("mean", "mul"):  # popxl maps the 'mul' collective to mean
        return jax.lax.pmean(x, axes)
    if op == "square_add":
        return jax.lax.psum(x * x, axes)
    if op in ("min", "and"):
        return jax.lax.pmin(x, axes)
    return jax.lax.pmax(x, axes)


def _like(specs: Sequence[TensorSpec], attrs: Attrs) -> list[TensorSpec]:
    _check_group(attrs)
    return [specs[0]]


def _all_reduce_grad(gb: GradBuilder, op: Op, out_grads: Sequence[Tensor | None]) -> list[Tensor | None]:
    # popxl gives replicated_all_reduce no gradient; this one is the exact VJP for the linear reductions.
    (dy,) = out_grads
    if dy is None:
        return [None]
    if op.attrs["op"] not in ("add", "mean", "mul", "local"):
        raise AutodiffError(f"replicated_all_reduce with op {op.attrs['op']!r} has no gradient ({op})")
    return [create_op(ALL_REDUCE, [dy], dict(op.attrs))[0]]


def _lower_all_reduce(ctx: LoweringContext, attrs: Attrs, x: jax.Array) -> list[jax.Array]:
    return [all_reduce_values(ctx, x, attrs["op"], attrs["group"])]


ALL_REDUCE = register(
    OpDef(
        "replicated_all_reduce",
        _like,
        _lower_all_reduce,
        grad=_all_reduce_grad,
        departure="gradient: the exact one for add/mean/local (popxl has none)",
        effects=Effects(groupings=group_of),
    )
)

ALL_REDUCE_INPLACE = register(
    OpDef(
        "replicated_all_reduce_",
        _like,
        _lower_all_reduce,
        output_names=("replicated_all_reduce_out",),
        effects=Effects(groupings=group_of),
        aliasing=Aliasing(modifies=modifies_first),
    )
)


def shard_size(nelms: int, group_size: int) -> int:
    """Elements per shard when `nelms` elements are split over `group_size` replicas."""
    return -(-nelms // group_size)


def _own_shard(ctx: LoweringContext, x: jax.Array, group: ReplicaGrouping) -> jax.Array:
    n = group.group_size
    c = shard_size(x.size, n)
    flat = jnp.pad(x.reshape(-1), (0, c * n - x.size))
    return jax.lax.dynamic_slice_in_dim(flat, ctx.group_rank(group) * c, c)


def _sharded_infer(specs: Sequence[TensorSpec], attrs: Attrs) -> list[TensorSpec]:
    _check_group(attrs)
    (s,) = specs
    c = shard_size(math.prod(s.shape), attrs["group"].group_size)
    meta = s.shape if attrs.get("rts", True) else ()
    return [TensorSpec((c,), s.dtype, meta)]


def _reduce_scatter_grad(gb: GradBuilder, op: Op, out_grads: Sequence[Tensor | None]) -> list[Tensor | None]:
    """popart's rule: the gradient of a reduce-scatter is the all-gather of the output gradients.

    popart defines it for the 'local' op (a replica's own shard: `replica_sharded_slice`,
    `replicated_slice`), where it is not the exact VJP: every replica gets every shard's
    gradient. For 'add' (where popart has none) the same all-gather is the exact VJP.
    """
    (dy,) = out_grads
    if dy is None:
        return [None]
    if op.attrs["op"] not in ("local", "add"):
        raise AutodiffError(
            f"replicated_reduce_scatter with op {op.attrs['op']!r} has no gradient: "
            f"popxl defines one for 'local' ({op})"
        )
    attrs = {"group": op.attrs["group"], "shape": op.inputs[0].shape}
    return [create_op(ALL_GATHER, [dy], attrs, names=["replicated_reduce_scatter_grad_out"])[0]]


REDUCE_SCATTER = register(
    OpDef(
        "replicated_reduce_scatter",
        _sharded_infer,
        lambda ctx, attrs, x: [_own_shard(ctx, all_reduce_values(ctx, x, attrs["op"], attrs["group"]), attrs["group"])],
        grad=_reduce_scatter_grad,
        departure="gradient: popxl's all-gather for 'local'; the same, exact, for 'add' (popxl: none)",
        effects=Effects(groupings=group_of),
    )
)


def gather_values(ctx: LoweringContext, x: jax.Array, group: ReplicaGrouping) -> jax.Array:
    """The members' values of `x` stacked on a new leading axis in rank order."""
    out = x[None]
    for axis in reversed(ctx.group_axes(group)):
        out = jax.lax.all_gather(out, axis)
        out = out.reshape(-1, *x.shape)
    return out


def _gather_infer(specs: Sequence[TensorSpec], attrs: Attrs) -> list[TensorSpec]:
    _check_group(attrs)
    (s,) = specs
    g = attrs["group"].group_size
    shape = attrs["shape"]
    if shape is None:
        return [TensorSpec((g, *s.shape), s.dtype)]
    if math.prod(shape) > g * math.prod(s.shape):
        raise ValueError(f"Cannot gather {g} tensors of shape {s.shape} into shape {shape}")
    return [TensorSpec(tuple(shape), s.dtype)]


def _lower_gather(ctx: LoweringContext, attrs: Attrs, x: jax.Array) -> list[jax.Array]:
    stacked = gather_values(ctx, x, attrs["group"])
    shape = attrs["shape"]
    if shape is None:
        return [stacked]
    n = math.prod(shape)
    return [stacked.reshape(-1)[:n].reshape(shape)]


def _gather_grad(gb: GradBuilder, op: Op, out_grads: Sequence[Tensor | None]) -> list[Tensor | None]:
    """popart's rule: each replica's gradient is its own shard of its output gradient (a 'local'
    reduce-scatter), not the sum over replicas; reducing gradients is left to the program."""
    (dy,) = out_grads
    if dy is None:
        return [None]
    attrs = {"group": op.attrs["group"], "op": "local", "rts": False}
    x = op.inputs[0]
    (dx,) = create_op(REDUCE_SCATTER, [dy], attrs, names=["replicated_all_gather_grad_out"])
    if dx.shape != x.shape:
        (dx,) = create_op(RESHAPE, [dx], {"shape": x.shape})
    return [dx]


ALL_GATHER = register(
    OpDef(
        "replicated_all_gather",
        _gather_infer,
        _lower_gather,
        grad=_gather_grad,
        departure="gradient: popxl's rule, each replica's own part (not the sum over replicas)",
        effects=Effects(groupings=group_of),
    )
)


def _combine(op: str, xs: Sequence[jax.Array]) -> jax.Array:
    """`xs` reduced elementwise with collective op `op`."""
    if op == "square_add":
        return sum((x * x for x in xs[1:]), xs[0] * xs[0])
    stacked = jnp.stack(xs)
    if op == "add":
        return stacked.sum(0)
    if op in ("mean", "mul"):  # popxl maps the 'mul' collective to mean
        return stacked.mean(0).astype(xs[0].dtype)
    if op in ("min", "and"):
        return stacked.min(0)
    return stacked.max(0)


def _ipu_all_reduce_normalise(specs: Sequence[TensorSpec], attrs: Attrs) -> dict[str, Any]:
    if attrs["op"] not in REDUCE_OPS or attrs["op"] == "local":
        raise ValueError(f"Not a valid op: {attrs['op']}. Must choose from: {', '.join(REDUCE_OPS[:-1])}")
    if any((s.shape, s.dtype) != (specs[0].shape, specs[0].dtype) for s in specs):
        raise ValueError(f"all_reduce needs tensors of one shape and dtype, got {[str(s) for s in specs]}")
    return dict(attrs)


def _lower_ipu_all_reduce(ctx: LoweringContext, attrs: Attrs, *xs: jax.Array) -> list[jax.Array]:
    if attrs["identical_inputs"]:
        return list(xs)
    total = _combine(attrs["op"], xs)
    return [total] * len(xs)


def _ipu_all_reduce_grad(gb: GradBuilder, op: Op, out_grads: Sequence[Tensor | None]) -> list[Tensor | None]:
    if op.attrs["op"] != "add":
        raise AutodiffError(f"all_reduce has a gradient for op 'add' only, as in popxl ({op})")
    if all(g is None for g in out_grads):
        return [None] * len(out_grads)
    zero = [np.zeros(t.shape, t.dtype.as_numpy()) for t in op.outputs]
    filled = [g if g is not None else constant(zero[i], op.outputs[i].dtype) for i, g in enumerate(out_grads)]
    attrs = {
        **op.attrs,
        "identical_inputs": op.attrs["identical_grad_inputs"],
        "identical_grad_inputs": op.attrs["identical_inputs"],
    }
    return list(create_op(IPU_ALL_REDUCE, filled, attrs))


# A reduction across the IPUs of one replica: here every IPU of a replica is one device, so each output is the
# reduction of all the inputs, with popxl's identical-inputs forms (forward or gradient an identity).
IPU_ALL_REDUCE = register(
    OpDef(
        "all_reduce",
        lambda specs, attrs: list(specs),
        _lower_ipu_all_reduce,
        grad=_ipu_all_reduce_grad,
        normalise=_ipu_all_reduce_normalise,
        departure="within a replica all IPUs are one device: each output is the reduction of the inputs",
    )
)
