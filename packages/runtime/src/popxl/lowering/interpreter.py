"""Tracing a popxl graph into JAX values, op by op in creation order."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import jax
import jax.numpy as jnp

from popxl.graph import Graph
from popxl.lowering.aliasing import Aliasing
from popxl.lowering.disk_tier import DiskTier
from popxl.lowering.replicas import ReplicaMesh
from popxl.lowering.world import CheckState, World
from popxl.op import CHECK_RESULT, Resource, graph_reads, graph_writes
from popxl.remote_buffer import RemoteBuffer
from popxl.replica_grouping import ReplicaGrouping
from popxl.tensor import Constant, Tensor


class CheckSites:
    """The run-time checks of a program, numbered from 1 by description."""

    def __init__(self) -> None:
        self.descriptions: list[str] = []
        self._codes: dict[str, int] = {}
        self._index_names: dict[int, Callable[[int], str]] = {}

    def code(self, description: str, name_index: Callable[[int], str] | None = None) -> int:
        """The code of the check described by `description`; `name_index` names an index in messages."""
        if description not in self._codes:
            self.descriptions.append(description)
            self._codes[description] = len(self.descriptions)
            if name_index is not None:
                self._index_names[len(self.descriptions)] = name_index
        return self._codes[description]

    def message(self, code: int, index: int) -> str:
        """What failed check `code` at `index` means."""
        text = self.descriptions[code - 1].format(index=index)
        name = self._index_names.get(code)
        return f"{text} ({name(index)})" if name is not None else text


class LoweringContext:
    """What an op's lowering may use: the world, this run's host inputs, the replicas and the checks.

    `remote_memory` says where remote buffers' storage lives unless a buffer says
    otherwise (`RemoteBuffer.memory`), and where host stream data waits: "host" or "device";
    `options` are the Ir's session options (popxl's names), for lowerings they tune;
    `host_effects` is False while a program is traced only for its checks, so that
    lowerings with effects on the host (printing) leave them out; `host_outputs`
    says whether what host_stores write waits in host memory; `copy_out_loads`, whether
    a remote load inside a loop that also stores to its buffer is copied out where it
    is loaded (`remote_memory.copied_out`); `disk`, the files of the remote buffers
    on local disk (`DiskTier`), which loads and stores reach through host callbacks.
    `looped` holds the resources the loops being traced write.
    """

    def __init__(
        self,
        world: World,
        host_inputs: Mapping[str, jax.Array],
        mesh: ReplicaMesh,
        sites: CheckSites | None,
        remote_memory: str = "device",
        options: Any = None,
        host_effects: bool = True,
        host_outputs: bool = False,
        copy_out_loads: bool = False,
        disk: DiskTier | None = None,
    ) -> None:
        self.world = world
        self.host_inputs = host_inputs
        self.mesh = mesh
        self.sites = sites
        self.remote_memory = remote_memory
        self.options = options
        self.host_effects = host_effects
        self.host_outputs = host_outputs
        self.copy_out_loads = copy_out_loads
        self.disk = disk
        self.looped: frozenset[Resource] = frozenset()

    def in_host(self, buffer: RemoteBuffer) -> bool:
        """Whether `buffer`'s storage lives in host memory."""
        return (buffer.memory or self.remote_memory) == "host"

    def on_disk(self, buffer: RemoteBuffer) -> DiskTier | None:
        """The disk tier holding `buffer`'s entries in a file, or None where its storage is in memory."""
        if self.disk is not None and any(buffer is b for b in self.disk.buffers):
            return self.disk
        return None

    def copies_out(self, buffer: RemoteBuffer) -> bool:
        """Whether a load from `buffer` here is copied out where it is loaded."""
        return self.copy_out_loads and buffer in self.looped

    def option(self, name: str, default: Any) -> Any:
        """Session option `name`, or `default` where it is not set."""
        return getattr(self.options, name, default)

    def check(
        self,
        ok: jax.Array,
        what: str,
        index: jax.Array,
        bound: int,
        name_index: Callable[[int], str] | None = None,
        low: int = 0,
    ) -> None:
        """Record a failed check (the first per replica) unless checks are off; valid indices are [low, bound)."""
        if self.sites is None:
            return
        code = self.sites.code(f"{what}: index {{index}} is out of range [{low}, {bound})", name_index)
        state = self.world.check_state
        fresh = (state.code == 0) & jnp.logical_not(ok)
        self.world.write_check_state(
            CheckState(
                jnp.where(fresh, jnp.int32(code), state.code),
                jnp.where(fresh, jnp.asarray(index, jnp.int32), state.offending),
            )
        )

    def group_axes(self, group: ReplicaGrouping) -> tuple[str, ...]:
        """The named replica axes spanned by `group`, most significant first."""
        return self.mesh.group_axes(group)

    def group_rank(self, group: ReplicaGrouping) -> jax.Array:
        """This replica's rank within its group of `group`."""
        return self.mesh.group_rank(group)

    def writes(self, graph: Graph) -> list[Resource]:
        """The resources of this world that running `graph` replaces, as its ops declare them."""
        declared = graph_writes(graph)
        if self.disk is not None:  # a load of a buffer on disk moves its token on (see `remote_memory.disk_load`)
            declared |= {r for r in graph_reads(graph) if isinstance(r, RemoteBuffer) and self.on_disk(r)}
        skipped = {CHECK_RESULT} if self.sites is None else set()
        return sorted((r for r in declared if r in self.world and r not in skipped), key=repr)

    def run_graph(self, graph: Graph, inputs: Sequence[jax.Array]) -> tuple[list[jax.Array], list[jax.Array]]:
        """Outputs of `graph` for `inputs`, and the final values of its inputs."""
        n = len(graph.outputs)
        results = execute(self, graph, dict(zip(graph.inputs, inputs)), [*graph.outputs, *graph.inputs])
        return results[:n], results[n:]


