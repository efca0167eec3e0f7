"""In-place views (`reshape_`, `transpose_`, `slice_`, `flatten_`, `concat_`) share storage as NumPy views do."""

from __future__ import annotations

import numpy as np

import popxl
from popxl import ops

X = np.arange(24, dtype=np.float32).reshape(4, 6)
ONES = np.ones((2, 3), np.float32)


def _run(build: object) -> tuple[np.ndarray, np.ndarray]:
    """Runs `build(variable)`, which returns a tensor to stream out; returns it and the variable's new value."""
    ir = popxl.Ir()
    with ir.main_graph:
        v = popxl.variable(X, name="v")
        t = build(v)  # type: ignore[operator]
        out = popxl.d2h_stream(t.shape, t.dtype, "out")
        ops.host_store(out, t)
    with popxl.Session(ir, "cpu") as s:
        got = s.run()[out]
    return got, s.get_tensor_data(v)


def test_update_through_a_chain_of_views_reaches_the_variable() -> None:
    def build(v: popxl.Tensor) -> popxl.Tensor:
        view = ops.slice_(ops.transpose_(ops.reshape_(v, (3, 8))), start=1, stop=7, step=2, axis=0)
        ops.var_updates.accumulate_(view, popxl.constant(np.full((3, 3), 100, np.float32)))
        return view

    got, var = _run(build)
    ref = X.copy()
    ref_view = ref.reshape(3, 8).T[1:7:2]
    ref_view += 100
    np.testing.assert_array_equal(var, ref)
    np.testing.assert_array_equal(got, ref_view)


def test_view_reads_updates_made_to_its_base_after_it_was_taken() -> None:
    def build(v: popxl.Tensor) -> popxl.Tensor:
        view = ops.flatten_(v)
        ops.var_updates.accumulate_(v, popxl.constant(X))
        return view

    got, var = _run(build)
    np.testing.assert_array_equal(got, (2 * X).ravel())
    np.testing.assert_array_equal(var, 2 * X)


def test_copying_forms_do_not_alias() -> None:
    def build(v: popxl.Tensor) -> popxl.Tensor:
        copy = ops.slice(v, start=0, stop=2, axis=0)
        ops.var_updates.accumulate_(copy, popxl.constant(np.ones((2, 6), np.float32)))
        return copy

    got, var = _run(build)
    np.testing.assert_array_equal(got, X[:2] + 1)
    np.testing.assert_array_equal(var, X)


def test_concat_view_updates_each_input() -> None:
    ir = popxl.Ir()
    with ir.main_graph:
        a = popxl.variable(ONES, name="a")
        b = popxl.variable(2 * ONES, name="b")
        joined = ops.concat_([a, b], axis=1)
        joined += popxl.constant(np.arange(12, dtype=np.float32).reshape(2, 6))
    with popxl.Session(ir, "cpu") as s:
        s.run()
    full = np.concatenate([ONES, 2 * ONES], axis=1) + np.arange(12, dtype=np.float32).reshape(2, 6)
    np.testing.assert_array_equal(s.get_tensor_data(a), full[:, :3])
    np.testing.assert_array_equal(s.get_tensor_data(b), full[:, 3:])


def test_view_of_a_called_graphs_by_reference_input_updates_the_caller() -> None:
    ir = popxl.Ir()
    with ir.main_graph:
        v = popxl.variable(X, name="v")

        def body(t: popxl.TensorByRef) -> None:
            ops.var_updates.accumulate_(ops.reshape_(t, (24,)), popxl.constant(np.arange(24, dtype=np.float32)))

        graph = ir.create_graph(body, v)
        ops.call(graph, v)
    with popxl.Session(ir, "cpu") as s:
        s.run()
    np.testing.assert_array_equal(s.get_tensor_data(v), X + np.arange(24, dtype=np.float32).reshape(4, 6))
