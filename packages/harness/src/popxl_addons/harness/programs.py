"""The two programs of a variant: the module run micro-batch by micro-batch, and serialised."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

import popxl
from popxl import ops
from popxl.transforms import ExpectedConnectionType
from popxl_addons.core import (
    GraphWithNamedArgs,
    NamedTensors,
    NamedVariableFactories,
    RemoteHandle,
    apply_pre_alias_patterns,
    autodiff_with_accumulation,
    batch_serial_buffer,
    batch_serialise,
    batch_serialise_fwd_and_grad,
)
from popxl_addons.harness.cases import Variant

IO_TILES = 32


@dataclass
class Program:
    """A built Ir, its streams, the variables to initialise and the tensors to read afterwards."""

    ir: popxl.Ir
    inputs: dict[str, popxl.HostToDeviceStream] = field(default_factory=dict)
    outputs: dict[str, popxl.DeviceToHostStream] = field(default_factory=dict)
    weights: NamedTensors = field(default_factory=NamedTensors)
    results: NamedTensors = field(default_factory=NamedTensors)
    serialised: popxl.Graph | None = None
    compute: popxl.Graph | None = None
    serialised_grad: popxl.Graph | None = None
    compute_grad: popxl.Graph | None = None


def _ir(variant: Variant) -> popxl.Ir:
    ir = popxl.Ir(replication=variant.layout.replication)
    ir.session_options.numIOTiles = IO_TILES
    return ir


def micro_batches(variant: Variant) -> int:
    """Micro-batches each program processes."""
    return variant.steps if variant.case.chain > 1 else variant.steps * variant.rows


def store_slot(variant: Variant, row: int, step: int) -> int:
    """The buffer entry the serialised graph writes for (row, step), from the row-offset rules."""
    steps, rows = variant.steps, variant.rows
    kind = variant.store
    if kind == "none":
        return step
    if kind == "int":
        return (row + 1) * steps + step
    if kind == "callable":
        return (rows - 1 - row) * steps + step
    return row * steps + step


def _row_offset(variant: Variant) -> Any:
    rows = variant.rows
    return {"zero": 0, "int": 1, "none": None, "callable": lambda r: (rows - 1) - r}[variant.store]


def _create(
    variant: Variant,
) -> tuple[NamedVariableFactories, GraphWithNamedArgs, popxl.HostToDeviceStream]:
    x = popxl.h2d_stream(variant.case.input_shape, popxl.float32, "x")
    args, graph = variant.case.module(variant.layout).create_graph(x.spec)
    return args, graph, x


def _accumulate(
    variant: Variant, ir: popxl.Ir, graph: GraphWithNamedArgs
) -> tuple[NamedVariableFactories, GraphWithNamedArgs]:
    # Per-replica accumulators, so that every replica's gradients are compared.
    groupings = None
    if variant.layout.replication > 1:
        own = ir.replica_grouping(group_size=1)
        groupings = dict.fromkeys(graph.args.to_dict(), own)
    return autodiff_with_accumulation(
        graph, graph.args.tensors, grads_required=graph.graph.inputs[:1], replica_groupings=groupings
    )


def normal_program(variant: Variant) -> Program:
    """The module called once per micro-batch, unrolled, with no transform."""
    ir = _ir(variant)
    with ir.main_graph, popxl.in_sequence(True):
        args, graph, x = _create(variant)
        program = Program(ir, inputs={"x": x})
        program.weights = args.init()
        bound = graph.bind(program.weights)
        if variant.case.grad:
            dargs, dgraph = _accumulate(variant, ir, graph)
            program.results = dargs.init()
            dbound = dgraph.bind(program.results)
            dy = popxl.h2d_stream(graph.graph.outputs[0].shape, popxl.float32, "dy")
            program.inputs["dy"] = dy
            dx = popxl.d2h_stream(x.shape, popxl.float32, "dx")
            program.outputs["dx"] = dx
            for _ in range(micro_batches(variant)):
                site = bound.call_with_info(ops.host_load(x))
                (g,) = dbound.call(ops.host_load(dy), args=dgraph.grad_graph_info.inputs_dict(site))
                ops.host_store(dx, g)
        else:
            out = graph.graph.outputs[0]
            y_stream = popxl.d2h_stream(out.shape, out.dtype, "y")
            program.outputs["y"] = y_stream
            for _ in range(micro_batches(variant)):
                y = ops.host_load(x)
                applications = variant.case.chain + variant.rows - 1 if variant.case.chain > 1 else 1
                for _ in range(applications):
                    (y,) = bound.call(y)
                ops.host_store(y_stream, y)
    apply_pre_alias_patterns(ir)
    ir.num_host_transfers = micro_batches(variant)
    return program


def _fill_buffer(
    variant: Variant, buffer: popxl.RemoteBuffer, stream: popxl.HostToDeviceStream, group: Any = None
) -> None:
    for n in range(variant.rows):
        for j in range(variant.steps):
            value = ops.host_load(stream)
            if group is not None:
                value = ops.collectives.replica_sharded_slice(value, group)
            ops.remote_store(buffer, n * variant.steps + j, value)


def _input_handle(variant: Variant, graph: GraphWithNamedArgs, x: popxl.HostToDeviceStream) -> Any:
    if variant.load == "stream":
        return x
    buffer = batch_serial_buffer(graph.graph.inputs[0], steps=variant.steps, rows=variant.rows)
    _fill_buffer(variant, buffer, x)
    return (buffer, 0)


def serialised_program(variant: Variant) -> Program:
    """The module serialised with the variant's io_mode, steps, rows, stores and loads."""
    ir = _ir(variant)
    with ir.main_graph, popxl.in_sequence(True):
        args, graph, x = _create(variant)
        program = Program(ir, inputs={"x": x}, compute=graph.graph)
        program.weights = args.init()
        if variant.case.grad:
            _serialise_fwd_and_grad(variant, ir, program, graph, x)
        elif variant.case.chain > 1:
            _serialise_chain(variant, program, graph, x)
        else:
            _serialise_forward(variant, program, graph, x)
    apply_pre_alias_patterns(ir)
    ir.num_host_transfers = micro_batches(variant)
    return program


