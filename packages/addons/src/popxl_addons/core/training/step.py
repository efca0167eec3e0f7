"""The training step: a module's forward and its gradient, accumulated over micro-batches, serialised or not.

One builder for every program that runs such a step: the planner's measurements and `SerialisationPlan.apply`,
the harness's equivalence programs and `plan --check`, the examples' phased stages and the benchmarks.
`serialise_step` serialises a step inside the graph being built; `build_training_step` builds a whole
program around a module, with its host streams and variables.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import popxl
from popxl import ops
from popxl.transforms import ExpectedConnectionType
from popxl_addons.core.modules.graph import GraphWithNamedArgs
from popxl_addons.core.modules.module import Module
from popxl_addons.core.modules.named_replica_grouping import NamedReplicaGrouping
from popxl_addons.core.modules.named_tensors import NamedTensors
from popxl_addons.core.modules.variable_factory import NamedVariableFactories
from popxl_addons.core.transforms.autodiff import autodiff_with_accumulation
from popxl_addons.core.transforms.batch_serialisation import BatchSerialResult, RemoteHandle, batch_serial_buffer
from popxl_addons.core.transforms.batch_serialisation.fwd_and_grad import Serialisation
from popxl_addons.core.transforms.batch_serialisation.handles import Handles
from popxl_addons.core.transforms.batch_serialisation.policy import serialisable_activations
from popxl_addons.core.transforms.patterns import apply_pre_alias_patterns
from popxl_addons.core.transforms.recomputation import recompute_graph

IO_TILES = 32
Load = popxl.HostToDeviceStream | RemoteHandle
Store = popxl.DeviceToHostStream | RemoteHandle
Groupings = NamedReplicaGrouping | Mapping[str, popxl.ReplicaGrouping]


@dataclass(kw_only=True)
class SerialisedStep:
    """A serialised step: the forward and gradient loops, the gradient graph they loop over (before any
    recomputation the policy adds) and the factories of its accumulators."""

    forward: BatchSerialResult
    gradient: BatchSerialResult
    gradient_graph: GraphWithNamedArgs
    accumulators: NamedVariableFactories


def _gradient(
    forward: GraphWithNamedArgs, input_gradient: bool, groupings: Groupings | None, recompute: bool
) -> tuple[NamedVariableFactories, GraphWithNamedArgs]:
    """The gradient graph accumulating every variable's gradient, with the first input's when asked."""
    required = forward.graph.inputs[:1] if input_gradient else []
    accumulators, gradient = autodiff_with_accumulation(
        forward, forward.args.tensors, grads_required=required, replica_groupings=groupings
    )
    return accumulators, recompute_graph(gradient) if recompute else gradient


def _output_gradients(gradient: GraphWithNamedArgs) -> list[popxl.Tensor]:
    """The gradient graph's inputs that take the gradient of each forward output, in output order."""
    expected = gradient.grad_graph_info.expected_inputs
    return [t for t, ec in zip(gradient.graph.inputs, expected) if ec.connection_type is ExpectedConnectionType.FwdGrad]


def serialise_step(
    forward: GraphWithNamedArgs,
    serialisation: Serialisation,
    *,
    inputs: Sequence[Load],
    output_gradients: Sequence[Load],
    outputs: Sequence[Store | None] = (),
    input_gradient: Store | None = None,
    sharded_activations: Mapping[int, popxl.ReplicaGrouping] | None = None,
    replica_groupings: Groupings | None = None,
    recompute: bool = False,
) -> SerialisedStep:
    """`forward` and its gradient (accumulating every variable's) serialised as `serialisation` says.

    `inputs` and `output_gradients` are where each input of `forward` and the
    gradient of each of its outputs are loaded from; `outputs`, where each
    output is stored (None, or past the end: not stored); `input_gradient`,
    where the gradient of the first input goes (None: not computed).
    `sharded_activations` stores activations the gradient needs, by their
    index in `serialisable_activations`, sharded over a replica group.
    `replica_groupings` groups the accumulators as `autodiff_with_accumulation`
    does; with `recompute`, the gradient graph runs the forward again rather
    than take its activations (`recompute_graph`).
    """
    own = list(forward.graph.outputs)  # autodiff adds the activations it needs as outputs
    accumulators, gradient = _gradient(forward, input_gradient is not None, replica_groupings, recompute)
    fwd_grads = _output_gradients(gradient)
    if len(output_gradients) != len(fwd_grads):
        raise ValueError(f"{len(output_gradients)} output gradient handle(s) for {len(fwd_grads)} output(s)")
    load_handles: dict[popxl.Tensor, Any] = dict(zip(forward.graph.inputs, inputs))
    load_handles.update(zip(fwd_grads, output_gradients))
    stores: list[tuple[popxl.Tensor, Store | None]] = list(zip(own, outputs))
    if input_gradient is not None:
        stores.append((gradient.graph.outputs[0], input_gradient))
    store_streams = {t: h for t, h in stores if isinstance(h, popxl.DeviceToHostStream)}
    store_buffers: dict[popxl.Tensor, Any] = {t: h for t, h in stores if isinstance(h, RemoteHandle)}
    activations = list(serialisable_activations(gradient.grad_graph_info, forward.args).values())
    store_buffers.update({activations[i]: group for i, group in (sharded_activations or {}).items()})
    handles = Handles(load_handles, store_streams, store_buffers)
    fwd, grad = serialisation.serialise(forward, gradient, forward.args, handles)
    return SerialisedStep(forward=fwd, gradient=grad, gradient_graph=gradient, accumulators=accumulators)


