"""batch_serialise_fwd_and_grad: serialise a forward graph and its gradient graph together.

The forward loop stores every activation the gradient graph needs to a remote
buffer (sharded over a replica group when asked), and the gradient loop loads
them back step by step.
"""

from __future__ import annotations

from collections.abc import MutableMapping
from typing import Any

import popxl
from popxl.transforms import ExpectedConnectionType, GradGraphInfo
from popxl_addons.core.batch_serialisation.buffers import batch_serial_buffer
from popxl_addons.core.batch_serialisation.handles import RemoteHandle, normalise
from popxl_addons.core.batch_serialisation.result import BatchSerialResult
from popxl_addons.core.batch_serialisation.transform import batch_serialise
from popxl_addons.core.graph import GraphWithNamedArgs
from popxl_addons.core.named_tensors import NamedTensors


def _name_of(named: NamedTensors, t: popxl.Tensor) -> str | None:
    for name, arg in named.named_tensors.items():
        if arg is t:
            return name
    return None


def batch_serialise_fwd_and_grad(
    forward_graph: GraphWithNamedArgs,
    gradient_graph: GraphWithNamedArgs,
    named_inputs_for_grad_graph: NamedTensors,
    steps: int,
    load_handles: MutableMapping[popxl.Tensor, Any],
    store_streams: MutableMapping[popxl.Tensor, popxl.DeviceToHostStream],
    store_buffers: MutableMapping[popxl.Tensor, Any],
    seed_input: popxl.Tensor | None = None,
    rows: int = 1,
    io_mode: str = "io",
) -> tuple[BatchSerialResult, BatchSerialResult]:
    """Serialised forward and gradient graphs that pass activations through remote buffers.

    `store_buffers` may map an activation to a ReplicaGrouping to store it
    sharded over that group. `named_inputs_for_grad_graph` names the forward
    tensors (usually the variables) the gradient graph receives directly. The
    gradient graph's args are reassigned: activation names first, then its own.
    """
    info: GradGraphInfo = gradient_graph.grad_graph_info
    normalise(load_handles)
    shard_groups = {t: g for t, g in store_buffers.items() if isinstance(g, popxl.ReplicaGrouping)}
    buffers: dict[popxl.Tensor, Any] = {t: h for t, h in store_buffers.items() if t not in shard_groups}
    normalise(buffers)
    named_tensors = set(named_inputs_for_grad_graph.tensors)
    activations = [
        (i, ec.fwd_tensor)
        for i, ec in enumerate(info.expected_inputs)
        if ec.connection_type is ExpectedConnectionType.Fwd
    ]
    for _, t in activations:
        if t in buffers or t in named_tensors:
            continue
        handle = load_handles.get(t)
        if isinstance(handle, RemoteHandle):
            buffers[t] = handle
            continue
        group = shard_groups.get(t)
        buffers[t] = RemoteHandle(batch_serial_buffer(t, steps, rows, group), 0, group)

    fwd_result = batch_serialise(forward_graph, steps, load_handles, store_streams, buffers, seed_input, rows, io_mode)

    grad_inputs = gradient_graph.graph.inputs
    grad_load_handles: dict[popxl.Tensor, Any] = {}
    activation_args = NamedTensors()
    for i, t in activations:
        name = _name_of(named_inputs_for_grad_graph, t)
        if name is not None:
            activation_args.insert(name, grad_inputs[i], overwrite=True)
        else:
            # Every other activation was given a buffer above, so the forward loop stored it.
            grad_load_handles[grad_inputs[i]] = fwd_result.stored_buffers[t]
    activation_args.update(gradient_graph.args, overwrite=True)
    gradient_graph.args = activation_args
    for i, ec in enumerate(info.expected_inputs):
        if ec.connection_type is ExpectedConnectionType.FwdGrad:
            handle = load_handles.get(grad_inputs[i])
            if handle is None:
                raise ValueError(
                    f"FwdGrad input (idx={i}) to Gradient graph must have a load_handle specified "
                    f"(the gradient of {ec.fwd_tensor.id})"
                )
            grad_load_handles[grad_inputs[i]] = handle

    grad_result = batch_serialise(gradient_graph, steps, grad_load_handles, store_streams, buffers, None, rows, io_mode)
    grad_result.graph.grad_graph_info = info
    return fwd_result, grad_result
