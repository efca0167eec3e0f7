"""Replicas as named JAX axes: one device per replica, or all replicas on one device.

The replication factor R is split into mixed-radix digits at the cut points
{1, R} and {stride, stride*group_size} of every grouping the program uses, so
each grouping is exactly a set of named axes. Collectives then use JAX's named
collectives, which work the same under `shard_map` (one replica per device)
and `vmap` (a simulation of all replicas on one device).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from popxl.replica_grouping import ReplicaGrouping


class ReplicaMesh:
    """The named axes that factor the replication factor."""

    def __init__(self, replication_factor: int, groupings: Iterable[ReplicaGrouping]) -> None:
        r = replication_factor
        cuts = {1, r}
        used = [g for g in groupings if g.group_size > 1]
        for g in used:
            cuts |= {g.stride, g.stride * g.group_size}
        ordered = sorted(cuts)
        for lo, hi in itertools.pairwise(ordered):
            if hi % lo:
                culprits = [
                    g
                    for g in used
                    if lo in (g.stride, g.stride * g.group_size) or hi in (g.stride, g.stride * g.group_size)
                ]
                raise ValueError(
                    f"Replica groupings {culprits} cannot be expressed together as named axes of "
                    f"replication factor {r}: {lo} does not divide {hi}"
                )
        self.replication_factor = r
        # (name, size, cut) from least to most significant digit.
        self._digits = [(f"replica{i}", hi // lo, lo) for i, (lo, hi) in enumerate(itertools.pairwise(ordered))]

    @property
    def axis_names(self) -> tuple[str, ...]:
        """Axis names, most significant first."""
        return tuple(name for name, _, _ in reversed(self._digits))

    @property
    def axis_sizes(self) -> tuple[int, ...]:
        """Axis sizes, most significant first."""
        return tuple(size for _, size, _ in reversed(self._digits))

    def group_axes(self, group: ReplicaGrouping) -> tuple[str, ...]:
        """The axes a grouping spans, most significant first."""
        if group.group_size == 1:
            return ()
        lo, hi = group.stride, group.stride * group.group_size
        return tuple(name for name, _, cut in reversed(self._digits) if lo <= cut < hi)

    def group_rank(self, group: ReplicaGrouping) -> jax.Array:
        """The rank of the current replica within its group."""
        axes = self.group_axes(group)
        rank = jnp.int32(0)
        weight = 1
        for name, size, _cut in self._digits:
            if name in axes:
                rank = rank + jax.lax.axis_index(name).astype(jnp.int32) * weight
                weight *= size
        return rank

    def replica_index(self) -> jax.Array:
        """The index of the current replica among all of them."""
        index = jnp.int32(0)
        for name, _size, cut in self._digits:
            index = index + jax.lax.axis_index(name).astype(jnp.int32) * cut
        return index

    def per_replica(self, fn: Callable[..., Any], devices: list[Any] | None) -> Callable[..., Any]:
        """`fn` of one replica's values mapped over a leading replica axis of every argument.

        With one replica there is no replica axis on the device at all: reshaping inside
        the program would make XLA copy state it could otherwise update in place.
        """
        if self.replication_factor == 1:
            return fn  # the placement drops and restores the replica axis on the host
        if devices is not None:
            return self._shard_mapped(fn, devices)
        return self._vmapped(fn)

    def _vmapped(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        """`fn` mapped over one leading axis per mesh axis (the placement lays arrays out so)."""
        mapped = fn
        for name in reversed(self.axis_names):
            mapped = jax.vmap(mapped, axis_name=name)
        return mapped

    def sharding(self, devices: list[Any]) -> NamedSharding:
        """The sharding that puts replica r's slice of a leading replica axis on device r."""
        mesh = Mesh(np.asarray(devices[: self.replication_factor]).reshape(self.axis_sizes), self.axis_names)
        return NamedSharding(mesh, PartitionSpec(self.axis_names))

    def _shard_mapped(self, fn: Callable[..., Any], devices: list[Any]) -> Callable[..., Any]:
        sharding = self.sharding(devices)
        mesh, spec = sharding.mesh, sharding.spec

        def local(*args: Any) -> Any:
            squeezed = jax.tree.map(lambda x: x[0], args)
            return jax.tree.map(lambda x: x[None], fn(*squeezed))

        return jax.shard_map(local, mesh=mesh, in_specs=spec, out_specs=spec, check_vma=False)
