"""batch_serialise: a graph for one micro-batch becomes a graph that loops over `steps` of them."""

from __future__ import annotations

import logging
from collections.abc import Mapping, MutableMapping
from typing import Any

import popxl
from popxl_addons.core.modules.graph import GraphWithNamedArgs
from popxl_addons.core.transforms.batch_serialisation import schedules
from popxl_addons.core.transforms.batch_serialisation.handles import RemoteHandle, normalise
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
    if seed_input is not None and seed_input not in compute.inputs:
        raise ValueError(f"seed_input {seed_input.id} is not an input of {compute.id!r}")
    keep = dict(keep or {})
    for t in keep:
        if t.graph is not compute or (t not in compute.inputs and t not in compute.outputs):
            raise ValueError(f"Kept tensor {t.id} is not an input or output of {compute.id!r}")
    from_buffer = {t for t, h in load_handles.items() if isinstance(h, RemoteHandle)}
    loaded = [t for t in compute.inputs if t in load_handles]
    # A kept input that is neither loaded nor stored comes from its stack, so it is not passed through.
    from_stack = {t for t in keep if t in compute.inputs and t not in load_handles}
    passed = [t for t in compute.inputs if t not in load_handles and t is not seed_input and t not in from_stack]
    stored = [
        t
        for t in [*compute.inputs, *compute.outputs]
        if (t in store_streams or t in store_buffers) and t not in from_buffer
    ]
    stored = list(dict.fromkeys(stored))
    for t in loaded:
        if t in from_buffer:
            load_handles[t].grow(steps, rows)
    for t in stored:
        if t in store_buffers:
            store_buffers[t].grow(steps, rows)

    ir = compute.ir
    serial = ir.create_empty_graph("batch_serialise")
    with serial, popxl.in_sequence(True):
        row = popxl.graph_input((), popxl.int32, "batch_serial_loop_index")
        seed = popxl.graph_input((2,), popxl.uint32, "batch_serial_random_seed") if seed_input is not None else None
        new_inputs = {
            t: popxl.graph_input(t.shape, t.dtype, t.name, by_ref=compute.is_by_ref(t), meta_shape=t.meta_shape)
            for t in passed
        }
        stacks = {
            t: popxl.graph_input((steps * rows, *t.shape), t.dtype, name, by_ref=True) for t, name in keep.items()
        }
        io = StepIO(
            compute=compute,
            steps=steps,
            load_handles=load_handles,
            store_streams=store_streams,
            store_buffers=store_buffers,
            loaded=loaded,
            passed=passed,
            stored=stored,
            seed_input=seed_input,
            on_io_tiles=io_mode != "compute",
            kept=stacks,
        )
        schedule = schedules.overlapped if io_mode == "io_overlapped" else schedules.sequential
        schedule(io, row, seed, {**new_inputs, **{stack: stack for stack in stacks.values()}})

    stored_buffers = {
        t: load_handles[t] if t in from_buffer else h for t, h in store_buffers.items() if t.graph is compute
    }
    args = graph.args.remap(new_inputs)
    for t, name in keep.items():
        args.insert(name, stacks[t], overwrite=True)
    result_graph = GraphWithNamedArgs(serial, args)
    return BatchSerialResult(result_graph, stored_buffers, dict(new_inputs))
