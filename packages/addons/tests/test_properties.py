"""Property-based equivalence: random small graphs, serialised with random settings, against NumPy.

The example count comes from POPXL_HYPOTHESIS_EXAMPLES (20 by default, CI-sized); failures print
the falsifying example and a `@reproduce_failure` blob.
"""

from __future__ import annotations

import os
from functools import partial
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import popxl
from popxl import ops
from popxl_addons.core import IO_MODES, Module, RemoteHandle, batch_serial_buffer, batch_serialise

pytestmark = pytest.mark.placement

EXAMPLES = int(os.environ.get("POPXL_HYPOTHESIS_EXAMPLES", "20"))
OPS = ("tanh", "relu", "add_weight", "mul_weight", "matmul", "layer_norm", "scale")
Array = np.ndarray[Any, Any]


def _weight(shape: tuple[int, ...], seed: int) -> Array:
    return np.random.default_rng(seed).normal(size=shape).astype(np.float32)


class Chain(Module):
    """The ops of `chain` applied in turn; weights are deterministic in their position."""

    def __init__(self, chain: list[tuple[str, int]]) -> None:
        super().__init__()
        self.chain = chain

    def build(self, x: popxl.Tensor) -> popxl.Tensor:
        for i, (op, width) in enumerate(self.chain):
            c = x.shape[-1]
            if op == "tanh":
                x = ops.tanh(x)
            elif op == "relu":
                x = ops.relu(x)
            elif op == "scale":
                x = x * 1.5
            elif op == "layer_norm":
                w = self.add_variable_input(f"g{i}", partial(_weight, (c,), i), x.dtype)
                b = self.add_variable_input(f"b{i}", partial(_weight, (c,), i + 100), x.dtype)
                x = ops.layer_norm(x, w, b)
            elif op == "matmul":
                x = x @ self.add_variable_input(f"w{i}", partial(_weight, (c, width), i), x.dtype)
            else:
                w = self.add_variable_input(f"w{i}", partial(_weight, (c,), i), x.dtype)
                x = x + w if op == "add_weight" else x * w
        return x


def reference(chain: list[tuple[str, int]], x: Array) -> Array:
    """The chain in NumPy."""
    for i, (op, width) in enumerate(chain):
        c = x.shape[-1]
        if op == "tanh":
            x = np.tanh(x)
        elif op == "relu":
            x = np.maximum(x, 0)
        elif op == "scale":
            x = x * 1.5
        elif op == "layer_norm":
            mean = x.mean(-1, keepdims=True)
            x = (x - mean) / np.sqrt(((x - mean) ** 2).mean(-1, keepdims=True) + 1e-5)
            x = x * _weight((c,), i) + _weight((c,), i + 100)
        elif op == "matmul":
            x = x @ _weight((c, width), i)
        elif op == "add_weight":
            x = x + _weight((c,), i)
        else:
            x = x * _weight((c,), i)
    return x


def _slot(kind: str, row: int, step: int, steps: int, rows: int) -> int:
    return {"zero": row, "int": row + 1, "none": 0, "callable": rows - 1 - row}[kind] * steps + step


ROW_OFFSETS: dict[str, Any] = {"zero": lambda rows: 0, "int": lambda rows: 1, "none": lambda rows: None}


@settings(
    max_examples=EXAMPLES,
    deadline=None,
    derandomize=True,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(
    chain=st.lists(st.tuples(st.sampled_from(OPS), st.integers(1, 4)), min_size=1, max_size=4),
    batch=st.integers(1, 3),
    width=st.integers(2, 4),
    steps=st.integers(1, 5),
    rows=st.integers(1, 3),
    store=st.sampled_from(["zero", "int", "none", "callable", "stream"]),
    load=st.sampled_from(["stream", "buffer"]),
    io_mode=st.sampled_from(IO_MODES),
)
def test_serialised_random_chains_match_numpy(
    chain: list[tuple[str, int]], batch: int, width: int, steps: int, rows: int, store: str, load: str, io_mode: str
) -> None:
    count = steps * rows
    data = np.random.default_rng(steps * 7 + rows).normal(size=(count, batch, width)).astype(np.float32)
    ir = popxl.Ir()
    ir._pb_ir.getSessionOptions().numIOTiles = 8
    with ir.main_graph, popxl.in_sequence(True):
        h = popxl.h2d_stream((batch, width), popxl.float32, "x")
        args, graph = Chain(chain).create_graph(h.spec)
        x_in, y_out = graph.graph.inputs[0], graph.graph.outputs[0]
        d = popxl.d2h_stream(y_out.shape, popxl.float32, "y")
        if load == "buffer":
            in_buffer = batch_serial_buffer(x_in, steps=steps, rows=rows)
            for slot in range(count):
                ops.remote_store(in_buffer, slot, ops.host_load(h))
            load_handle: Any = (in_buffer, 0)
        else:
            load_handle = h
        if store == "stream":
            result = batch_serialise(graph, steps, {x_in: load_handle}, {y_out: d}, {}, rows=rows, io_mode=io_mode)
        else:
            out_buffer = batch_serial_buffer(y_out, steps=steps, rows=rows)
            offset = (lambda r: (rows - 1) - r) if store == "callable" else ROW_OFFSETS[store](rows)
            handle = RemoteHandle(out_buffer, offset)
            result = batch_serialise(graph, steps, {x_in: load_handle}, {}, {y_out: handle}, rows=rows, io_mode=io_mode)
        bound = result.graph.bind(args.init())
        for n in range(rows):
            bound.call(n)
        if store != "stream":
            for n in range(rows):
                for j in range(steps):
                    ops.host_store(d, ops.remote_load(out_buffer, _slot(store, n, j, steps, rows)))
    ir.num_host_transfers = count
    with popxl.Session(ir, "cpu") as s:
        out = s.run({h: data if count > 1 else data[0]})[d].reshape(count, batch, -1)
    expected = np.stack([reference(chain, x) for x in data])
    if store == "none":
        # Every row writes row 0, so the last row's values remain.
        expected = np.concatenate([expected[(rows - 1) * steps :]] * rows)
    np.testing.assert_allclose(out, expected, rtol=1e-4, atol=1e-4)