def _serialise_forward(
    variant: Variant, program: Program, graph: GraphWithNamedArgs, x: popxl.HostToDeviceStream
) -> None:
    x_in, y_out = graph.graph.inputs[0], graph.graph.outputs[0]
    load = _input_handle(variant, graph, x)
    y_stream = popxl.d2h_stream(y_out.shape, y_out.dtype, "y")
    program.outputs["y"] = y_stream
    if variant.store == "stream":
        result = batch_serialise(
            graph, variant.steps, {x_in: load}, {y_out: y_stream}, {}, rows=variant.rows, io_mode=variant.io_mode
        )
    else:
        buffer = batch_serial_buffer(y_out, steps=variant.steps, rows=variant.rows)
        handle = RemoteHandle(buffer, _row_offset(variant))
        result = batch_serialise(
            graph, variant.steps, {x_in: load}, {}, {y_out: handle}, rows=variant.rows, io_mode=variant.io_mode
        )
    program.serialised = result.graph.graph
    bound = result.graph.bind(program.weights)
    for n in range(variant.rows):
        bound.call(n)
    if variant.store != "stream":
        for n in range(variant.rows):
            for j in range(variant.steps):
                ops.host_store(y_stream, ops.remote_load(buffer, store_slot(variant, n, j)))


def _serialise_chain(
    variant: Variant, program: Program, graph: GraphWithNamedArgs, x: popxl.HostToDeviceStream
) -> None:
    x_in, y_out = graph.graph.inputs[0], graph.graph.outputs[0]
    steps, rows, mode = variant.steps, variant.rows, variant.io_mode
    buffer = batch_serial_buffer(y_out, steps=steps)
    y_stream = popxl.d2h_stream(y_out.shape, y_out.dtype, "y")
    program.outputs["y"] = y_stream
    first = batch_serialise(graph, steps, {x_in: x}, {}, {y_out: (buffer, 0)}, io_mode=mode)
    middle = batch_serialise(graph, steps, {x_in: (buffer, 0)}, {}, {y_out: (buffer, 1)}, rows=rows, io_mode=mode)
    last = batch_serialise(graph, steps, {x_in: (buffer, rows)}, {y_out: y_stream}, {}, io_mode=mode)
    program.serialised = middle.graph.graph
    first.graph.bind(program.weights).call(0)
    for n in range(rows):
        middle.graph.bind(program.weights).call(n)
    last.graph.bind(program.weights).call(0)


