"""batch_serialise: a graph for one micro-batch becomes a graph that loops over `steps` of them."""

from __future__ import annotations

import logging
from collections.abc import Mapping, MutableMapping
from dataclasses import dataclass
from typing import Any

import popxl
from popxl_addons.core.modules.graph import GraphWithNamedArgs
from popxl_addons.core.transforms.batch_serialisation import schedules
from popxl_addons.core.transforms.batch_serialisation.handles import Handles, RemoteHandle, normalise
from popxl_addons.core.transforms.batch_serialisation.result import BatchSerialResult
from popxl_addons.core.transforms.batch_serialisation.steps import StepIO

IO_MODES = ("compute", "io", "io_overlapped")
logger = logging.getLogger(__name__)


def _check_arguments(graph: GraphWithNamedArgs, steps: int, rows: int, io_mode: str) -> str:
    if io_mode not in IO_MODES:
        raise ValueError(f"Unknown 'io_mode' {io_mode!r}: expected one of {IO_MODES}")
    if not isinstance(steps, int) or steps < 1:
        raise ValueError(f"steps must be a positive int, got {steps!r}")
    if rows < 1:
        raise ValueError(f"rows must be >0, got {rows}")
    if io_mode == "io_overlapped" and steps < 2:
        logger.warning("io_mode 'io_overlapped' needs at least 2 steps (got %d): using 'io'", steps)
        io_mode = "io"
    if io_mode != "compute" and graph.graph.ir.session_options.numIOTiles < 1:
        raise ValueError(
            f"IR must have IO tiles for io_mode {io_mode!r}: set "
            "ir._pb_ir.getSessionOptions().numIOTiles, or use io_mode='compute'"
        )
    return io_mode


def _check_handles(
    compute: popxl.Graph,
    load_handles: MutableMapping[popxl.Tensor, Any],
    store_streams: MutableMapping[popxl.Tensor, Any],
    store_buffers: MutableMapping[popxl.Tensor, Any],
) -> None:
    for t, h in load_handles.items():
        if t not in compute.inputs:
            continue
        if not isinstance(h, popxl.HostToDeviceStream | RemoteHandle):
            raise TypeError(
                f"Incompatible handle in `load_handles` for {t.id}: expected a HostToDeviceStream, "
                f"a RemoteHandle or a (RemoteBuffer, int or None[, group]) tuple, got {h!r}"
            )
        if isinstance(h, popxl.HostToDeviceStream):
            given = (h.shape, h.dtype)
        else:
            given = (h.buffer.meta_shape if h.sharded else h.buffer.tensor_shape, h.buffer.tensor_dtype)
        if given != (t.shape, t.dtype):
            raise ValueError(
                f"The load handle of {t.id} gives {given[1].name} {given[0]}, but the input is {t.dtype.name} {t.shape}"
            )
    for t, h in store_streams.items():
        if t.graph is compute and not isinstance(h, popxl.DeviceToHostStream):
            raise TypeError(
                f"Incompatible handle in `store_streams` for {t.id}: expected a DeviceToHostStream, got {h!r}"
            )
    for t, h in store_buffers.items():
        if t.graph is compute and not isinstance(h, RemoteHandle):
            raise TypeError(
                f"Incompatible handle in `store_buffers` for {t.id}: expected a RemoteHandle or a "
                f"(RemoteBuffer, int or None[, group]) tuple, got {h!r}"
            )


def batch_serialise(
    graph: GraphWithNamedArgs,
    steps: int,
    load_handles: MutableMapping[popxl.Tensor, Any],
    store_streams: MutableMapping[popxl.Tensor, popxl.DeviceToHostStream],
    store_buffers: MutableMapping[popxl.Tensor, Any],
    seed_input: popxl.Tensor | None = None,
    rows: int = 1,
    io_mode: str = "io",
    keep: Mapping[popxl.Tensor, str] | None = None,
) -> BatchSerialResult:
    """A graph that runs `graph` for `steps` micro-batches of row `n`, given as its first input.

    Inputs with a load handle are loaded each step from a host stream or from
    slot `row * steps + step` of a remote buffer; inputs and outputs with a
    store handle are stored each step likewise. Other inputs pass through (by
    reference if they were). `(buffer, offset[, group])` tuples in the handle
    dicts are replaced by RemoteHandles in place, and buffers grow to fit.
    `keep` names inputs and outputs held on the device instead: each gets a
    by-reference input of `steps * rows` entries, its stack, among the result's
    args under the given name; an input not loaded nor passed is read from it.
    """
    io_mode = _check_arguments(graph, steps, rows, io_mode)
    normalise(load_handles)
    normalise(store_buffers)
    compute = graph.graph
    _check_handles(compute, load_handles, store_streams, store_buffers)
    keep = _checked_keep(compute, seed_input, keep)
    handles = Handles(load_handles, store_streams, store_buffers, seed_input)
    roles = _roles(compute, handles, keep)
    for t in roles.loaded:
        if t in roles.from_buffer:
            load_handles[t].grow(steps, rows)
    for t in roles.stored:
        if t in store_buffers:
            store_buffers[t].grow(steps, rows)
    serial, new_inputs, stacks = _loop_graph(compute, handles, roles, keep, (steps, rows, io_mode))
    stored_buffers = {
        t: load_handles[t] if t in roles.from_buffer else h for t, h in store_buffers.items() if t.graph is compute
    }
    args = graph.args.remap(new_inputs)
    for t, name in keep.items():
        args.insert(name, stacks[t], overwrite=True)
    return BatchSerialResult(GraphWithNamedArgs(serial, args), stored_buffers, dict(new_inputs))