def execute(
    ctx: LoweringContext, graph: Graph, bound: Mapping[Tensor, jax.Array], results: Sequence[Tensor]
) -> list[jax.Array]:
    """Run every op of `graph` in creation order from the `bound` values; returns the final values of `results`.

    Which tensors share storage comes from `Aliasing`: a later in-place update
    through any of them is seen through all. A view's value is derived from
    its inputs whenever it is read, and writing it writes them.
    """
    aliasing = Aliasing(graph)
    values: dict[Tensor, jax.Array] = dict(bound)

    def value(t: Tensor) -> jax.Array:
        view = aliasing.view(t)
        if view is not None:
            return view.opdef.lower(ctx, view.attrs, *(value(p) for p in view.inputs))[0]
        s = aliasing.storage(t)
        if s in values:
            return values[s]
        if isinstance(s, Constant):
            return jnp.asarray(s.data)
        raise RuntimeError(f"{t.id} has no value: it is used before any op produces it")

    def write(t: Tensor, new: jax.Array) -> None:
        view = aliasing.view(t)
        if view is None:
            values[aliasing.storage(t)] = new
            return
        update = view.opdef.aliasing.view_update
        assert update is not None
        updated = update(view.attrs, [value(p) for p in view.inputs], new)
        for parent, v in zip(view.inputs, updated):
            write(parent, v)

    for op in graph.ops:
        # The op's name scope names what XLA computes for it (out-of-memory errors list the largest).
        with jax.named_scope(op.outputs[0].name if op.outputs else op.name):
            lowered = op.opdef.lower(ctx, op.attrs, *(value(t) for t in op.inputs))
        n = len(op.outputs)
        modifies = op.modifies
        unaliased = sorted(i for i, out in modifies.items() if out is None)
        if len(lowered) != n + len(unaliased):
            raise RuntimeError(
                f"The lowering of {op.name} returned {len(lowered)} values, expected {n} outputs "
                f"and {len(unaliased)} modified inputs"
            )
        values.update((t, v) for t, v in zip(op.outputs, lowered) if aliasing.owns_storage(t))
        for i, v in zip(unaliased, lowered[n:]):
            write(op.inputs[i], v)
        for i, out in modifies.items():
            if out is not None:
                write(op.inputs[i], lowered[out])
    return [value(t) for t in results]
