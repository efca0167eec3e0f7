"""The programs the planner compiles: one micro-batch step, its forward alone, and the serialised batch.

Each is `build_training_step`'s plain step (`StepOptions()`, as `plan --check`
builds it too): it takes the module's one input and the gradient of each of its
outputs from host streams, stores the module's outputs to host streams (as a
program that uses them would: otherwise XLA drops a forward whose activations
are all recomputed), and accumulates the gradients of every variable.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

import popxl
from popxl.lowering import fit
from popxl.units import format_bytes
from popxl_addons.core.modules.module import Module
from popxl_addons.core.modules.named_tensors import NamedTensors
from popxl_addons.core.training.step import StepOptions, TrainingStep, build_training_step
from popxl_addons.core.transforms.batch_serialisation.fwd_and_grad import Serialisation
from popxl_addons.core.transforms.batch_serialisation.policy import serialisable_activations

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


def planned_serialisation(steps: int, io_mode: str, policy: Mapping[str, str], rows: int = 1) -> Serialisation:
    """A plan's serialisation: its "host" activations in host memory whatever the Session's `remote_memory`,
    where the planner measures them."""
    return Serialisation(steps=steps, rows=rows, io_mode=io_mode, policy=dict(policy), activation_memory="host")


def _feeds(
    streams: list[popxl.HostToDeviceStream], transfers: int, seed: int = 0
) -> dict[popxl.HostToDeviceStream, Array]:
    """Random normal data for each stream, made in its dtype (float32 draws for narrower floats).

    Refused with `popxl.OutOfMemoryError` before anything is drawn where the host cannot hold it (unless
    POPXL_MEMORY_CHECK=0 turns popxl's checks off).
    """
    lead = (transfers,) if transfers > 1 else ()
    sizes = {s: math.prod((*lead, *s.shape)) * s.dtype.as_numpy().itemsize for s in streams}
    available = fit.host_available() if fit.check_enabled() else None
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


def _program(step: TrainingStep, feeds: dict[popxl.HostToDeviceStream, Array]) -> StepProgram:
    """The planner's view of `step`: with the bytes of one micro-batch's activations, forward inputs and
    variables filled in."""
    weights = step.weights.copy()
    weights.update(step.kept)
    accumulators = step.accumulators.copy()
    accumulators.update(weights)
    program = StepProgram(step.ir, feeds, accumulators, weights)
    named = step.forward.args
    if step.gradient is not None:
        activations = serialisable_activations(step.gradient.grad_graph_info, named)
        program.activation_bytes = {name: nbytes(t) for name, t in activations.items()}
    program.input_bytes = {t.name: nbytes(t) for t in step.forward.graph.inputs if t not in set(named.tensors)}
    program.variable_bytes = sum(nbytes(t) for t in accumulators.tensors)
    return program


def step_program(make_module: Callable[[], Module], spec: popxl.TensorSpec, gradient: bool = True) -> StepProgram:
    """One micro-batch: the forward graph, then (when `gradient`) the gradient graph on its activations."""
    step = build_training_step(make_module, spec, 1, options=StepOptions(gradient=gradient))
    return _program(step, _feeds(list(step.inputs.values()), 1))


def serialised_program(
    make_module: Callable[[], Module],
    spec: popxl.TensorSpec,
    steps: int,
    io_mode: str,
    policy: Mapping[str, str],
    data: Mapping[str, Array] | None = None,
) -> StepProgram:
    """The whole batch: `steps` micro-batches of `spec` through `batch_serialise_fwd_and_grad`.

    `data` may give the feeds ("x", and "dy0", "dy1"... for the output
    gradients), each `(steps, *shape)` (without the lead for one step).
    """
    step = build_training_step(make_module, spec, steps, planned_serialisation(steps, io_mode, policy))
    streams = list(step.inputs.values())
    feeds = _feeds(streams, steps) if data is None else {s: np.asarray(data[n]) for n, s in step.inputs.items()}
    return _program(step, feeds)


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
