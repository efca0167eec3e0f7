"""The io_mode schedules: each builds the body of the serialised graph from StepIO pieces.

All schedules read host streams and write slots in step order and give the
same values; they differ in when IO happens relative to compute.
"""

from __future__ import annotations

import popxl
from popxl import ops
from popxl_addons.core.transforms.batch_serialisation.steps import StepIO, Values


def _split(seed: popxl.Tensor | None) -> tuple[popxl.Tensor | None, popxl.Tensor | None]:
    if seed is None:
        return None, None
    step_seed, next_seed = ops.split_random_seed(seed)
    return step_seed, next_seed


def _inputs_like(values: Values, by_ref: bool = False, prefix: str = "") -> Values:
    """Inputs of the current graph with the specs of `values`, under the same keys."""
    return {
        t: popxl.graph_input(v.shape, v.dtype, prefix + t.name, by_ref=by_ref, meta_shape=v.meta_shape)
        for t, v in values.items()
    }


def _loop_inputs(with_seed: bool) -> tuple[popxl.Tensor, popxl.Tensor | None]:
    """The running index and, when seeded, the seed: the first carried inputs of a loop body."""
    index = popxl.graph_input((), popxl.int32, "index")
    seed = popxl.graph_input((2,), popxl.uint32, "seed") if with_seed else None
    return index, seed


def _outputs(*groups: list[popxl.Tensor | None]) -> None:
    for group in groups:
        for t in group:
            if t is not None:
                popxl.graph_output(t)


def sequential(io: StepIO, row: popxl.Tensor, seed: popxl.Tensor | None, passed: Values) -> None:
    """Load, compute and store each step in turn inside one loop ('compute' and 'io' modes)."""
    body = io.compute.ir.create_empty_graph("batch_serial_step")
    with body, popxl.in_sequence(True):
        index, carried_seed = _loop_inputs(seed is not None)
        body_passed = _inputs_like(passed, by_ref=True)
        step_seed, next_seed = _split(carried_seed)
        with io.exchange():
            loaded = io.load(index)
        stored = io.to_io(io.run(io.gather(loaded), body_passed, step_seed, index))
        with io.exchange():
            io.store(stored, index)
        _outputs([index + 1, next_seed])
    start = io.to_compute(row * io.steps)
    ops.repeat(body, io.steps, start, *([seed] if seed is not None else []), *passed.values())


def _overlapped_loop(io: StepIO, loaded: Values, pending: Values, passed: Values, with_seed: bool) -> popxl.Graph:
    """One iteration: load step i and store step i-2 in one exchange, while step i-1 computes."""
    body = io.compute.ir.create_empty_graph("batch_serial_overlapped_step")
    with body, popxl.in_sequence(True):
        index, carried_seed = _loop_inputs(with_seed)
        ready = _inputs_like(loaded)
        waiting = _inputs_like(pending, prefix="stored_")
        body_passed = _inputs_like(passed, by_ref=True)
        step_seed, next_seed = _split(carried_seed)
        with io.exchange():
            new_loaded = io.load(index)
            io.store(waiting, index - 2)
        new_pending = io.to_io(io.run(ready, body_passed, step_seed, index - 1))
        new_loaded = io.gather(new_loaded)
        _outputs([index + 1, next_seed], list(new_loaded.values()), list(new_pending.values()))
    return body


def overlapped(io: StepIO, row: popxl.Tensor, seed: popxl.Tensor | None, passed: Values) -> None:
    """Load step i+1 and store step i-1 while step i computes ('io_overlapped' mode, steps >= 2).

    A prologue loads steps 0 and 1 and computes step 0; the loop (steps - 2
    iterations, none for 2 steps) loads, computes and stores one step behind
    the other; an epilogue stores the last two steps around the last compute.
    """
    base = row * io.steps
    with io.exchange():
        first = io.load(base)
    first = io.gather(first)
    index = base + 1
    step_seed, seed = _split(seed)
    with io.exchange():
        loaded = io.load(index)
    pending = io.to_io(io.run(first, passed, step_seed, base))
    loaded = io.gather(loaded)
    index = index + 1
    if io.steps > 2:
        body = _overlapped_loop(io, loaded, pending, passed, seed is not None)
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
    last = io.to_io(io.run(loaded, passed, step_seed, store_index + 1))
    with io.exchange():
        io.store(last, store_index + 1)
