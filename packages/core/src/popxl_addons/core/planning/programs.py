"""The programs the planner compiles: one micro-batch step, and the whole serialised batch.

Both take the module's one input and the gradient of each of its outputs from
host streams, and accumulate the gradients of every variable.
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
from popxl.transforms import ExpectedConnectionType
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


def _graphs(
    make_module: Callable[[], Module], spec: popxl.TensorSpec
) -> tuple[popxl.HostToDeviceStream, Any, GraphWithNamedArgs, Any, GraphWithNamedArgs, list[popxl.HostToDeviceStream]]:
    x = popxl.h2d_stream(spec.shape, spec.dtype, "x")
    module = make_module()
    if not isinstance(module, Module):
        raise TypeError(f"make_module() returned {type(module).__name__}, not a popxl_addons Module")
    args, graph = module.create_graph(x.spec)
    dargs, dgraph = autodiff_with_accumulation(graph, graph.args.tensors)
    info = dgraph.grad_graph_info
    grads = [
        popxl.h2d_stream(t.shape, t.dtype, f"d{i}")
        for i, (t, ec) in enumerate(zip(dgraph.graph.inputs, info.expected_inputs))
        if ec.connection_type is ExpectedConnectionType.FwdGrad
    ]
    return x, args, graph, dargs, dgraph, grads


def _feeds(
    streams: list[popxl.HostToDeviceStream], transfers: int, seed: int = 0
) -> dict[popxl.HostToDeviceStream, Array]:
    rng = np.random.default_rng(seed)
    lead = (transfers,) if transfers > 1 else ()
    return {s: rng.normal(size=(*lead, *s.shape)).astype(s.dtype.as_numpy()) for s in streams}


def _new_ir() -> popxl.Ir:
    ir = popxl.Ir()
    ir.session_options.numIOTiles = IO_TILES
    return ir


def step_program(make_module: Callable[[], Module], spec: popxl.TensorSpec) -> StepProgram:
    """One micro-batch: the forward graph, then the gradient graph on its activations."""
    ir = _new_ir()
    with ir.main_graph, popxl.in_sequence(True):
        x, args, graph, dargs, dgraph, grads = _graphs(make_module, spec)
        named = graph.args
        activations = serialisable_activations(dgraph.grad_graph_info, named)
        inputs = {t.name: nbytes(t) for t in graph.graph.inputs if t not in set(named.tensors)}
        weights = args.init()
        accums = dargs.init()
        accums.update(weights)
        site = graph.bind(weights).call_with_info(ops.host_load(x))
        feeds = {t: ops.host_load(s) for t, s in zip(dgraph.graph.inputs, grads)}
        dgraph.bind(accums).call(args={**feeds, **dgraph.grad_graph_info.inputs_dict(site)})
    return StepProgram(
        ir,
        _feeds([x, *grads], 1),
        accums,
        weights,
        {name: nbytes(t) for name, t in activations.items()},
        inputs,
        sum(nbytes(t) for t in accums.tensors),
    )


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
        x, args, graph, dargs, dgraph, grads = _graphs(make_module, spec)
        grad_inputs = [
            t
            for t, ec in zip(dgraph.graph.inputs, dgraph.grad_graph_info.expected_inputs)
            if ec.connection_type is ExpectedConnectionType.FwdGrad
        ]
        load_handles: dict[popxl.Tensor, Any] = {graph.graph.inputs[0]: x, **dict(zip(grad_inputs, grads))}
        fwd, grad = batch_serialise_fwd_and_grad(
            graph,
            dgraph,
            graph.args,
            steps,
            load_handles,
            {},
            {},
            io_mode=io_mode,
            policy=dict(policy),
            activation_memory="host",
        )
        weights = args.init()
        weights.update(fwd.kept.init())
        accums = dargs.init()
        accums.update(weights)
        fwd.graph.bind(weights).call(0)
        grad.graph.bind(accums).call(0)
    ir.num_host_transfers = steps
    streams = [x, *grads]
    feeds = _feeds(streams, steps) if data is None else {s: np.asarray(data[s.tensor_id]) for s in streams}
    return StepProgram(ir, feeds, accums, weights)


def measure(program: StepProgram, device: str, timed: bool = False) -> dict[str, float]:
    """The compiled program's memory figures (`Session.memory_analysis`), XLA's flops and bytes accessed
    of its lowering and, when `timed`, the seconds of one run (the best of three, compiled beforehand).

    Measured in a Session with remote memory on the host, whatever its default: the planner plans for
    host streams and host buffers."""
    session = popxl.Session(program.ir, device, remote_memory="host")
    with session:
        figures: dict[str, float] = dict(session.memory_analysis(program.feeds))
        cost = session.traced(program.feeds).lower().cost_analysis()
        if timed:
            session.run(program.feeds)
            runs = []
            for _ in range(3):
                start = time.perf_counter()
                session.run(program.feeds)
                runs.append(time.perf_counter() - start)
            figures["seconds"] = min(runs)
    cost = cost[0] if isinstance(cost, list) else cost
    figures["flops"] = float(cost.get("flops", 0.0))
    figures["bytes_accessed"] = float(cost.get("bytes accessed", 0.0))
    return figures
