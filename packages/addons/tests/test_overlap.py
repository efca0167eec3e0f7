"""io_overlapped keeps its point in the lowered program: step i's transfers do not wait for step i's compute."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

import popxl
from popxl import ops
from popxl_addons.core import Module, batch_serial_buffer, batch_serialise

pytestmark = pytest.mark.placement

SHAPE = (4, 8)
STEPS = 5


class Tanh(Module):
    def build(self, x: popxl.Tensor) -> popxl.Tensor:
        return ops.tanh(x)


def _contains(eqn: Any, primitive: str) -> bool:
    if eqn.primitive.name == primitive:
        return True
    return any(_contains(inner, primitive) for inner in _inner_equations(eqn))


def _inner_equations(eqn: Any) -> Iterator[Any]:
    for param in eqn.params.values():
        for sub in param if isinstance(param, tuple | list) else [param]:
            inner = getattr(sub, "jaxpr", sub)
            if hasattr(inner, "eqns"):
                yield from inner.eqns


def _loop_body(jaxpr: Any) -> Any:
    """The body of the loop over steps: the scan whose iterations load, compute and store."""
    for eqn in jaxpr.eqns:
        if eqn.primitive.name in ("scan", "while") and _contains(eqn, "tanh"):
            body = eqn.params.get("jaxpr", eqn.params.get("body_jaxpr"))
            return body.jaxpr
        for inner in _inner_equations(eqn):
            found = _loop_body(type("J", (), {"eqns": [inner]})())
            if found is not None:
                return found
    return None


def _transfers_after_compute(body: Any) -> tuple[int, int, int]:
    """(loads, stores, transfers that depend on this iteration's compute) in one loop iteration."""
    from_compute: set[Any] = set()
    loads = stores = dependent = 0
    for eqn in body.eqns:
        inputs = {v for v in eqn.invars if not hasattr(v, "val")}
        if _contains(eqn, "dynamic_update_slice") and eqn.primitive.name == "custom_vmap_call":
            stores += 1
            dependent += bool(inputs & from_compute)
        elif _contains(eqn, "dynamic_slice") and eqn.primitive.name == "custom_vmap_call":
            loads += 1
            dependent += bool(inputs & from_compute)
        if _contains(eqn, "tanh") or inputs & from_compute:
            from_compute.update(eqn.outvars)
    return loads, stores, dependent


def _serialised(io_mode: str) -> tuple[popxl.Ir, popxl.Graph]:
    ir = popxl.Ir()
    ir.session_options.numIOTiles = 32
    with ir.main_graph, popxl.in_sequence(True):
        _, graph = Tanh().create_graph(popxl.TensorSpec(SHAPE, popxl.float32))
        x_in, y_out = graph.graph.inputs[0], graph.graph.outputs[0]
        xs = batch_serial_buffer(x_in, steps=STEPS)
        ys = batch_serial_buffer(y_out, steps=STEPS)
        for j in range(STEPS):
            ops.remote_store(xs, j, popxl.constant(np.full(SHAPE, j, np.float32)))
        result = batch_serialise(graph, STEPS, {x_in: (xs, 0)}, {}, {y_out: (ys, 0)}, io_mode=io_mode)
        result.graph.call(0)
        d = popxl.d2h_stream(SHAPE, popxl.float32, "y")
        for j in range(STEPS):
            ops.host_store(d, ops.remote_load(ys, j))
    ir.num_host_transfers = STEPS
    return ir, d


@pytest.mark.parametrize("memory", ["host", "device"])
@pytest.mark.parametrize("io_mode", ["io", "io_overlapped"])
def test_overlapped_transfers_do_not_depend_on_the_same_iterations_compute(io_mode: str, memory: str) -> None:
    ir, d = _serialised(io_mode)
    with popxl.Session(ir, "cpu", remote_memory=memory, checks=False) as session:
        out = session.run()[d]
        body = _loop_body(session.traced().jaxpr.jaxpr)
    expected = np.tanh(np.arange(STEPS, dtype=np.float32))[:, None, None] * np.ones(SHAPE, np.float32)
    np.testing.assert_allclose(out, expected, rtol=1e-6)
    assert body is not None
    loads, stores, dependent = _transfers_after_compute(body)
    assert loads >= 1 and stores >= 1
    if io_mode == "io_overlapped":
        # Loading step i+1 and storing step i-1 read only what earlier iterations left in the carry.
        assert dependent == 0
    else:
        # Sequential modes store what this iteration computed: the check above can tell the difference.
        assert dependent == stores
