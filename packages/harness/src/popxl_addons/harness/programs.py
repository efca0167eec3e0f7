"""The two programs of a variant: the module run micro-batch by micro-batch, and serialised."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

import popxl
from popxl import ops
from popxl_addons.core import (
    GraphWithNamedArgs,
    NamedTensors,
    NamedVariableFactories,
    RemoteHandle,
    apply_pre_alias_patterns,
    batch_serial_buffer,
    batch_serialise,
)
from popxl_addons.core.planning import planned_serialisation
from popxl_addons.core.training import Serialisation, StepOptions, buffer_from_stream, build_training_step
from popxl_addons.core.training.step import IO_TILES
from popxl_addons.harness.cases import Variant


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


def _training_step(variant: Variant, serialised: bool) -> Program:
    """The variant's forward and gradient over its micro-batches, serialised or one call each."""
    case, replication = variant.case, variant.layout.replication
    if case.planner_step:
        serialisation = planned_serialisation(variant.steps, variant.io_mode, dict(case.policy), variant.rows)
        options = StepOptions(replication=replication)
    else:
        policy = dict(case.policy)
        serialisation = Serialisation(steps=variant.steps, rows=variant.rows, io_mode=variant.io_mode, policy=policy)
        options = StepOptions(
            store_outputs=False,
            input_gradient=True,
            buffered_input=variant.load == "buffer",
            buffered_gradients=True,
            replication=replication,
            shard_over=variant.layout.tp if case.shard_activation else 1,
        )
    step = build_training_step(
        lambda: case.module(variant.layout),
        popxl.TensorSpec(case.input_shape, popxl.float32),
        micro_batches(variant),
        serialisation if serialised else None,
        options,
    )
    program = Program(
        step.ir, inputs=step.inputs, outputs=step.outputs, weights=step.weights, results=step.accumulators
    )
    if step.serialised is not None and step.gradient is not None:
        program.compute, program.compute_grad = step.forward.graph, step.gradient.graph
        program.serialised = step.serialised.forward.graph.graph
        program.serialised_grad = step.serialised.gradient.graph.graph
    return program


def normal_program(variant: Variant) -> Program:
    """The module called once per micro-batch, unrolled, with no transform."""
    if variant.case.grad:
        return _training_step(variant, serialised=False)
    ir = _ir(variant)
    with ir.main_graph, popxl.in_sequence(True):
        args, graph, x = _create(variant)
        program = Program(ir, inputs={"x": x})
        program.weights = args.init()
        bound = graph.bind(program.weights)
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


def _input_handle(variant: Variant, x: popxl.HostToDeviceStream) -> Any:
    return x if variant.load == "stream" else buffer_from_stream(x, variant.steps, variant.rows)


def serialised_program(variant: Variant) -> Program:
    """The module serialised with the variant's io_mode, steps, rows, stores and loads."""
    if variant.case.grad:
        return _training_step(variant, serialised=True)
    ir = _ir(variant)
    with ir.main_graph, popxl.in_sequence(True):
        args, graph, x = _create(variant)
        program = Program(ir, inputs={"x": x}, compute=graph.graph)
        program.weights = args.init()
        if variant.case.chain > 1:
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
    load = _input_handle(variant, x)
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


def host_data(variant: Variant, program: Program, rng: np.random.Generator) -> dict[str, np.ndarray[Any, Any]]:
    """Random data for every input stream: per replica for x, shared by all replicas for the output gradients."""
    count, replicas = micro_batches(variant), variant.layout.replication
    data = {}
    for name, stream in program.inputs.items():
        shape = stream.shape
        values = rng.normal(size=(count, replicas, *shape)).astype(np.float32)
        if name.startswith("dy"):
            values = np.repeat(values[:, :1], replicas, axis=1)
        data[name] = values
    return data


def feed(
    program: Program, data: dict[str, np.ndarray[Any, Any]]
) -> dict[popxl.HostToDeviceStream, np.ndarray[Any, Any]]:
    """`data`, given as `(micro-batches, replicas, *shape)`, in the host layout of the program's streams."""
    layout = popxl.HostLayout.of(program.ir)
    return {stream: layout.from_transfers_major(data[name]) for name, stream in program.inputs.items()}
