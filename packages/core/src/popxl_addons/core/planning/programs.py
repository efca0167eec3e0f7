"""The programs the planner compiles: one micro-batch step, its forward alone, and the serialised batch.

Each takes the module's one input and the gradient of each of its outputs from
host streams, stores the module's outputs to host streams (as a program that
uses them would: otherwise XLA drops a forward whose activations are all
recomputed), and accumulates the gradients of every variable.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

import popxl
from popxl import ops
from popxl.lowering import fit
from popxl.transforms import ExpectedConnectionType
from popxl.units import format_bytes
from popxl_addons.core.autodiff import autodiff_with_accumulation
from popxl_addons.core.batch_serialisation import batch_serialise_fwd_and_grad
from popxl_addons.core.batch_serialisation.policy import serialisable_activations
from popxl_addons.core.graph import GraphWithNamedArgs
from popxl_addons.core.module import Module
from popxl_addons.core.named_tensors import NamedTensors

IO_TILES = 32
Array = np.ndarray[Any, Any]


def nbytes(t: popxl.Tensor | popxl.TensorSpec) -> int:
    """Bytes of one tensor."""
    return math.prod(t.shape) * t.dtype.as_numpy().itemsize


def micro_batch_spec(input_spec: popxl.TensorSpec, steps: int, batch_axis: int) -> popxl.TensorSpec:
    """The spec of one of `steps` micro-batches of `input_spec` along `batch_axis`."""
    shape = list(input_spec.shape)
    if shape[batch_axis] % steps:
        raise ValueError(f"steps={steps} does not divide the global batch of {shape[batch_axis]} (axis {batch_axis})")
    shape[batch_axis] //= steps
    return popxl.TensorSpec(tuple(shape), input_spec.dtype)


@dataclass
class StepProgram:
    """A built program, the feeds for one run, and what the planner reads off its graphs."""

    ir: popxl.Ir
    feeds: dict[popxl.HostToDeviceStream, Array] = field(default_factory=dict)
    accumulators: NamedTensors = field(default_factory=NamedTensors)
    weights: NamedTensors = field(default_factory=NamedTensors)
    activation_bytes: dict[str, int] = field(default_factory=dict)
    input_bytes: dict[str, int] = field(default_factory=dict)
    variable_bytes: int = 0


@dataclass
class _Graphs:
    """A fresh module's forward and gradient graphs, with the streams that feed them."""

    x: popxl.HostToDeviceStream
    args: Any
    graph: GraphWithNamedArgs
    dargs: Any
    dgraph: GraphWithNamedArgs
    grads: list[popxl.HostToDeviceStream]
    outputs: list[popxl.Tensor]


def _graphs(make_module: Callable[[], Module], spec: popxl.TensorSpec) -> _Graphs:
    x = popxl.h2d_stream(spec.shape, spec.dtype, "x")
    module = make_module()
    if not isinstance(module, Module):
        raise TypeError(f"make_module() returned {type(module).__name__}, not a popxl_addons Module")
    args, graph = module.create_graph(x.spec)
    # Autodiff adds the activations the gradient needs as outputs: the module's own are those before it.
    outputs = list(graph.graph.outputs)
    dargs, dgraph = autodiff_with_accumulation(graph, graph.args.tensors)
    info = dgraph.grad_graph_info
    grads = [
        popxl.h2d_stream(t.shape, t.dtype, f"d{i}")
        for i, (t, ec) in enumerate(zip(dgraph.graph.inputs, info.expected_inputs))
        if ec.connection_type is ExpectedConnectionType.FwdGrad
    ]
    return _Graphs(x, args, graph, dargs, dgraph, grads, outputs)


def _feeds(
    streams: list[popxl.HostToDeviceStream], transfers: int, seed: int = 0
) -> dict[popxl.HostToDeviceStream, Array]:
    """Random normal data for each stream, made in its dtype (float32 draws for narrower floats).

    Refused with `popxl.OutOfMemoryError` before anything is drawn where the host cannot hold it.
    """
    lead = (transfers,) if transfers > 1 else ()
    sizes = {s: math.prod((*lead, *s.shape)) * s.dtype.as_numpy().itemsize for s in streams}
    available = fit.host_available()
    if available is not None and sum(sizes.values()) > available:
        largest = "\n".join(f"  {format_bytes(n):>9}  stream {s.tensor_id!r}" for s, n in sizes.items())
        raise popxl.OutOfMemoryError(
            f"The planner's input data would take {format_bytes(sum(sizes.values()))} of host memory, but this "
            f"machine has {format_bytes(available)} available. Nothing was run.\n{largest}\nTo fit: a smaller "
            "global batch or input shape."
        )
    rng = np.random.default_rng(seed)
    out = {}
    for s in streams:
        dtype = s.dtype.as_numpy()
        draw = dtype if dtype in (np.float32, np.float64) else np.float32
        out[s] = rng.standard_normal(size=(*lead, *s.shape), dtype=draw).astype(dtype, copy=False)
    return out


def _new_ir() -> popxl.Ir:
    ir = popxl.Ir()
    ir.session_options.numIOTiles = IO_TILES
    return ir


