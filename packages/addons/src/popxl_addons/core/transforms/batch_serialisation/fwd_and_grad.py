"""batch_serialise_fwd_and_grad: serialise a forward graph and its gradient graph together.

The forward loop passes every activation the gradient graph needs to the
gradient loop as its policy says (see `policy`): through a remote buffer
(sharded over a replica group when asked), through a stack held on the
device, or not at all, the gradient graph recomputing it.
"""

from __future__ import annotations

from collections.abc import MutableMapping
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import numpy as np

import popxl
from popxl.transforms import ExpectedConnectionType, GradGraphInfo
from popxl_addons.core.modules.graph import GraphWithNamedArgs
from popxl_addons.core.modules.named_tensors import NamedTensors
from popxl_addons.core.modules.variable_factory import NamedVariableFactories, VariableFactory
from popxl_addons.core.transforms.batch_serialisation.buffers import batch_serial_buffer
from popxl_addons.core.transforms.batch_serialisation.handles import Handles, RemoteHandle, normalise
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

    `steps`, `rows`, `io_mode`, `policy` and `activation_memory` are as in
    `Serialisation`. With "keep", both results' args hold the device stack
    under "kept.<name>" and `kept` holds its factory: init it once and bind
    it to both graphs. With "recompute", the gradient graph is wrapped first
    and the forward inputs it needs are stored ("host" unless the policy
    keeps them); handles keyed by the gradient graph's tensors are re-keyed
    to the wrapper's. `store_buffers` may map an activation to a
    ReplicaGrouping to store it sharded over that group.
    `named_inputs_for_grad_graph` names the forward tensors (usually the
    variables) the gradient graph receives directly. The gradient graph's args
    are reassigned: activation names first, then its own.
    """
    serialisation = Serialisation(
        steps=steps,
        rows=rows,
        io_mode=io_mode,
        policy=policy if policy is not None else {},
        activation_memory=activation_memory,
    )
    handles = Handles(load_handles, store_streams, store_buffers, seed_input)
    return serialisation.serialise(forward_graph, gradient_graph, named_inputs_for_grad_graph, handles)


@dataclass(frozen=True, kw_only=True)
class Serialisation:
    """How a forward graph and its gradient graph are serialised together.

    `steps` micro-batches a call of each loop, over `rows` rows of the remote
    buffers, with `io_mode` (one of `IO_MODES`). `policy` maps activations
    (tensors, or names from `serialisable_activations`) to "host" (the
    default), "recompute" or "keep". `activation_memory` places the buffers
    made for "host" activations ("host" or "device", as `RemoteBuffer.memory`);
    None follows the Session's `remote_memory`.
    """

    steps: int
    rows: int = 1
    io_mode: str = "io"
    policy: Policy = field(default_factory=dict)
    activation_memory: str | None = None

    def check(self) -> None:
        """Raise unless `activation_memory` is one a buffer takes (`batch_serialise` checks the rest)."""
        if self.activation_memory not in (None, "host", "device"):
            raise ValueError(f"activation_memory must be None, 'host' or 'device', got {self.activation_memory!r}")

    def serialise(
        self,
        forward_graph: GraphWithNamedArgs,
        gradient_graph: GraphWithNamedArgs,
        named_inputs_for_grad_graph: NamedTensors,
        handles: Handles,
    ) -> tuple[BatchSerialResult, BatchSerialResult]:
        """`batch_serialise_fwd_and_grad` of the two graphs, serialised this way."""
        self.check()
        named = named_inputs_for_grad_graph
        gradient_graph, names, choices = _choices(forward_graph, gradient_graph, named, self.policy, handles)
        placement = _placement(gradient_graph, named, names, choices, handles, self)
        loop = partial(
            batch_serialise,
            steps=self.steps,
            store_streams=handles.store_streams,
            store_buffers=placement.buffers,
            rows=self.rows,
            io_mode=self.io_mode,
        )
        fwd_result = loop(forward_graph, load_handles=handles.load, seed_input=handles.seed_input, keep=placement.kept)
        grad_loads, grad_kept = _gradient_loads(placement, named, handles.load, fwd_result)
        grad_result = loop(gradient_graph, load_handles=grad_loads, keep=grad_kept)
        grad_result.graph.grad_graph_info = placement.info
        fwd_result.kept = grad_result.kept = _stacks(placement.kept, self.steps * self.rows)
        return fwd_result, grad_result


@dataclass
class _Placement:
    """Where the forward loop puts each activation the gradient graph needs."""

    gradient_graph: GraphWithNamedArgs
    info: GradGraphInfo
    # Each activation with the index of the gradient graph's input that takes it.
    activations: list[tuple[int, popxl.Tensor]]
    buffers: dict[popxl.Tensor, Any]
    kept: dict[popxl.Tensor, str]


def _choices(
    forward_graph: GraphWithNamedArgs,
    gradient_graph: GraphWithNamedArgs,
    named: NamedTensors,
    policy: Policy,
    handles: Handles,
) -> tuple[GraphWithNamedArgs, dict[str, popxl.Tensor], dict[popxl.Tensor, str]]:
    """The gradient graph (wrapped to recompute what the policy says), its activations' policy names and the
    choice for each; handles of the old gradient graph's tensors are re-keyed to the wrapper's."""
    named_tensors = set(named.tensors)
    forward_inputs = {t.name: t for t in forward_graph.graph.inputs if t not in named_tensors}
    names = serialisable_activations(gradient_graph.grad_graph_info, named)
    choices = resolve_policy(names, forward_inputs, policy)
    recomputed = {t for t, c in choices.items() if c == "recompute"}
    if recomputed:
        gradient_graph, remap = recompute_activations(gradient_graph, recomputed)
        for mapping in (handles.load, handles.store_streams, handles.store_buffers):
            _remapped(mapping, remap)
        names = serialisable_activations(gradient_graph.grad_graph_info, named)
    return gradient_graph, names, choices


def _placement(
    gradient_graph: GraphWithNamedArgs,
    named: NamedTensors,
    names: dict[str, popxl.Tensor],
    choices: dict[popxl.Tensor, str],
    handles: Handles,
    serialisation: Serialisation,
) -> _Placement:
    """The buffers and stacks the activations go through: the store buffers given, the remote load handles of
    activations loaded already, a stack for each kept one and a new buffer for the rest."""
    info = gradient_graph.grad_graph_info
    normalise(handles.load)
    shard_groups = {t: g for t, g in handles.store_buffers.items() if isinstance(g, popxl.ReplicaGrouping)}
    buffers: dict[popxl.Tensor, Any] = {t: h for t, h in handles.store_buffers.items() if t not in shard_groups}
    normalise(buffers)
    activations = [
        (i, ec.fwd_tensor)
        for i, ec in enumerate(info.expected_inputs)
        if ec.connection_type is ExpectedConnectionType.Fwd
    ]
    named_tensors = set(named.tensors)
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
        handle = handles.load.get(t)
        if isinstance(handle, RemoteHandle):
            buffers[t] = handle
            continue
        group = shard_groups.get(t)
        buffer = batch_serial_buffer(t, serialisation.steps, serialisation.rows, group)
        buffer.memory = serialisation.activation_memory
        buffers[t] = RemoteHandle(buffer, 0, group)
    return _Placement(gradient_graph, info, activations, buffers, kept)


def _gradient_loads(
    placement: _Placement,
    named: NamedTensors,
    load_handles: MutableMapping[popxl.Tensor, Any],
    fwd_result: BatchSerialResult,
) -> tuple[dict[popxl.Tensor, Any], dict[popxl.Tensor, str]]:
    """The gradient loop's load handles and kept stacks; its graph's args are reassigned, activation names
    first, then its own."""
    gradient_graph = placement.gradient_graph
    grad_inputs = gradient_graph.graph.inputs
    grad_load_handles: dict[popxl.Tensor, Any] = {}
    grad_kept: dict[popxl.Tensor, str] = {}
    activation_args = NamedTensors()
    for i, t in placement.activations:
        name = _name_of(named, t)
        if name is not None:
            activation_args.insert(name, grad_inputs[i], overwrite=True)
        elif t in placement.kept:
            grad_kept[grad_inputs[i]] = placement.kept[t]
        else:
            # Every other activation was given a buffer, so the forward loop stored it.
            grad_load_handles[grad_inputs[i]] = fwd_result.stored_buffers[t]
    activation_args.update(gradient_graph.args, overwrite=True)
    gradient_graph.args = activation_args
    for i, ec in enumerate(placement.info.expected_inputs):
        if ec.connection_type is ExpectedConnectionType.FwdGrad:
            handle = load_handles.get(grad_inputs[i])
            if handle is None:
                raise ValueError(
                    f"FwdGrad input (idx={i}) to Gradient graph must have a load_handle specified "
                    f"(the gradient of {ec.fwd_tensor.id})"
                )
            grad_load_handles[grad_inputs[i]] = handle
    return grad_load_handles, grad_kept


def _stacks(kept: dict[popxl.Tensor, str], entries: int) -> NamedVariableFactories:
    """The factories of the kept activations' device stacks, of `entries` entries each."""
    return NamedVariableFactories.from_dict(
        {
            name: VariableFactory(partial(np.zeros, (entries, *t.shape), t.dtype.as_numpy()), t.dtype)
            for t, name in kept.items()
        }
    )