def _serialise_fwd_and_grad(
    variant: Variant,
    ir: popxl.Ir,
    program: Program,
    graph: GraphWithNamedArgs,
    x: popxl.HostToDeviceStream,
) -> None:
    dargs, dgraph = _accumulate(variant, ir, graph)
    program.results = dargs.init()
    dy_in = dgraph.graph.inputs[0]
    dy = popxl.h2d_stream(dy_in.shape, popxl.float32, "dy")
    dx = popxl.d2h_stream(x.shape, popxl.float32, "dx")
    program.inputs["dy"], program.outputs["dx"] = dy, dx
    shard_group = None
    store_buffers: dict[popxl.Tensor, Any] = {}
    if variant.case.shard_activation and variant.layout.tp > 1:
        shard_group = ir.replica_grouping(stride=1, group_size=variant.layout.tp)
        activations = [
            ec.fwd_tensor
            for ec in dgraph.grad_graph_info.expected_inputs
            if ec.connection_type is ExpectedConnectionType.Fwd and ec.fwd_tensor not in graph.args.tensors
        ]
        store_buffers[activations[0]] = shard_group
    dy_buffer = batch_serial_buffer(dy_in, steps=variant.steps, rows=variant.rows, shard_group=shard_group)
    load = _input_handle(variant, graph, x)
    _fill_buffer(variant, dy_buffer, dy, shard_group)
    fwd, grad = batch_serialise_fwd_and_grad(
        graph,
        dgraph,
        graph.args,
        variant.steps,
        load_handles={graph.graph.inputs[0]: load, dy_in: (dy_buffer, 0, shard_group)},
        store_streams={dgraph.graph.outputs[0]: dx},
        store_buffers=store_buffers,
        rows=variant.rows,
        io_mode=variant.io_mode,
        policy=dict(variant.case.policy),
    )
    program.serialised = fwd.graph.graph
    program.serialised_grad, program.compute_grad = grad.graph.graph, dgraph.graph
    # Kept activations' stacks: variables both serialised graphs are bound to (not weights, which get random data).
    fwd_vars = program.weights.copy()
    fwd_vars.update(fwd.kept.init())
    grad_vars = program.results.copy()
    grad_vars.update(fwd_vars)
    fwd_bound = fwd.graph.bind(fwd_vars)
    grad_bound = grad.graph.bind(grad_vars)
    for n in range(variant.rows):
        fwd_bound.call(n)
        grad_bound.call(n)


def host_data(variant: Variant, program: Program, rng: np.random.Generator) -> dict[str, np.ndarray[Any, Any]]:
    """Random data for every input stream: per replica for x, shared by all replicas for dy."""
    count, replicas = micro_batches(variant), variant.layout.replication
    data = {}
    for name, stream in program.inputs.items():
        shape = stream.shape
        values = rng.normal(size=(count, replicas, *shape)).astype(np.float32)
        if name == "dy":
            values = np.repeat(values[:, :1], replicas, axis=1)
        data[name] = values
    return data


def feed(
    program: Program, data: dict[str, np.ndarray[Any, Any]]
) -> dict[popxl.HostToDeviceStream, np.ndarray[Any, Any]]:
    """`data`, given as `(micro-batches, replicas, *shape)`, in the host layout of the program's streams."""
    layout = popxl.HostLayout.of(program.ir)
    return {stream: layout.from_transfers_major(data[name]) for name, stream in program.inputs.items()}
