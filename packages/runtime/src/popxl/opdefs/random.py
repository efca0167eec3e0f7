"""Random seeds and random number ops, driven by a uint32[2] seed tensor."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import jax
import jax.numpy as jnp

from popxl import dtypes
from popxl.op import Attrs, OpDef, register
from popxl.opdefs.common import vjp_grad
from popxl.tensor import TensorSpec

if TYPE_CHECKING:
    from popxl.lowering.interpreter import LoweringContext

SEED_SPEC = TensorSpec((2,), dtypes.uint32)


def check_seed(spec: TensorSpec) -> None:
    """Raise unless `spec` is that of a random seed."""
    if (spec.shape, spec.dtype) != (SEED_SPEC.shape, SEED_SPEC.dtype):
        raise ValueError(f"A random seed must be a uint32 tensor of shape (2,), got {spec.dtype.name} {spec.shape}")


def _key(seed: jax.Array) -> jax.Array:
    return jax.random.wrap_key_data(seed.astype(jnp.uint32), impl="threefry2x32")


def _split_infer(specs: Sequence[TensorSpec], attrs: Attrs) -> list[TensorSpec]:
    check_seed(specs[0])
    return [SEED_SPEC] * attrs["count"]


def _lower_split(ctx: LoweringContext, attrs: Attrs, seed: jax.Array) -> list[jax.Array]:
    keys = jax.random.split(_key(seed), attrs["count"])
    return list(jax.random.key_data(keys))


SPLIT_SEED = register(
    OpDef(
        "split_random_seed",
        _split_infer,
        _lower_split,
        output_names=("split_random_seed_out",),
        departure="JAX's threefry split",
    )
)


def _random_infer(specs: Sequence[TensorSpec], attrs: Attrs) -> list[TensorSpec]:
    check_seed(specs[0])
    return [TensorSpec(attrs["shape"], attrs["dtype"])]


def _lower_uniform(ctx: LoweringContext, a: Attrs, seed: jax.Array) -> list[jax.Array]:
    return [jax.random.uniform(_key(seed), a["shape"], a["dtype"].as_numpy(), a["low"], a["high"])]


def _lower_normal(ctx: LoweringContext, a: Attrs, seed: jax.Array) -> list[jax.Array]:
    z = jax.random.normal(_key(seed), a["shape"], a["dtype"].as_numpy())
    return [z * a["std"] + a["mean"]]


RANDOM_UNIFORM = register(
    OpDef(
        "random_uniform",
        _random_infer,
        _lower_uniform,
        departure="JAX's threefry generator: deterministic per seed, not bit-equal to the IPU",
    )
)
RANDOM_NORMAL = register(
    OpDef(
        "random_normal",
        _random_infer,
        _lower_normal,
        departure="JAX's threefry generator: deterministic per seed, not bit-equal to the IPU",
    )
)


def _dropout_infer(specs: Sequence[TensorSpec], attrs: Attrs) -> list[TensorSpec]:
    check_seed(specs[1])
    if not 0 <= attrs["p"] < 1:
        raise ValueError(f"dropout probability must be in [0, 1), got {attrs['p']}")
    return [specs[0]]


def _lower_dropout(ctx: LoweringContext, attrs: Attrs, x: jax.Array, seed: jax.Array) -> list[jax.Array]:
    p = attrs["p"]
    keep = jax.random.bernoulli(_key(seed), 1 - p, x.shape)
    return [jnp.where(keep, x / (1 - p), jnp.zeros_like(x))]


DROPOUT = register(
    OpDef(
        "dropout",
        _dropout_infer,
        _lower_dropout,
        grad=vjp_grad({0: (1,)}),
        departure="JAX's threefry generator: deterministic per seed, not bit-equal to the IPU",
    )
)


def _shaped_dropout_infer(specs: Sequence[TensorSpec], attrs: Attrs) -> list[TensorSpec]:
    check_seed(specs[1])
    if not 0 <= attrs["ratio"] < 1:
        raise ValueError(f"shaped_dropout ratio must be in [0, 1), got {attrs['ratio']}")
    try:
        broadcast = jnp.broadcast_shapes(tuple(attrs["shape"]), specs[0].shape)
    except ValueError as e:
        raise ValueError(f"shaped_dropout mask shape {attrs['shape']} does not broadcast to {specs[0].shape}") from e
    if broadcast != specs[0].shape:
        raise ValueError(f"shaped_dropout mask shape {attrs['shape']} does not broadcast to {specs[0].shape}")
    return [specs[0]]


def _lower_shaped_dropout(ctx: LoweringContext, attrs: Attrs, x: jax.Array, seed: jax.Array) -> list[jax.Array]:
    # One draw per element of the mask's shape, shared along the axes it broadcasts over.
    ratio = attrs["ratio"]
    keep = jax.random.bernoulli(_key(seed), 1 - ratio, tuple(attrs["shape"]))
    return [jnp.where(keep, x / (1 - ratio), jnp.zeros_like(x))]


SHAPED_DROPOUT = register(
    OpDef(
        "shaped_dropout",
        _shaped_dropout_infer,
        _lower_shaped_dropout,
        grad=vjp_grad({0: (1,)}),
        departure="JAX's threefry generator: deterministic per seed, not bit-equal to the IPU",
    )
)
