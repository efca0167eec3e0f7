"""The load, compute and store pieces that every batch-serialisation schedule is built from."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field
from typing import Any

import popxl
from popxl import ops
from popxl_addons.core.remote.rts import gather_replica_sharded
from popxl_addons.core.transforms.batch_serialisation.handles import RemoteHandle

Values = dict[popxl.Tensor, popxl.Tensor]


@dataclass(kw_only=True)
class StepIO:
    """One micro-batch step of a compute graph: what it loads, passes through and stores."""

    compute: popxl.Graph
    steps: int
    load_handles: Mapping[popxl.Tensor, Any]
    store_streams: Mapping[popxl.Tensor, popxl.DeviceToHostStream]
    store_buffers: Mapping[popxl.Tensor, RemoteHandle]
    loaded: list[popxl.Tensor]
    passed: list[popxl.Tensor]
    stored: list[popxl.Tensor]
    seed_input: popxl.Tensor | None
    on_io_tiles: bool
    # Compute-graph tensors held on the device: the key of each one's stack among the passed values.
    kept: Mapping[popxl.Tensor, popxl.Tensor] = field(default_factory=dict)

    @contextmanager
    def exchange(self) -> Iterator[None]:
        """The context transfers are created in: merged on IO tiles in the io modes."""
        with popxl.transforms.io_tile_exchange() if self.on_io_tiles else nullcontext():
            yield

    def to_compute(self, t: popxl.Tensor) -> popxl.Tensor:
        """`t` moved from the IO tiles to compute tiles (io modes only)."""
        return ops.io_tile_copy(t) if self.on_io_tiles else t

    def load(self, index: popxl.Tensor) -> Values:
        """Load every loaded input for running index `index` (gather comes later)."""
        values: Values = {}
        for t in self.loaded:
            handle = self.load_handles[t]
            if isinstance(handle, popxl.HostToDeviceStream):
                values[t] = ops.host_load(handle, t.name.split("/")[-1])
            else:
                values[t] = ops.remote_load(handle.buffer, handle.slot(index, self.steps))
        return values

    def gather(self, values: Values) -> Values:
        """Move loads to compute tiles and gather the replica-sharded ones."""
        out: Values = {}
        for t, v in values.items():
            v = self.to_compute(v)
            handle = self.load_handles[t]
            if isinstance(handle, RemoteHandle) and handle.sharded and v.meta_shape:
                assert handle.shard_group is not None
                v = gather_replica_sharded(v, handle.shard_group)
            out[t] = v
        return out

    def run(self, loaded: Values, passed: Values, seed: popxl.Tensor | None, index: popxl.Tensor) -> Values:
        """Call the compute graph for running index `index`; returns the value of each stored tensor.

        Kept inputs are read from their stacks and kept tensors the step makes
        are written into theirs, at entry `index`; stored values are sliced if sharded.
        """
        stacks = {self.kept[t]: t for t in self.kept}
        feeds = {**loaded, **{t: v for t, v in passed.items() if t not in stacks}}
        at = ops.reshape(index, (1,))
        for t, key in self.kept.items():
            if t in self.compute.inputs and t not in feeds:
                entry = ops.dynamic_slice(passed[key], at, axes=[0], sizes=[1], no_overlap=True)
                feeds[t] = ops.reshape(entry, t.shape)
        if self.seed_input is not None:
            assert seed is not None
            feeds[self.seed_input] = seed
        info = ops.call_with_info(self.compute, inputs_dict=feeds)
        for t, key in self.kept.items():
            if t not in self.compute.inputs or t in loaded or t in passed:
                v = feeds[t] if t in feeds else info.graph_to_parent(t)
                ops.dynamic_update_(
                    passed[key], at, ops.reshape(v, (1, *v.shape)), axes=[0], sizes=[1], no_overlap=True
                )
        out: Values = {}
        for t in self.stored:
            v = feeds[t] if t in feeds else info.graph_to_parent(t)
            handle = self.store_buffers.get(t)
            if handle is not None and handle.sharded:
                v = ops.collectives.replica_sharded_slice(v, handle.shard_group)
            out[t] = v
        return out

    def store(self, values: Values, index: popxl.Tensor) -> None:
        """Store each stored tensor's value for running index `index`."""
        for t in self.stored:
            v = values[t]
            if t in self.store_streams:
                ops.host_store(self.store_streams[t], v)
            if t in self.store_buffers:
                handle = self.store_buffers[t]
                ops.remote_store(handle.buffer, handle.slot(index, self.steps), v)

    def to_io(self, values: Values) -> Values:
        """Move values to be stored onto the IO tiles (io modes only)."""
        return {t: ops.io_tile_copy(v) if self.on_io_tiles else v for t, v in values.items()}