@dataclass(frozen=True, kw_only=True)
class StepOptions:
    """What a training-step program holds around its module, besides how it is serialised.

    The defaults are the plain step the planner measures: the module's
    outputs stored to host streams (`y0`, `y1`...: XLA would drop a forward
    whose activations are all recomputed) and their gradients loaded from
    host streams (`dy0`...). `gradient` False leaves the forward alone
    (unrolled only). `input_gradient` adds the gradient of the input (`dx`).
    `buffered_input` and `buffered_gradients` make the serialised loops load
    the input, or the output gradients, from remote buffers the host streams
    fill first. `replication` replicas each keep their own accumulators, so
    that every replica's gradients can be read; `shard_over` > 1 consecutive
    replicas hold shards of the output gradients' buffers and of the first
    activation the gradient needs (replicated tensor sharding).
    """

    gradient: bool = True
    store_outputs: bool = True
    input_gradient: bool = False
    buffered_input: bool = False
    buffered_gradients: bool = False
    replication: int = 1
    shard_over: int = 1


@dataclass(kw_only=True)
class TrainingStep:
    """A training-step program: its Ir, host streams by name, variables, and the module's graphs.

    `weights` are the module's variables; `kept`, the device stacks of the
    activations the policy keeps. `forward` and `gradient` are one
    micro-batch's graphs (`gradient` before any recomputation the policy
    adds); `serialised` holds the loops, None when unrolled.
    """

    ir: popxl.Ir
    inputs: dict[str, popxl.HostToDeviceStream]
    outputs: dict[str, popxl.DeviceToHostStream]
    forward: GraphWithNamedArgs
    weights: NamedTensors = field(default_factory=NamedTensors)
    accumulators: NamedTensors = field(default_factory=NamedTensors)
    kept: NamedTensors = field(default_factory=NamedTensors)
    gradient: GraphWithNamedArgs | None = None
    serialised: SerialisedStep | None = None


def _module(make_module: Callable[[], Module]) -> Module:
    module = make_module()
    if not isinstance(module, Module):
        raise TypeError(f"make_module() returned {type(module).__name__}, not a popxl_addons Module")
    return module


@dataclass
class _Streams:
    """A step program's host streams: the input, each output's gradient and value, and the input's gradient."""

    x: popxl.HostToDeviceStream
    dys: list[popxl.HostToDeviceStream]
    ys: list[popxl.DeviceToHostStream]
    dx: popxl.DeviceToHostStream | None

    def inputs(self) -> dict[str, popxl.HostToDeviceStream]:
        return {"x": self.x, **{f"dy{i}": s for i, s in enumerate(self.dys)}}

    def outputs(self) -> dict[str, popxl.DeviceToHostStream]:
        named = {f"y{i}": s for i, s in enumerate(self.ys)}
        return named if self.dx is None else {**named, "dx": self.dx}