@dataclass
class _Roles:
    """What the serialised graph does with each tensor of the compute graph it loops over."""

    # Inputs loaded from a remote buffer: their store handles are not used.
    from_buffer: set[popxl.Tensor]
    loaded: list[popxl.Tensor]
    passed: list[popxl.Tensor]
    stored: list[popxl.Tensor]


def _checked_keep(
    compute: popxl.Graph, seed_input: popxl.Tensor | None, keep: Mapping[popxl.Tensor, str] | None
) -> dict[popxl.Tensor, str]:
    """`keep` as a dict, once the seed input and the kept tensors are checked to belong to `compute`."""
    if seed_input is not None and seed_input not in compute.inputs:
        raise ValueError(f"seed_input {seed_input.id} is not an input of {compute.id!r}")
    keep = dict(keep or {})
    for t in keep:
        if t.graph is not compute or (t not in compute.inputs and t not in compute.outputs):
            raise ValueError(f"Kept tensor {t.id} is not an input or output of {compute.id!r}")
    return keep


def _roles(compute: popxl.Graph, handles: Handles, keep: Mapping[popxl.Tensor, str]) -> _Roles:
    """Which inputs are loaded and which passed through, and which tensors are stored."""
    from_buffer = {t for t, h in handles.load.items() if isinstance(h, RemoteHandle)}
    loaded = [t for t in compute.inputs if t in handles.load]
    # A kept input that is neither loaded nor stored comes from its stack, so it is not passed through.
    from_stack = {t for t in keep if t in compute.inputs and t not in handles.load}
    passed = [
        t for t in compute.inputs if t not in handles.load and t is not handles.seed_input and t not in from_stack
    ]
    stored = [
        t
        for t in [*compute.inputs, *compute.outputs]
        if (t in handles.store_streams or t in handles.store_buffers) and t not in from_buffer
    ]
    return _Roles(from_buffer, loaded, passed, list(dict.fromkeys(stored)))


def _loop_graph(
    compute: popxl.Graph, handles: Handles, roles: _Roles, keep: Mapping[popxl.Tensor, str], io: tuple[int, int, str]
) -> tuple[popxl.Graph, dict[popxl.Tensor, popxl.Tensor], dict[popxl.Tensor, popxl.Tensor]]:
    """The graph looping over the steps (`io` is steps, rows and io_mode), its inputs for the passed tensors
    and the kept tensors' stacks."""
    steps, rows, io_mode = io
    serial = compute.ir.create_empty_graph("batch_serialise")
    with serial, popxl.in_sequence(True):
        row = popxl.graph_input((), popxl.int32, "batch_serial_loop_index")
        with_seed = handles.seed_input is not None
        seed = popxl.graph_input((2,), popxl.uint32, "batch_serial_random_seed") if with_seed else None
        new_inputs = {
            t: popxl.graph_input(t.shape, t.dtype, t.name, by_ref=compute.is_by_ref(t), meta_shape=t.meta_shape)
            for t in roles.passed
        }
        stacks = {
            t: popxl.graph_input((steps * rows, *t.shape), t.dtype, name, by_ref=True) for t, name in keep.items()
        }
        step_io = StepIO(
            compute=compute,
            steps=steps,
            load_handles=handles.load,
            store_streams=handles.store_streams,
            store_buffers=handles.store_buffers,
            loaded=roles.loaded,
            passed=roles.passed,
            stored=roles.stored,
            seed_input=handles.seed_input,
            on_io_tiles=io_mode != "compute",
            kept=stacks,
        )
        schedule = schedules.overlapped if io_mode == "io_overlapped" else schedules.sequential
        schedule(step_io, row, seed, {**new_inputs, **{stack: stack for stack in stacks.values()}})
    return serial, new_inputs, stacks
