"""What Graphcore's popxl applications (graphcore/examples nlp/*/popxl) use first and the runtime lacked:
flattened labels of the fused softmax loss, `get_current_context`, `Graph._ir`, indexing by tensors, and
called graphs' inputs that do not reach their outputs in autodiff. Results against NumPy and JAX."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from runtime_helpers import run_main

import popxl
from popxl import ops
from popxl.context import get_current_context
from popxl.errors import AutodiffError
from popxl.transforms import autodiff

RNG = np.random.default_rng(29)


def _spec(x: np.ndarray[Any, Any]) -> popxl.TensorSpec:
    return popxl.TensorSpec(x.shape, popxl.dtypes.as_dtype(x.dtype))


def _np_softmax(x: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    e = np.exp(x - x.max(-1, keepdims=True))
    return np.asarray(e / e.sum(-1, keepdims=True))


# ---- 1. nll_loss_with_softmax_grad flattens its labels (BERT's NSP head) -------------------------------------


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_nll_loss_with_softmax_grad_takes_labels_of_any_shape_with_one_per_row(reduction: str) -> None:
    x = RNG.normal(size=(2, 8)).astype(np.float32)
    labels = np.array([[3], [6]], np.int32)  # (2, 1), as BERT's NSP labels
    dl = np.array([[0.5], [2.0]], np.float32) if reduction == "none" else np.float32(3.0)

    def build() -> dict[str, popxl.Tensor]:
        loss, dx = ops.nll_loss_with_softmax_grad(
            popxl.constant(_np_softmax(x)), popxl.constant(labels), popxl.constant(dl), reduction=reduction
        )
        return {"loss": loss, "dx": dx}

    got = run_main(build)
    p = _np_softmax(x.astype(np.float64))
    rows = labels.reshape(-1)
    per_sample = -np.log(p[np.arange(2), rows])
    d = p - np.eye(8)[rows]
    if reduction == "none":
        want_loss, want_dx = per_sample.reshape(labels.shape), d * dl.reshape(-1, 1)
    else:
        scale = 1 / 2 if reduction == "mean" else 1.0
        want_loss, want_dx = per_sample.sum() * scale, d * scale * dl
    assert got["loss"].shape == np.shape(want_loss)
    assert got["dx"].shape == x.shape
    np.testing.assert_allclose(got["loss"], want_loss, rtol=1e-5)
    np.testing.assert_allclose(got["dx"], want_dx, rtol=1e-5, atol=1e-7)


def test_nll_loss_with_softmax_grad_flattens_leading_axes_of_probs() -> None:
    x = RNG.normal(size=(2, 3, 5)).astype(np.float32)
    labels = RNG.integers(0, 5, size=(3, 2)).astype(np.int32)  # 6 labels for 2 x 3 rows

    def build() -> dict[str, popxl.Tensor]:
        loss, dx = ops.nll_loss_with_softmax_grad(popxl.constant(_np_softmax(x)), popxl.constant(labels))
        return {"loss": loss, "dx": dx}

    got = run_main(build)
    p = _np_softmax(x.astype(np.float64)).reshape(6, 5)
    rows = labels.reshape(-1)
    np.testing.assert_allclose(got["loss"], -np.log(p[np.arange(6), rows]).mean(), rtol=1e-5)
    np.testing.assert_allclose(got["dx"], ((p - np.eye(5)[rows]) / 6).reshape(x.shape), rtol=1e-5, atol=1e-7)


def test_nll_loss_labels_keep_popart_shapes() -> None:
    ir = popxl.Ir()
    with ir.main_graph:
        probs = popxl.constant(np.full((2, 8), 1 / 8, np.float32))
        with pytest.raises(ValueError, match="one label per row"):
            ops.nll_loss_with_softmax_grad(probs, popxl.constant(np.zeros((3,), np.int32)))
        # popart's NllOp (unlike the fused op) wants the labels of the shape of probs but its last axis.
        with pytest.raises(ValueError, match="do not index"):
            ops.nll_loss(probs, popxl.constant(np.zeros((2, 1), np.int32)))


# ---- 2. popxl.context.get_current_context (BLOOM, GPT-3 175B) ------------------------------------------------


def test_get_current_context_reads_the_building_state() -> None:
    ir = popxl.Ir()
    ctx = get_current_context()
    with pytest.raises(RuntimeError):
        _ = ctx.graph
    outside = ctx.in_sequence
    assert outside is None
    with ir.main_graph:
        sub = ir.create_empty_graph("sub")
        assert ctx.graph is ir.main_graph and ctx.graph.ir is ir and ctx.ir is ir
        with sub:
            assert ctx.graph is sub and ctx.main_graph is ir.main_graph
        assert (ctx.ipu_id, ctx.io_tile_set, ctx.name_scopes) == (0, False, [])
        with popxl.ipu(1), popxl.io_tiles(), popxl.name_scope("a"), popxl.name_scope("b"), popxl.in_sequence():
            assert (ctx.ipu_id, ctx.io_tile_set, ctx.name_scopes, ctx.in_sequence) == (1, True, ["a", "b"], True)
            t = popxl.constant(1.0, name="t")
        assert t.name == "a/b/t"
        ctx.push_name_scope("c")
        assert popxl.constant(1.0, name="u").name == "c/u"
        assert ctx.pop_name_scope() == "c"
        ctx.push_graph(sub)
        assert popxl.gcg() is sub
        assert ctx.pop_graph() is sub and popxl.gcg() is ir.main_graph
    assert get_current_context() is ctx


# ---- 4. Graph._ir (GPT-J, T5 phased finetuning) --------------------------------------------------------------


def test_graph_ir_attribute_creates_graphs() -> None:
    ir = popxl.Ir()
    with ir.main_graph:
        g = ir.create_graph(lambda x: x * 2.0, popxl.TensorSpec((2,), popxl.float32))
        assert g._ir is ir and g.ir is ir
        h = g._ir.create_graph(lambda x: x + 1.0, popxl.TensorSpec((2,), popxl.float32))
        (y,) = ops.call(h, *ops.call(g, popxl.constant(np.array([1.0, 2.0], np.float32))))
        d = popxl.d2h_stream(y.shape, y.dtype, "y")
        ops.host_store(d, y)
    with popxl.Session(ir, "cpu") as session:
        np.testing.assert_array_equal(session.run()[d], np.array([3.0, 5.0], np.float32))


# ---- 5. t[indices] with an integer or boolean tensor (GPT-J, T5 inference) -----------------------------------

TABLE = RNG.normal(size=(6, 4)).astype(np.float32)
ROWS = np.array([5, 0, 5, 2], np.int32)


def test_integer_tensor_index_gathers_rows_and_host_arrays_become_constants() -> None:
    def build() -> dict[str, popxl.Tensor]:
        t = popxl.constant(TABLE)
        return {
            "tensor": t[popxl.constant(ROWS)],
            "matrix": t[popxl.constant(ROWS.reshape(2, 2))],
            "array": t[ROWS.astype(np.int64)],
            "list": t[[1, 3]],
            "slices": t[1, 2:],  # a tuple of ints and slices still slices
        }

    got = run_main(build)
    np.testing.assert_array_equal(got["tensor"], TABLE[ROWS])
    np.testing.assert_array_equal(got["matrix"], TABLE[ROWS.reshape(2, 2)])
    np.testing.assert_array_equal(got["array"], TABLE[ROWS])
    np.testing.assert_array_equal(got["list"], TABLE[[1, 3]])
    np.testing.assert_array_equal(got["slices"], TABLE[1, 2:])


def test_boolean_tensor_index_is_a_mask_keeping_the_shape() -> None:
    mask = RNG.normal(size=(6, 4)) > 0
    row_mask = np.array([True, False, True, True], bool)  # broadcast over the rows, NumPy's way
    got = run_main(
        lambda: {
            "mask": popxl.constant(TABLE)[popxl.constant(mask)],
            "rows": popxl.constant(TABLE)[row_mask],
        }
    )
    np.testing.assert_array_equal(got["mask"], np.where(mask, TABLE, 0))
    np.testing.assert_array_equal(got["rows"], np.where(row_mask, TABLE, 0))


def test_index_tensors_of_other_types_and_bool_keys_are_refused() -> None:
    ir = popxl.Ir()
    with ir.main_graph:
        t = popxl.constant(TABLE)
        for key in (True, "a", popxl.constant(np.zeros((2,), np.float32)), 1.5):
            with pytest.raises(TypeError):
                t[key]


def test_gradient_of_integer_tensor_index_adds_into_the_gathered_rows() -> None:
    dy = RNG.normal(size=(4, 4)).astype(np.float32)
    ir = popxl.Ir()
    with ir.main_graph:
        graph = ir.create_graph(lambda t, i: t[i] * 3.0, _spec(TABLE), _spec(ROWS))
        info = autodiff(graph, grads_required=graph.inputs[:1])
        fwd = ops.call_with_info(graph, popxl.constant(TABLE), popxl.constant(ROWS))
        (dt,) = ops.call(info.graph, popxl.constant(dy), inputs_dict=info.inputs_dict(fwd))
        d = popxl.d2h_stream(dt.shape, dt.dtype, "dt")
        ops.host_store(d, dt)
    with popxl.Session(ir, "cpu") as session:
        got = session.run()[d]
    _, pullback = jax.vjp(lambda t: jnp.take(t, jnp.asarray(ROWS), axis=0) * 3.0, jnp.asarray(TABLE))
    np.testing.assert_allclose(got, np.asarray(pullback(jnp.asarray(dy))[0]), rtol=1e-6)


# ---- 6. a called graph's input that does not reach its outputs (T5's rel_pos_weight) ------------------------

X = RNG.normal(size=(3,)).astype(np.float32)
W = RNG.normal(size=(3,)).astype(np.float32)
DY = RNG.normal(size=(3,)).astype(np.float32)


def _run_grads(
    build: Callable[[popxl.Ir], tuple[popxl.Graph, Sequence[popxl.Tensor]]],
) -> tuple[list[np.ndarray[Any, Any]], popxl.transforms.GradGraphInfo, dict[popxl.Graph, Any]]:
    ir = popxl.Ir()
    with ir.main_graph:
        outer, inputs = build(ir)
        infos = autodiff(outer, return_all_grad_graphs=True)
        info = infos[outer]
        fwd = ops.call_with_info(outer, *inputs)
        grads = ops.call(info.graph, popxl.constant(DY), inputs_dict=info.inputs_dict(fwd))
        streams = [popxl.d2h_stream(g.shape, g.dtype, f"d{i}") for i, g in enumerate(grads)]
        for s, g in zip(streams, grads):
            ops.host_store(s, g)
    with popxl.Session(ir, "cpu") as session:
        out = session.run()
    return [out[s] for s in streams], info, infos


def _unused_w(ir: popxl.Ir) -> popxl.Graph:
    # Takes `w` and never uses it, as a T5 attention graph takes the relative position weight.
    return ir.create_graph(lambda x, w: ops.sin(x) * x, _spec(X), _spec(W))


def test_called_graph_input_not_reaching_its_outputs_gets_no_gradient() -> None:
    def build(ir: popxl.Ir) -> tuple[popxl.Graph, Sequence[popxl.Tensor]]:
        sub = _unused_w(ir)

        def outer_fn(x: popxl.Tensor, w: popxl.Tensor) -> popxl.Tensor:
            (y,) = ops.call(sub, x, w)
            (z,) = ops.call(sub, y, w)  # a second call reuses the gradient graph of the first
            return z + w * w

        outer = ir.create_graph(outer_fn, _spec(X), _spec(W))
        return outer, [popxl.constant(X), popxl.constant(W)]

    got, info, infos = _run_grads(build)
    _, pullback = jax.vjp(lambda x, w: jnp.sin(jnp.sin(x) * x) * (jnp.sin(x) * x) + w * w, X, W)
    for g, want in zip(got, pullback(jnp.asarray(DY))):
        np.testing.assert_allclose(g, np.asarray(want), rtol=1e-5, atol=1e-6)
    (sub_info,) = [i for g, i in infos.items() if g is not info.forward_graph]
    # popart's gradient graph of a called graph has no output for the input that does not reach its outputs.
    assert sub_info.outputs == (sub_info.forward_graph.inputs[0],)
    assert len(sub_info.graph.outputs) == 1


def test_repeated_body_calling_such_a_graph_gives_the_other_gradients() -> None:
    def build(ir: popxl.Ir) -> tuple[popxl.Graph, Sequence[popxl.Tensor]]:
        sub = _unused_w(ir)
        body = ir.create_graph(lambda x, w: ops.call(sub, x, w)[0], _spec(X), _spec(W))

        def outer_fn(x: popxl.Tensor, w: popxl.Tensor) -> popxl.Tensor:
            return ops.repeat(body, 2, x, w)[0] * w

        outer = ir.create_graph(outer_fn, _spec(X), _spec(W))
        return outer, [popxl.constant(X), popxl.constant(W)]

    got, _, _ = _run_grads(build)

    def f(x: jax.Array) -> jax.Array:
        return jnp.sin(x) * x

    _, pullback = jax.vjp(lambda x, w: f(f(x)) * w, X, W)
    for g, want in zip(got, pullback(jnp.asarray(DY))):
        np.testing.assert_allclose(g, np.asarray(want), rtol=1e-5, atol=1e-6)


def test_a_required_gradient_that_does_not_reach_the_outputs_is_still_an_error() -> None:
    ir = popxl.Ir()
    with ir.main_graph:
        sub = _unused_w(ir)
        with pytest.raises(AutodiffError, match="Unable to provide required gradient"):
            autodiff(sub)
