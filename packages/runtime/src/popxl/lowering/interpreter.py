"""Tracing a popxl graph into JAX values, op by op in creation order."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import jax
import jax.numpy as jnp

from popxl.tensor import Constant, Tensor

if TYPE_CHECKING:
    from popxl.graph import Graph
    from popxl.lowering.replicas import ReplicaMesh
    from popxl.replica_grouping import ReplicaGrouping

World = dict[str, Any]
WorldKey = tuple[str, str]


class CheckSites:
    """The run-time checks of a program, numbered from 1 by description."""

    def __init__(self) -> None:
        self.descriptions: list[str] = []
        self._codes: dict[str, int] = {}

    def code(self, description: str) -> int:
        """The code of the check described by `description`."""
        if description not in self._codes:
            self.descriptions.append(description)
            self._codes[description] = len(self.descriptions)
        return self._codes[description]


class LoweringContext:
    """What an op's lowering may use: the mutable world, host inputs, replicas and checks.

    `world` holds remote-buffer storage, host stream cursors and outputs, and the
    first failed run-time check; lowerings replace its entries functionally.
    """

    def __init__(
        self,
        world: World,
        host_inputs: dict[str, jax.Array],
        mesh: ReplicaMesh,
        sites: CheckSites | None,
        written: dict[Graph, list[WorldKey]],
    ) -> None:
        self.world = world
        self.host_inputs = host_inputs
        self.mesh = mesh
        self.sites = sites
        # Which world entries each loop body writes: found once per graph and program, reused by later traces.
        self.written = written

    def check(self, ok: jax.Array, what: str, index: jax.Array, bound: int) -> None:
        """Record a failed check (the first per replica) unless checks are off."""
        if self.sites is None:
            return
        code = self.sites.code(f"{what}: index {{index}} is out of range [0, {bound})")
        err = self.world["error"]
        fresh = (err["code"] == 0) & jnp.logical_not(ok)
        self.world["error"] = {
            "code": jnp.where(fresh, jnp.int32(code), err["code"]),
            "index": jnp.where(fresh, jnp.asarray(index, jnp.int32), err["index"]),
        }

    def group_axes(self, group: ReplicaGrouping) -> tuple[str, ...]:
        """The named replica axes spanned by `group`, most significant first."""
        return self.mesh.group_axes(group)

    def group_rank(self, group: ReplicaGrouping) -> jax.Array:
        """This replica's rank within its group of `group`."""
        return self.mesh.group_rank(group)

    def written_world(self, graph: Graph, inputs: Sequence[jax.Array]) -> list[WorldKey]:
        """The world entries that running `graph` replaces.

        Found by tracing `graph` once more; XLA drops that unused trace. Loops carry
        only these entries, so that state a loop merely reads is not copied.
        """
        if graph not in self.written:
            saved = self.world
            self.world = {part: dict(entries) for part, entries in saved.items()}
            try:
                self.run_graph(graph, inputs)
                self.written[graph] = [
                    (p, k) for p, entries in self.world.items() for k, v in entries.items() if v is not saved[p][k]
                ]
            finally:
                self.world = saved
        return self.written[graph]

    def world_entries(self, keys: Sequence[WorldKey]) -> list[jax.Array]:
        """The current values of world entries."""
        return [self.world[p][k] for p, k in keys]

    def set_world_entries(self, keys: Sequence[WorldKey], values: Sequence[jax.Array]) -> None:
        """Replace world entries."""
        for (p, k), v in zip(keys, values):
            self.world[p][k] = v

    def run_graph(self, graph: Graph, inputs: Sequence[jax.Array]) -> tuple[list[jax.Array], list[jax.Array]]:
        """Outputs of `graph` for `inputs`, and the final values of its inputs."""
        env = execute(self, graph, dict(zip(graph.inputs, inputs)))
        return [value(env, t) for t in graph.outputs], [env[t] for t in graph.inputs]


def value(env: dict[Tensor, jax.Array], t: Tensor) -> jax.Array:
    """The value of `t`: from the environment, or its constant data."""
    if t in env:
        return env[t]
    if isinstance(t, Constant):
        return jnp.asarray(t.data)
    raise RuntimeError(f"{t.id} has no value: it is used before any op produces it")


def execute(ctx: LoweringContext, graph: Graph, env: dict[Tensor, jax.Array]) -> dict[Tensor, jax.Array]:
    """Run every op of `graph` in creation order over `env`; returns the final environment."""
    for op in graph.ops:
        result = op.opdef.lower(ctx, op, *(value(env, t) for t in op.inputs))
        outs, updates = result if isinstance(result, tuple) else (result, {})
        for t, v in zip(op.outputs, outs):
            env[t] = v
        for i, v in updates.items():
            env[op.inputs[i]] = v
    return env
