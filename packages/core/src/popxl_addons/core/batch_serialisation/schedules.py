"""The io_mode schedules: each builds the body of the serialised graph from StepIO pieces.

All schedules read host streams and write slots in step order and give the
same values; they differ in when IO happens relative to compute.
"""

from __future__ import annotations

import numpy as np

import popxl
from popxl import ops
from popxl_addons.core.batch_serialisation.steps import StepIO, Values


def _int(value: int) -> popxl.Tensor:
    return popxl.constant(np.int32(value), popxl.int32)


def _split(seed: popxl.Tensor | None) -> tuple[popxl.Tensor | None, popxl.Tensor | None]:
    if seed is None:
        return None, None
    step_seed, next_seed = ops.split_random_seed(seed)
    return step_seed, next_seed


def sequential(io: StepIO, row: popxl.Tensor, seed: popxl.Tensor | None, passed: Values) -> None:
    """Load, compute and store each step in turn inside one loop ('compute' and 'io' modes)."""
    ir = io.compute.ir
    body = ir.create_empty_graph("batch_serial_step")
    with body, popxl.in_sequence(True):
        index = popxl.graph_input((), popxl.int32, "index")
        carried_seed = popxl.graph_input((2,), popxl.uint32, "seed") if seed is not None else None
        body_passed = {
            t: popxl.graph_input(t.shape, t.dtype, t.name, by_ref=True, meta_shape=t.meta_shape) for t in passed
        }
        step_seed, next_seed = _split(carried_seed)
        with io.exchange():
            loaded = io.load(index)
        stored = io.run(io.gather(loaded), body_passed, step_seed)
        stored = io.to_io(stored)
        with io.exchange():
            io.store(stored, index)
        popxl.graph_output(index + 1)
        if next_seed is not None:
            popxl.graph_output(next_seed)
    start = row * io.steps
    start = io.to_compute(start)
    carried = [start] + ([seed] if seed is not None else [])
    ops.repeat(body, io.steps, *carried, *passed.values())


def overlapped(io: StepIO, row: popxl.Tensor, seed: popxl.Tensor | None, passed: Values) -> None:
    """Load step i+1 and store step i-1 while step i computes ('io_overlapped' mode, steps >= 2)."""
    ir = io.compute.ir
    base = row * io.steps
    with io.exchange():
        first = io.load(base)
    first = io.gather(first)
    index = base + 1
    step_seed, seed = _split(seed)
    with io.exchange():
        loaded = io.load(index)
    pending = io.to_io(io.run(first, passed, step_seed))
    loaded = io.gather(loaded)
    index = index + 1
    if io.steps > 2:
        body = ir.create_empty_graph("batch_serial_overlapped_step")
        with body, popxl.in_sequence(True):
            b_index = popxl.graph_input((), popxl.int32, "index")
            b_seed = popxl.graph_input((2,), popxl.uint32, "seed") if seed is not None else None
            b_loaded = {
                t: popxl.graph_input(v.shape, v.dtype, t.name, meta_shape=v.meta_shape) for t, v in loaded.items()
            }
            b_pending = {
                t: popxl.graph_input(v.shape, v.dtype, f"stored_{k}", meta_shape=v.meta_shape)
                for k, (t, v) in enumerate(pending.items())
            }
            b_passed = {
                t: popxl.graph_input(v.shape, v.dtype, t.name, by_ref=True, meta_shape=v.meta_shape)
                for t, v in passed.items()
            }
            b_step_seed, b_next_seed = _split(b_seed)
            with io.exchange():
                new_loaded = io.load(b_index)
                io.store(b_pending, b_index - 2)
            new_pending = io.to_io(io.run(b_loaded, b_passed, b_step_seed))
            new_loaded = io.gather(new_loaded)
            for t in [b_index + 1, *([b_next_seed] if b_next_seed is not None else [])]:
                popxl.graph_output(t)
            for v in [*new_loaded.values(), *new_pending.values()]:
                popxl.graph_output(v)
        carried = [index, *([seed] if seed is not None else []), *loaded.values(), *pending.values()]
        outs = list(ops.repeat(body, io.steps - 2, *carried, *passed.values()))
        index = outs.pop(0)
        if seed is not None:
            seed = outs.pop(0)
        loaded = dict(zip(loaded, outs[: len(loaded)]))
        pending = dict(zip(pending, outs[len(loaded) :]))
    store_index = index - 2
    step_seed, seed = _split(seed)
    with io.exchange():
        io.store(pending, store_index)
    last = io.to_io(io.run(loaded, passed, step_seed))
    with io.exchange():
        io.store(last, store_index + 1)
