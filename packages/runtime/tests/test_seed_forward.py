"""The seed's forward-only scenarios written directly with popxl: a Scale graph looped over
micro-batches, reading a host stream or a remote buffer and writing a remote buffer at
`row * steps + step` style offsets."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

import popxl
from popxl import ops

pytestmark = pytest.mark.placement

STEPS = 4
SHAPE = (2, 2)


def _scale_graph(ir: popxl.Ir) -> popxl.Graph:
    def scale(x: popxl.Tensor, s: popxl.Tensor) -> popxl.Tensor:
        return x * s

    spec = popxl.TensorSpec(SHAPE, popxl.float32)
    return ir.create_graph(scale, spec, spec)


def _serialised(
    ir: popxl.Ir,
    scale: popxl.Graph,
    load: Callable[[popxl.Tensor], popxl.Tensor],
    store: Callable[[popxl.Tensor, popxl.Tensor], None],
) -> popxl.Graph:
    """A graph (row, scale) that loops STEPS times: load, scale, store, index += 1."""
    body = ir.create_empty_graph("step")
    with body, popxl.in_sequence(True):
        index = popxl.graph_input((), popxl.int32, "index")
        s = popxl.graph_input(SHAPE, popxl.float32, "scale")
        (y,) = ops.call(scale, load(index), s)
        store(index, y)
        popxl.graph_output(index + 1)
    outer = ir.create_empty_graph("serialised")
    with outer, popxl.in_sequence(True):
        row = popxl.graph_input((), popxl.int32, "row")
        s = popxl.graph_input(SHAPE, popxl.float32, "scale")
        ops.repeat(body, STEPS, row * STEPS, s)
    return outer


def _inputs() -> np.ndarray:
    return np.arange(STEPS * 4, dtype=np.float32).reshape(STEPS, *SHAPE)


def _run(ir: popxl.Ir, h: popxl.HostToDeviceStream, d: popxl.DeviceToHostStream) -> np.ndarray:
    ir.num_host_transfers = STEPS
    with popxl.Session(ir, "cpu") as session:
        return session.run({h: _inputs()})[d]


@pytest.mark.parametrize(
    ("row", "row_offset", "read_from"),
    [(0, lambda i: i, 0), (1, lambda i: i, STEPS), (0, lambda i: (i % STEPS) + STEPS, STEPS)],
    ids=["single", "entries", "function-offset"],
)
def test_scale_graph_stored_to_a_buffer(
    row: int, row_offset: Callable[[popxl.Tensor], popxl.Tensor], read_from: int
) -> None:
    ir = popxl.Ir()
    with ir.main_graph, popxl.in_sequence(True):
        h = popxl.h2d_stream(SHAPE, popxl.float32, "x")
        buf = popxl.remote_buffer(SHAPE, popxl.float32, entries=2 * STEPS)
        scale = popxl.variable(np.full(SHAPE, 2, np.float32), name="scale")
        graph = _serialised(
            ir, _scale_graph(ir), lambda i: ops.host_load(h), lambda i, y: ops.remote_store(buf, row_offset(i), y)
        )
        ops.call(graph, row, scale)
        d = popxl.d2h_stream(SHAPE, popxl.float32, "out")
        for i in range(STEPS):
            ops.host_store(d, ops.remote_load(buf, read_from + i))
    np.testing.assert_array_equal(_run(ir, h, d), _inputs() * 2)


def test_sequence_of_serialised_graphs_through_one_buffer() -> None:
    ir = popxl.Ir()
    with ir.main_graph, popxl.in_sequence(True):
        h = popxl.h2d_stream(SHAPE, popxl.float32, "x")
        d = popxl.d2h_stream(SHAPE, popxl.float32, "out")
        buf = popxl.remote_buffer(SHAPE, popxl.float32, entries=3 * STEPS)
        scale = popxl.variable(np.full(SHAPE, 2, np.float32), name="scale")
        g = _scale_graph(ir)
        load_stream = _serialised(ir, g, lambda i: ops.host_load(h), lambda i, y: ops.remote_store(buf, i, y))
        remote = _serialised(ir, g, lambda i: ops.remote_load(buf, i), lambda i, y: ops.remote_store(buf, i + STEPS, y))
        to_stream = _serialised(ir, g, lambda i: ops.remote_load(buf, i + 2 * STEPS), lambda i, y: ops.host_store(d, y))
        ops.call(load_stream, 0, scale)
        ops.call(remote, 0, scale)
        ops.call(remote, 1, scale)
        ops.call(to_stream, 0, scale)
    np.testing.assert_array_equal(_run(ir, h, d), _inputs() * 2**4)