def _describe(program: StepProgram, graph: GraphWithNamedArgs, dgraph: GraphWithNamedArgs) -> StepProgram:
    """`program` with the bytes of one micro-batch's activations, forward inputs and variables filled in."""
    named = graph.args
    activations = serialisable_activations(dgraph.grad_graph_info, named)
    program.activation_bytes = {name: nbytes(t) for name, t in activations.items()}
    program.input_bytes = {t.name: nbytes(t) for t in graph.graph.inputs if t not in set(named.tensors)}
    program.variable_bytes = sum(nbytes(t) for t in program.accumulators.tensors)
    return program


def step_program(make_module: Callable[[], Module], spec: popxl.TensorSpec, gradient: bool = True) -> StepProgram:
    """One micro-batch: the forward graph, then (when `gradient`) the gradient graph on its activations."""
    ir = _new_ir()
    with ir.main_graph, popxl.in_sequence(True):
        g = _graphs(make_module, spec)
        weights = g.args.init()
        accums = g.dargs.init() if gradient else NamedTensors()
        accums.update(weights)
        site = g.graph.bind(weights).call_with_info(ops.host_load(g.x))
        for i, out in enumerate(site.outputs[: len(g.outputs)]):
            ops.host_store(popxl.d2h_stream(out.shape, out.dtype, f"y{i}"), out)
        if gradient:
            feeds = {t: ops.host_load(s) for t, s in zip(g.dgraph.graph.inputs, g.grads)}
            g.dgraph.bind(accums).call(args={**feeds, **g.dgraph.grad_graph_info.inputs_dict(site)})
    streams = [g.x, *g.grads] if gradient else [g.x]
    return _describe(StepProgram(ir, _feeds(streams, 1), accums, weights), g.graph, g.dgraph)


def serialised_program(
    make_module: Callable[[], Module],
    spec: popxl.TensorSpec,
    steps: int,
    io_mode: str,
    policy: Mapping[str, str],
    data: Mapping[str, Array] | None = None,
) -> StepProgram:
    """The whole batch: `steps` micro-batches of `spec` through `batch_serialise_fwd_and_grad`.

    `data` may give the feeds ("x", and "d0", "d1"... for the output
    gradients), each `(steps, *shape)` (without the lead for one step).
    """
    ir = _new_ir()
    with ir.main_graph, popxl.in_sequence(True):
        g = _graphs(make_module, spec)
        grad_inputs = [
            t
            for t, ec in zip(g.dgraph.graph.inputs, g.dgraph.grad_graph_info.expected_inputs)
            if ec.connection_type is ExpectedConnectionType.FwdGrad
        ]
        load_handles: dict[popxl.Tensor, Any] = {g.graph.graph.inputs[0]: g.x, **dict(zip(grad_inputs, g.grads))}
        store_streams = {out: popxl.d2h_stream(out.shape, out.dtype, f"y{i}") for i, out in enumerate(g.outputs)}
        fwd, grad = batch_serialise_fwd_and_grad(
            g.graph,
            g.dgraph,
            g.graph.args,
            steps,
            load_handles,
            store_streams,
            {},
            io_mode=io_mode,
            policy=dict(policy),
            activation_memory="host",
        )
        weights = g.args.init()
        weights.update(fwd.kept.init())
        accums = g.dargs.init()
        accums.update(weights)
        fwd.graph.bind(weights).call(0)
        grad.graph.bind(accums).call(0)
    ir.num_host_transfers = steps
    streams = [g.x, *g.grads]
    feeds = _feeds(streams, steps) if data is None else {s: np.asarray(data[s.tensor_id]) for s in streams}
    return _describe(StepProgram(ir, feeds, accums, weights), g.graph, g.dgraph)


def flops(program: StepProgram, device: str) -> float:
    """XLA's flops for `program` (`cost_analysis` of its lowering; nothing is compiled)."""
    with popxl.Session(program.ir, device, remote_memory="host") as session:
        cost = session.traced(program.feeds).lower().cost_analysis()
    cost = cost[0] if isinstance(cost, list) else cost
    return float(cost.get("flops", 0.0))


def measure(program: StepProgram, device: str, timed: bool = False) -> dict[str, float]:
    """The compiled program's memory figures (`Session.memory_analysis`) and, when `timed`, the seconds of
    one run (the best of three, compiled beforehand).

    Measured in a Session with remote memory on the host, whatever its default: the planner plans for
    host streams and host buffers. Raises `popxl.OutOfMemoryError` where this machine cannot run it."""
    session = popxl.Session(program.ir, device, remote_memory="host")
    with session:
        figures: dict[str, float] = dict(session.memory_analysis(program.feeds))
        # A program this machine cannot run is refused here, whether or not it is run.
        session.check_memory(program.feeds)
        if timed:
            session.run(program.feeds)
            runs = []
            for _ in range(3):
                start = time.perf_counter()
                session.run(program.feeds)
                runs.append(time.perf_counter() - start)
            figures["seconds"] = min(runs)
    return figures