def build_training_step(
    make_module: Callable[[], Module],
    micro_batch: popxl.TensorSpec,
    micro_batches: int,
    serialisation: Serialisation | None = None,
    options: StepOptions | None = None,
) -> TrainingStep:
    """A program of one training step of `make_module()`'s module over `micro_batches` micro-batches of its
    one input, `micro_batch` each: serialised as `serialisation` says (`steps * rows` micro-batches), or, without,
    the forward and gradient graphs called once per micro-batch."""
    options = options or StepOptions()
    if serialisation is not None and serialisation.steps * serialisation.rows != micro_batches:
        raise ValueError(f"{micro_batches} micro-batches is not steps * rows of {serialisation}")
    if serialisation is not None and not options.gradient:
        raise ValueError("A serialised training step has a gradient")
    ir = popxl.Ir(replication=options.replication)
    ir.session_options.numIOTiles = IO_TILES
    with ir.main_graph, popxl.in_sequence(True):
        x = popxl.h2d_stream(micro_batch.shape, micro_batch.dtype, "x")
        factories, forward = _module(make_module).create_graph(x.spec)
        own = list(forward.graph.outputs)
        streams = _Streams(
            x,
            [popxl.h2d_stream(t.shape, t.dtype, f"dy{i}") for i, t in enumerate(own)] if options.gradient else [],
            [popxl.d2h_stream(t.shape, t.dtype, f"y{i}") for i, t in enumerate(own)] if options.store_outputs else [],
            popxl.d2h_stream(x.shape, x.dtype, "dx") if options.input_gradient else None,
        )
        groupings = None
        if options.replication > 1:
            groupings = dict.fromkeys(forward.args.to_dict(), ir.replica_grouping(group_size=1))
        step = TrainingStep(ir=ir, inputs=streams.inputs(), outputs=streams.outputs(), forward=forward)
        if serialisation is None:
            _unrolled(step, factories, streams, micro_batches, options, groupings)
        else:
            _serialised(step, factories, streams, serialisation, options, groupings)
    apply_pre_alias_patterns(ir)
    ir.num_host_transfers = micro_batches
    return step


def _unrolled(
    step: TrainingStep,
    factories: NamedVariableFactories,
    streams: _Streams,
    micro_batches: int,
    options: StepOptions,
    groupings: Groupings | None,
) -> None:
    """Each micro-batch's forward, then its gradient, one call each."""
    step.weights = factories.init()
    bound = step.forward.bind(step.weights)
    if options.gradient:
        accumulators, step.gradient = _gradient(step.forward, options.input_gradient, groupings, recompute=False)
        step.accumulators = accumulators.init()
    for _ in range(micro_batches):
        site = bound.call_with_info(ops.host_load(streams.x))
        for stream, out in zip(streams.ys, site.outputs):
            ops.host_store(stream, out)
        if step.gradient is not None:
            feeds = {t: ops.host_load(s) for t, s in zip(_output_gradients(step.gradient), streams.dys)}
            args = {**feeds, **step.gradient.grad_graph_info.inputs_dict(site)}
            grads = step.gradient.bind(step.accumulators).call(args=args)
            if streams.dx is not None:
                ops.host_store(streams.dx, grads[0])


def buffer_from_stream(
    stream: popxl.HostToDeviceStream, steps: int, rows: int = 1, group: popxl.ReplicaGrouping | None = None
) -> RemoteHandle:
    """A remote buffer of the `steps * rows` micro-batches `stream` carries, filled from it (sharded over `group`)."""
    buffer = batch_serial_buffer(stream.spec, steps, rows, group)
    for entry in range(steps * rows):
        value = ops.host_load(stream)
        if group is not None:
            value = ops.collectives.replica_sharded_slice(value, group)
        ops.remote_store(buffer, entry, value)
    return RemoteHandle(buffer, 0, group)


def _serialised(
    step: TrainingStep,
    factories: NamedVariableFactories,
    streams: _Streams,
    serialisation: Serialisation,
    options: StepOptions,
    groupings: Groupings | None,
) -> None:
    """The forward loop, then the gradient loop, for each row."""
    group = step.ir.replica_grouping(stride=1, group_size=options.shard_over) if options.shard_over > 1 else None
    steps, rows = serialisation.steps, serialisation.rows
    x: Load = buffer_from_stream(streams.x, steps, rows) if options.buffered_input else streams.x
    dys: list[Load] = list(streams.dys)
    if options.buffered_gradients:
        dys = [buffer_from_stream(s, steps, rows, group) for s in streams.dys]
    serialised = serialise_step(
        step.forward,
        serialisation,
        inputs=[x],
        output_gradients=dys,
        outputs=streams.ys,
        input_gradient=streams.dx,
        sharded_activations={0: group} if group is not None else None,
        replica_groupings=groupings,
    )
    step.serialised, step.gradient = serialised, serialised.gradient_graph
    step.weights = factories.init()
    step.kept = serialised.forward.kept.init()
    step.accumulators = serialised.accumulators.init()
    fwd_vars = step.weights.copy()
    fwd_vars.update(step.kept)
    grad_vars = step.accumulators.copy()
    grad_vars.update(fwd_vars)
    fwd_bound = serialised.forward.graph.bind(fwd_vars)
    grad_bound = serialised.gradient.graph.bind(grad_vars)
    for row in range(serialisation.rows):
        fwd_bound.call(row)
        grad_bound.call(row)
