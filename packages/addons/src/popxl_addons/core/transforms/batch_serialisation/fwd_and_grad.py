"""batch_serialise_fwd_and_grad: serialise a forward graph and its gradient graph together.

The forward loop passes every activation the gradient graph needs to the
gradient loop as its policy says (see `policy`): through a remote buffer
(sharded over a replica group when asked), through a stack held on the
device, or not at all, the gradient graph recomputing it.
"""

from __future__ import annotations

from collections.abc import MutableMapping
from functools import partial
from typing import Any

import numpy as np

import popxl
from popxl.transforms import ExpectedConnectionType
from popxl_addons.core.modules.graph import GraphWithNamedArgs
from popxl_addons.core.modules.named_tensors import NamedTensors
from popxl_addons.core.modules.variable_factory import NamedVariableFactories, VariableFactory
from popxl_addons.core.transforms.batch_serialisation.buffers import batch_serial_buffer
from popxl_addons.core.transforms.batch_serialisation.handles import RemoteHandle, normalise
from popxl_addons.core.transforms.batch_serialisation.policy import (
    Policy,
    kept_arg_name,
    resolve_policy,
    serialisable_activations,
)
from popxl_addons.core.transforms.batch_serialisation.recompute import recompute_activations
from popxl_addons.core.transforms.batch_serialisation.result import BatchSerialResult
from popxl_addons.core.transforms.batch_serialisation.transform import batch_serialise


def _name_of(named: NamedTensors, t: popxl.Tensor) -> str | None:
    for name, arg in named.named_tensors.items():
        if arg is t:
            return name
    return None


def _remapped(handles: MutableMapping[popxl.Tensor, Any], remap: dict[popxl.Tensor, popxl.Tensor]) -> None:
    """Re-key, in place, handles of the old gradient graph's tensors to the wrapper's."""
    for t in [t for t in handles if t in remap]:
        handles[remap[t]] = handles.pop(t)


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
    policy: Policy | None = None,
    activation_memory: str | None = None,
) -> tuple[BatchSerialResult, BatchSerialResult]:
    """Serialised forward and gradient graphs that pass activations between them as `policy` says.

    `policy` maps activations (tensors, or names from `serialisable_activations`)
    to "host" (the default), "recompute" or "keep". With "keep", both results'
    args hold the device stack under "kept.<name>" and `kept` holds its
    factory: init it once and bind it to both graphs. With "recompute", the
    gradient graph is wrapped first and the forward inputs it needs are stored
    ("host" unless the policy keeps them); handles keyed by the gradient
    graph's tensors are re-keyed to the wrapper's. `store_buffers` may map an
    activation to a ReplicaGrouping to store it sharded over that group.
    `activation_memory` places the buffers made here for "host" activations
    ("host" or "device", as `RemoteBuffer.memory`); None follows the Session's
    `remote_memory`.
    `named_inputs_for_grad_graph` names the forward tensors (usually the
    variables) the gradient graph receives directly. The gradient graph's args
    are reassigned: activation names first, then its own.
    """
    if activation_memory not in (None, "host", "device"):
        raise ValueError(f"activation_memory must be None, 'host' or 'device', got {activation_memory!r}")
    named_tensors = set(named_inputs_for_grad_graph.tensors)
    forward_inputs = {t.name: t for t in forward_graph.graph.inputs if t not in named_tensors}
    names = serialisable_activations(gradient_graph.grad_graph_info, named_inputs_for_grad_graph)
    choices = resolve_policy(names, forward_inputs, policy)
    recomputed = {t for t, c in choices.items() if c == "recompute"}
    if recomputed:
        gradient_graph, remap = recompute_activations(gradient_graph, recomputed)
        for handles in (load_handles, store_streams, store_buffers):
            _remapped(handles, remap)
        names = serialisable_activations(gradient_graph.grad_graph_info, named_inputs_for_grad_graph)
    info = gradient_graph.grad_graph_info
    normalise(load_handles)
    shard_groups = {t: g for t, g in store_buffers.items() if isinstance(g, popxl.ReplicaGrouping)}
    buffers: dict[popxl.Tensor, Any] = {t: h for t, h in store_buffers.items() if t not in shard_groups}
    normalise(buffers)
    activations = [
        (i, ec.fwd_tensor)
        for i, ec in enumerate(info.expected_inputs)
        if ec.connection_type is ExpectedConnectionType.Fwd
    ]
    policy_name = {t: name for name, t in names.items()}
    kept: dict[popxl.Tensor, str] = {}
    for _, t in activations:
        if t in buffers or t in named_tensors:
            continue
        if choices[t] == "keep":
            if t in shard_groups:
                raise ValueError(f"Activation {policy_name[t]!r} can't be kept on the device and stored sharded")
            kept[t] = kept_arg_name(policy_name[t])
            continue
        handle = load_handles.get(t)
        if isinstance(handle, RemoteHandle):
            buffers[t] = handle
            continue
        group = shard_groups.get(t)
        buffer = batch_serial_buffer(t, steps, rows, group)
        buffer.memory = activation_memory
        buffers[t] = RemoteHandle(buffer, 0, group)

    fwd_result = batch_serialise(
        forward_graph, steps, load_handles, store_streams, buffers, seed_input, rows, io_mode, keep=kept
    )

    grad_inputs = gradient_graph.graph.inputs
    grad_load_handles: dict[popxl.Tensor, Any] = {}
    grad_kept: dict[popxl.Tensor, str] = {}
    activation_args = NamedTensors()
    for i, t in activations:
        name = _name_of(named_inputs_for_grad_graph, t)
        if name is not None:
            activation_args.insert(name, grad_inputs[i], overwrite=True)
        elif t in kept:
            grad_kept[grad_inputs[i]] = kept[t]
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

    grad_result = batch_serialise(
        gradient_graph, steps, grad_load_handles, store_streams, buffers, None, rows, io_mode, keep=grad_kept
    )
    grad_result.graph.grad_graph_info = info
    factories = NamedVariableFactories.from_dict(
        {
            name: VariableFactory(partial(np.zeros, (steps * rows, *t.shape), t.dtype.as_numpy()), t.dtype)
            for t, name in kept.items()
        }
    )
    fwd_result.kept = grad_result.kept = factories
    return fwd_result, grad_result
