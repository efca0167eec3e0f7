"""One model of aliasing: what a run writes (the interpreter) and which variables it returns (the program) agree.

Each program updates storage through views, in-place outputs and by-reference
subgraph inputs; the expected values are NumPy's, where views alias as popxl's
do. Every variable is compared, so an update lost (a written variable the
program does not return) or spread (an unwritten one that changes) fails.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

import popxl
from popxl import ops
from popxl.lowering.aliasing import Aliasing

# Small whole numbers and halves: every sum and product below is exact in float32, so values compare exactly.
X = np.arange(24, dtype=np.float32).reshape(4, 6)
Y = np.arange(6, dtype=np.float32).reshape(2, 3) - 2.5
Z = np.full((3,), 7.0, np.float32)


def _c(a: np.ndarray) -> popxl.Tensor:
    return popxl.constant(a.astype(np.float32))


def _run(build: Callable[[popxl.Ir, popxl.Tensor, popxl.Tensor, popxl.Tensor], popxl.Tensor | None]) -> tuple:
    """Build a program over variables x, y, z; returns their values after one run, the streamed value, if any,
    and the names of the variables the aliasing model says the program writes."""
    ir = popxl.Ir()
    with ir.main_graph:
        x = popxl.variable(X, name="x")
        y = popxl.variable(Y, name="y")
        z = popxl.variable(Z, name="z")
        shown = build(ir, x, y, z)
        if shown is not None:
            out = popxl.d2h_stream(shown.shape, shown.dtype, "out")
            ops.host_store(out, shown)
    written = sorted(t.name for t in Aliasing(ir.main_graph).written())
    with popxl.Session(ir, "cpu") as s:
        streamed = s.run()
    got = streamed[out] if shown is not None else None
    return s.get_tensor_data(x), s.get_tensor_data(y), s.get_tensor_data(z), got, written


def _check(result: tuple, x: np.ndarray, y: np.ndarray, z: np.ndarray, written: list[str]) -> None:
    np.testing.assert_array_equal(result[0], x)
    np.testing.assert_array_equal(result[1], y)
    np.testing.assert_array_equal(result[2], z)
    changed = [name for name, a, b in (("x", X, x), ("y", Y, y), ("z", Z, z)) if not np.array_equal(a, b)]
    assert changed == written
    assert result[4] == written


def test_in_place_op_on_a_view_of_a_view() -> None:
    def build(ir: popxl.Ir, x: popxl.Tensor, y: popxl.Tensor, z: popxl.Tensor) -> popxl.Tensor:
        view = ops.slice_(ops.transpose_(x), start=1, stop=5, step=2, axis=0)
        ops.add_(view, _c(np.arange(8).reshape(2, 4)))
        return view

    x = X.copy()
    view = x.T[1:5:2]
    view += np.arange(8, dtype=np.float32).reshape(2, 4)
    result = _run(build)
    _check(result, x, Y, Z, ["x"])
    np.testing.assert_array_equal(result[3], view)


def test_write_through_a_view_passed_by_reference_into_a_call() -> None:
    def build(ir: popxl.Ir, x: popxl.Tensor, y: popxl.Tensor, z: popxl.Tensor) -> None:
        def body(t: popxl.TensorByRef, u: popxl.Tensor) -> None:
            ops.var_updates.accumulate_(t, u, 2.0)

        view = ops.slice_(ops.slice_(x, start=1, stop=3, axis=0), start=0, stop=6, step=2, axis=1)
        graph = ir.create_graph(body, view, view.spec)
        ops.call(graph, view, ops.reshape_(z, (1, 3)) + popxl.constant(np.zeros((2, 3), np.float32)))
        ops.call(graph, ops.transpose_(ops.reshape_(y, (3, 2))), _c(np.ones((2, 3))))

    x, y = X.copy(), Y.copy()
    xv = x[1:3][:, 0:6:2]
    xv += 2 * Z
    yv = y.reshape(3, 2).T
    yv += 2.0
    assert np.shares_memory(xv, x) and np.shares_memory(yv, y)
    _check(_run(build), x, y, Z, ["x", "y"])


def test_write_through_a_view_passed_by_reference_into_a_repeat() -> None:
    def build(ir: popxl.Ir, x: popxl.Tensor, y: popxl.Tensor, z: popxl.Tensor) -> None:
        def body(t: popxl.TensorByRef, u: popxl.Tensor) -> None:
            ops.add_(ops.flatten_(t), ops.flatten_(u))

        graph = ir.create_graph(body, y.spec, y.spec)
        ops.repeat(graph, 3, ops.slice_(ops.slice_(x, start=0, stop=2, axis=0), start=0, stop=3, axis=1), y)

    x = X.copy()
    for _ in range(3):
        x[0:2, :3] += Y
    _check(_run(build), x, Y, Z, ["x"])


def test_in_place_output_aliasing_an_updated_input_used_again() -> None:
    def build(ir: popxl.Ir, x: popxl.Tensor, y: popxl.Tensor, z: popxl.Tensor) -> popxl.Tensor:
        row = ops.slice_(x, start=2, stop=3, axis=0)
        bumped = ops.add_(row, _c(np.ones((1, 6))))
        doubled = bumped * 2.0
        again = ops.var_updates.accumulate_(bumped, doubled)
        ops.relu_(ops.reshape_(again, (2, 3)))
        return row + ops.reshape_(y, (1, 6))

    x = X.copy()
    row = x[2:3]
    row += 1
    row += 2 * row.copy()
    np.maximum(row, 0, out=row)
    result = _run(build)
    _check(result, x, Y, Z, ["x"])
    np.testing.assert_array_equal(result[3], row + Y.reshape(1, 6))


def test_view_of_a_variable_updated_in_a_subgraph() -> None:
    def build(ir: popxl.Ir, x: popxl.Tensor, y: popxl.Tensor, z: popxl.Tensor) -> popxl.Tensor:
        def body(t: popxl.TensorByRef) -> None:
            ops.var_updates.accumulate_(ops.slice_(t, start=0, stop=1, axis=0), _c(np.full((1, 3), 10.0)))

        flat = ops.flatten_(y)
        graph = ir.create_graph(body, y)
        ops.call(graph, y)
        # The view, taken before the call, sees its update; a write through it afterwards updates y again.
        ops.add_(flat, _c(np.arange(6)))
        return flat

    y = Y.copy()
    flat = y.reshape(-1)
    y[0:1] += 10
    flat += np.arange(6, dtype=np.float32)
    result = _run(build)
    _check(result, X, y, Z, ["y"])
    np.testing.assert_array_equal(result[3], flat)


def test_view_of_several_variables_inside_a_subgraph_updates_each_caller_variable() -> None:
    def build(ir: popxl.Ir, x: popxl.Tensor, y: popxl.Tensor, z: popxl.Tensor) -> None:
        def body(a: popxl.TensorByRef, b: popxl.TensorByRef) -> None:
            ops.add_(ops.concat_([ops.flatten_(a), b], axis=0), _c(np.arange(9)))

        graph = ir.create_graph(body, y, z)
        ops.call(graph, y, z)

    joined = np.concatenate([Y.ravel(), Z]) + np.arange(9, dtype=np.float32)
    _check(_run(build), X, joined[:6].reshape(2, 3), joined[6:], ["y", "z"])


def test_a_subgraph_updating_a_copy_writes_nothing() -> None:
    def build(ir: popxl.Ir, x: popxl.Tensor, y: popxl.Tensor, z: popxl.Tensor) -> popxl.Tensor:
        def body(t: popxl.Tensor) -> popxl.Tensor:
            return ops.add_(t, _c(np.ones(3)))

        graph = ir.create_graph(body, z)
        (out,) = ops.call(graph, z)
        return out

    result = _run(build)
    _check(result, X, Y, Z, [])
    np.testing.assert_array_equal(result[3], Z + 1)
