"""Remote buffers for named tensors and variables, and the graphs that load and store them (phased execution)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from contextlib import ExitStack

import popxl
from popxl import ops
from popxl_addons.core.modules.dot_tree import DotTree
from popxl_addons.core.modules.graph import GraphWithNamedArgs
from popxl_addons.core.modules.named_tensors import NamedTensors
from popxl_addons.core.modules.variable_factory import NamedVariableFactories

__all__ = [
    "load_remote_graph",
    "store_remote_graph",
    "named_buffers",
    "named_variable_buffers",
    "create_remote_buffer",
    "NamedRemoteBuffers",
    "load_remote",
    "store_remote",
]


class NamedRemoteBuffers(DotTree[popxl.RemoteBuffer]):
    """Remote buffers under the names of the tensors or variables they hold."""


def create_remote_buffer(
    spec: popxl.TensorSpec | popxl.Tensor,
    entries: int = 1,
    replica_group: popxl.ReplicaGrouping | None = None,
    shard_over: int | None = None,
) -> popxl.RemoteBuffer:
    """A buffer of `entries` tensors of `spec`.

    A spec with a meta shape is already a shard; otherwise, with `shard_over`
    > 1 (the group's size by default), each replica holds a 1-D shard of the
    tensor over `shard_over` members of `replica_group`.
    """
    spec = spec.spec if isinstance(spec, popxl.Tensor) else spec
    group = replica_group if replica_group is not None else popxl.gir().replica_grouping()
    shard_over = shard_over or group.group_size
    if spec.meta_shape:
        buffer = popxl.remote_buffer(spec.shape, spec.dtype, entries)
        buffer.meta_shape = spec.meta_shape
        return buffer
    if shard_over > 1:
        nelms = math.prod(spec.shape)
        if nelms % shard_over:
            raise ValueError(f"Can't shard tensor with {nelms} elements over {shard_over} replicas")
        shape = (group.num_groups, *spec.shape) if group.num_groups > 1 else spec.shape
        return popxl.replica_sharded_buffer(shape, spec.dtype, group, shard_over, entries)
    return popxl.remote_buffer(spec.shape, spec.dtype, entries)


def named_buffers(tensors: NamedTensors, entries: int = 1) -> NamedRemoteBuffers:
    """A buffer of `entries` for each tensor, under its name (replica-sharded tensors get shard buffers)."""
    buffers = {}
    for name, t in tensors.to_dict().items():
        buffer = popxl.remote_buffer(t.shape, t.dtype, entries)
        buffer.meta_shape = t.meta_shape
        buffers[name] = buffer
    return NamedRemoteBuffers.from_dict(buffers)


def named_variable_buffers(
    factories: NamedVariableFactories, entries: int = 1, shard_over_dict: Mapping[str, int] | int | bool = True
) -> NamedRemoteBuffers:
    """A buffer of `entries` for each variable factory, under its name.

    `shard_over_dict` says over how many replicas of each variable's grouping
    to shard it: per name (missing names: the whole group), one number for all,
    True for the whole group, False (or 1) for no sharding.
    """
    buffers = {}
    for name, f in factories.to_dict().items():
        group = f.replica_grouping
        if isinstance(shard_over_dict, bool):
            shard_over = group.group_size if shard_over_dict else 1
        elif isinstance(shard_over_dict, int):
            if not 1 <= shard_over_dict <= group.group_size:
                raise ValueError(
                    f"Invalid shard_over_dict int value: {shard_over_dict} (group size {group.group_size})"
                )
            shard_over = shard_over_dict
        elif isinstance(shard_over_dict, Mapping):
            shard_over = shard_over_dict.get(name, group.group_size)
        else:
            raise ValueError("shard_over_dict must be a mapping, an integer or a boolean")
        spec = popxl.TensorSpec(f.shape, f.dtype, f.meta_shape)
        buffers[name] = create_remote_buffer(spec, entries, group, shard_over)
    return NamedRemoteBuffers.from_dict(buffers)


def _transfer_context(use_io_tiles: bool) -> ExitStack:
    stack = ExitStack()
    stack.enter_context(popxl.transforms.merge_exchange())
    stack.enter_context(popxl.in_sequence(False))
    if use_io_tiles:
        stack.enter_context(popxl.io_tiles())
    return stack


def load_remote_graph(
    buffers: NamedRemoteBuffers, entries: int = 1, use_io_tiles: bool = False
) -> tuple[GraphWithNamedArgs, list[str]]:
    """A graph that loads entry `index` (its one input) of every buffer, and the names of its outputs.

    Buffers are grown to at least `entries`. Use as
    `NamedTensors.pack(names, graph.call(index))`.
    """
    graph = popxl.gir().create_empty_graph("load_remote")
    names: list[str] = []
    with graph, _transfer_context(use_io_tiles):
        index = popxl.graph_input((), popxl.int32, "load_index")
        for name, buffer in zip(*buffers.unpack()):
            buffer.entries = max(buffer.entries, entries)
            names.append(name)
            popxl.graph_output(ops.remote_load(buffer, index, name))
    return GraphWithNamedArgs(graph), names


def load_remote(buffers: NamedRemoteBuffers, entry: int | popxl.Tensor = 0, use_io_tiles: bool = False) -> NamedTensors:
    """Entry `entry` of every buffer, loaded in the current graph, under the buffers' names."""
    with _transfer_context(use_io_tiles):
        loaded = {name: ops.remote_load(b, entry, name) for name, b in buffers.to_dict().items()}
    return NamedTensors.from_dict(loaded)


def store_remote_graph(buffers: NamedRemoteBuffers, entries: int = 1, use_io_tiles: bool = False) -> GraphWithNamedArgs:
    """A graph that stores its named inputs into entry `index` (its first input) of the buffers of the same names.

    Buffers are grown to at least `entries`. Use as `graph.bind(tensors).call(index)`.
    """
    graph = popxl.gir().create_empty_graph("store_remote")
    args = {}
    with graph, _transfer_context(use_io_tiles):
        index = popxl.graph_input((), popxl.int32, "store_index")
        for name, buffer in zip(*buffers.unpack()):
            buffer.entries = max(buffer.entries, entries)
            value = popxl.graph_input(buffer.tensor_shape, buffer.tensor_dtype, name, meta_shape=buffer.meta_shape)
            ops.remote_store(buffer, index, value)
            args[name] = value
    return GraphWithNamedArgs(graph, NamedTensors.from_dict(args))


def store_remote(
    buffers: NamedRemoteBuffers, tensors: NamedTensors, entry: int | popxl.Tensor = 0, use_io_tiles: bool = False
) -> None:
    """Store each tensor into entry `entry` of the buffer of the same name, in the current graph."""
    with _transfer_context(use_io_tiles):
        for buffer, tensor in buffers.to_mapping(tensors).items():
            ops.remote_store(buffer, entry, tensor)
