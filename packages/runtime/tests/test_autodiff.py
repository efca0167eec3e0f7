"""Autodiff: gradients against jax.grad of the same maths, expected inputs, stitching, training."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import popxl
from popxl import ops
from popxl.transforms import ExpectedConnectionType, autodiff

rng = np.random.default_rng(1)


def _grads(
    fn: Callable[..., popxl.Tensor], inputs: Sequence[np.ndarray[Any, Any]], dy: np.ndarray[Any, Any]
) -> tuple[np.ndarray[Any, Any], list[np.ndarray[Any, Any]]]:
    """Run `fn` and its autodiff gradient graph; returns the output and the input gradients."""
    ir = popxl.Ir()
    with ir.main_graph:
        graph = ir.create_graph(fn, *[popxl.TensorSpec(x.shape, popxl.float32) for x in inputs])
        info = autodiff(graph)
        consts = [popxl.constant(x) for x in inputs]
        fwd = ops.call_with_info(graph, *consts)
        grads = ops.call(info.graph, popxl.constant(dy), inputs_dict=info.inputs_dict(fwd))
        streams = [popxl.d2h_stream(t.shape, t.dtype, f"out{i}") for i, t in enumerate([fwd.outputs[0], *grads])]
        for s, t in zip(streams, [fwd.outputs[0], *grads]):
            ops.host_store(s, t)
    with popxl.Session(ir, "cpu") as session:
        out = session.run()
    return out[streams[0]], [out[s] for s in streams[1:]]


def _reference(f: Callable[..., Any], inputs: Sequence[np.ndarray[Any, Any]], dy: np.ndarray[Any, Any]) -> Any:
    y, pullback = jax.vjp(f, *[jnp.asarray(x) for x in inputs])
    return np.asarray(y), [np.asarray(g) for g in pullback(jnp.asarray(dy))]


A = rng.normal(size=(3, 4)).astype(np.float32)
B = rng.normal(size=(3, 4)).astype(np.float32)
W = rng.normal(size=(4, 5)).astype(np.float32)
ROW = rng.normal(size=(4,)).astype(np.float32)
CASES: dict[str, tuple[Callable[..., popxl.Tensor], Callable[..., Any], list[np.ndarray[Any, Any]]]] = {
    "add_broadcast": (lambda a, b: a + b, lambda a, b: a + b, [A, ROW]),
    "sub": (lambda a, b: a - b, lambda a, b: a - b, [A, B]),
    "mul": (lambda a, b: a * b, lambda a, b: a * b, [A, B]),
    "div": (lambda a, b: a / (ops.abs(b) + 1.0), lambda a, b: a / (jnp.abs(b) + 1), [A, B]),
    "matmul": (lambda a, w: a @ w, lambda a, w: a @ w, [A, W]),
    "gelu": (ops.gelu, lambda a: jax.nn.gelu(a, approximate=True), [A]),
    "tanh_exp_log": (lambda a: ops.log(ops.exp(ops.tanh(a)) + 1.0), lambda a: jnp.log(jnp.exp(jnp.tanh(a)) + 1), [A]),
    "relu_sigmoid": (lambda a: ops.relu(a) * ops.sigmoid(a), lambda a: jax.nn.relu(a) * jax.nn.sigmoid(a), [A]),
    "sqrt_square": (lambda a: ops.sqrt(ops.square(a) + 1.0), lambda a: jnp.sqrt(a * a + 1), [A]),
    "softmax": (lambda a: ops.softmax(a, 1), lambda a: jax.nn.softmax(a, axis=1), [A]),
    "reductions": (
        lambda a: ops.sum(a, 0) * ops.mean(a, 0) + ops.max(a, 0),
        lambda a: a.sum(0) * a.mean(0) + a.max(0),
        [A],
    ),
    "shape_ops": (
        lambda a: ops.concat([ops.transpose(ops.reshape(a, (4, 3))), ops.slice(a, 1, 3, axis=1)], axis=1),
        lambda a: jnp.concatenate([a.reshape(4, 3).T, a[:, 1:3]], axis=1),
        [A],
    ),
    "where_max": (
        lambda a, b: ops.where(ops.greater(a, b), a, b) + ops.maximum(a, b),
        lambda a, b: jnp.where(a > b, a, b) + jnp.maximum(a, b),
        [A, B],
    ),
    "layer_norm": (
        lambda a, w, b: ops.layer_norm(a, w, b),
        lambda a, w, b: (a - a.mean(1, keepdims=True)) / jnp.sqrt(a.var(1, keepdims=True) + 1e-5) * w + b,
        [A, ROW, ROW * 2],
    ),
    "gather_dynamic_slice": (
        lambda a: (
            ops.gather(a, popxl.constant(np.array([2, 0, 2], np.int32)))
            * ops.dynamic_slice(a, popxl.constant(np.array([1], np.int32)), [0], [1])
        ),
        lambda a: a[np.array([2, 0, 2])] * a[1:2],
        [A],
    ),
    "dynamic_update": (
        lambda a, b: ops.dynamic_update(
            a, popxl.constant(np.array([1, 0], np.int32)), ops.slice(b, 0, 2, axis=0) * 2.0, [0, 1], [2, 4]
        ),
        lambda a, b: jnp.asarray(a).at[1:3, 0:4].set(b[0:2] * 2),
        [A, B],
    ),
    "logsumexp": (lambda a: ops.logsumexp(a, 1), lambda a: jax.scipy.special.logsumexp(a, axis=1), [A]),
    "expand_cast": (
        lambda a: ops.expand(ops.cast(a, popxl.float16), (2, 3, 4)),
        lambda a: jnp.broadcast_to(a.astype(jnp.float16), (2, 3, 4)),
        [A],
    ),
}


@pytest.mark.parametrize("name", list(CASES))
def test_gradients_match_jax(name: str) -> None:
    fn, ref, inputs = CASES[name]
    out = np.asarray(ref(*inputs))
    dy = rng.normal(size=out.shape).astype(out.dtype)
    y_ref, grads_ref = _reference(ref, inputs, dy)
    y, grads = _grads(fn, inputs, dy)
    tol = 1e-2 if y_ref.dtype == np.float16 else 1e-5
    np.testing.assert_allclose(y, y_ref, rtol=tol, atol=tol)
    for g, r in zip(grads, grads_ref):
        np.testing.assert_allclose(g, r, rtol=tol, atol=tol)


def test_gradient_through_nested_calls() -> None:
    def inner(x: popxl.Tensor, w: popxl.Tensor) -> popxl.Tensor:
        return ops.tanh(x @ w)

    def outer(x: popxl.Tensor, w: popxl.Tensor) -> popxl.Tensor:
        g = popxl.gir().create_graph(inner, x.spec, w.spec)
        (h,) = ops.call(g, x, w)
        (h2,) = ops.call(g, h, ops.transpose(w) @ w)
        return h2 * h

    w = rng.normal(size=(4, 4)).astype(np.float32)

    def ref(x: Any, w: Any) -> Any:
        h = jnp.tanh(x @ w)
        return jnp.tanh(h @ (w.T @ w)) * h

    dy = rng.normal(size=(3, 4)).astype(np.float32)
    y, grads = _grads(outer, [A, w], dy)
    y_ref, grads_ref = _reference(ref, [A, w], dy)
    np.testing.assert_allclose(y, y_ref, rtol=1e-5, atol=1e-6)
    for g, r in zip(grads, grads_ref):
        np.testing.assert_allclose(g, r, rtol=1e-4, atol=1e-5)


def _expected(fn: Callable[..., popxl.Tensor], specs: Sequence[popxl.TensorSpec], required: Sequence[int]) -> Any:
    ir = popxl.Ir()
    with ir.main_graph:
        graph = ir.create_graph(fn, *specs)
        info = autodiff(graph, grads_required=[graph.inputs[i] for i in required])
    return graph, info


def test_expected_inputs_are_minimal_and_ordered_by_id() -> None:
    spec = popxl.TensorSpec((2, 2), popxl.float32)
    g, info = _expected(lambda x, y: x + y, [spec, spec], [0, 1])
    assert [ec.connection_type for ec in info.expected_inputs] == [ExpectedConnectionType.FwdGrad]

    g, info = _expected(lambda x, w: x * w, [spec, spec], [0])
    assert [(ec.connection_type, ec.fwd_tensor) for ec in info.expected_inputs] == [
        (ExpectedConnectionType.FwdGrad, g.outputs[0]),
        (ExpectedConnectionType.Fwd, g.inputs[1]),
    ]

    def chain(z: popxl.Tensor, a: popxl.Tensor, m: popxl.Tensor) -> popxl.Tensor:
        return ops.gelu(ops.gelu(z @ m) + a) @ m

    g, info = _expected(chain, [spec, spec, spec], [0])
    fwd_ids = [ec.fwd_tensor.id for ec in info.expected_inputs[1:]]
    assert fwd_ids == sorted(fwd_ids)
    names = [ec.fwd_tensor.name for ec in info.expected_inputs[1:]]
    # gelu needs its input, matmul needs the other operand; m is not required so z is not needed.
    assert names == ["add_out", "m", "matmul_out"]
    assert len(info.graph.inputs) == len(info.expected_inputs)
    assert [ec.fwd_tensor for ec in info.expected_outputs] == [g.inputs[0]]


def test_needed_intermediates_are_stitched_to_existing_call_sites() -> None:
    ir = popxl.Ir()
    with ir.main_graph:
        spec = popxl.TensorSpec((2,), popxl.float32)
        graph = ir.create_graph(lambda x: ops.tanh(ops.exp(x)), spec)
        site = ops.call_with_info(graph, popxl.constant(np.array([0.1, 0.2], np.float32)))
        assert len(site.outputs) == 1
        info = autodiff(graph)
        needed = [ec.fwd_tensor for ec in info.expected_inputs[1:]]
        assert [t.name for t in needed] == ["exp_out", "x"]
        # Only the intermediate becomes a new output; the input is reachable already.
        assert list(graph.outputs[1:]) == [needed[0]] and len(site.outputs) == 2
        (dx,) = ops.call(info.graph, popxl.constant(np.ones(2, np.float32)), inputs_dict=info.inputs_dict(site))
        d = popxl.d2h_stream((2,), popxl.float32, "dx")
        ops.host_store(d, dx)
    with popxl.Session(ir, "cpu") as s:
        out = s.run()[d]
    x = np.array([0.1, 0.2], np.float32)
    np.testing.assert_allclose(out, (1 - np.tanh(np.exp(x)) ** 2) * np.exp(x), rtol=1e-6)


def test_autodiff_errors() -> None:
    ir = popxl.Ir()
    with ir.main_graph:
        spec = popxl.TensorSpec((2,), popxl.float32)
        graph = ir.create_graph(lambda x, y: x * 2.0, spec, spec)
        with pytest.raises(RuntimeError, match="Unable to provide required gradient"):
            autodiff(graph)
        remainder = ir.create_graph(lambda x: ops.fmod(x, popxl.constant(np.ones(2, np.float32))), spec)
        with pytest.raises(RuntimeError, match="'fmod' has no gradient rule"):
            autodiff(remainder)
        info = autodiff(ir.create_graph(lambda x: x * x, spec))
        other = ir.create_graph(lambda x: x, spec)
        site = ops.call_with_info(other, popxl.constant(np.zeros(2, np.float32)))
        with pytest.raises(TypeError, match="not of the forward graph"):
            info.inputs_dict(site)
    with pytest.raises(TypeError):
        popxl.transforms.GradGraphInfo()


def test_linear_input_gradient_of_the_seed_normal_path() -> None:
    x = rng.normal(size=(8, 2)).astype(np.float32)
    w = rng.normal(0, 0.1, size=(2, 2)).astype(np.float32)
    dy = rng.normal(size=(8, 2)).astype(np.float32)
    ir = popxl.Ir()
    with ir.main_graph, popxl.in_sequence():
        h = popxl.h2d_stream((8, 2), popxl.float32, "x")
        d = popxl.d2h_stream((8, 2), popxl.float32, "dx")

        def linear(x: popxl.Tensor, weight: popxl.Tensor, bias: popxl.Tensor) -> popxl.Tensor:
            return x @ weight + bias

        graph = ir.create_graph(
            linear, h.spec, popxl.TensorSpec((2, 2), popxl.float32), popxl.TensorSpec((2,), popxl.float32)
        )
        info = autodiff(graph, grads_required=graph.inputs[:1])
        assert [ec.fwd_tensor.name for ec in info.expected_inputs] == ["add_out", "weight"]
        weight = popxl.variable(w, name="weight")
        bias = popxl.variable(np.zeros(2, np.float32), name="bias")
        site = ops.call_with_info(graph, ops.host_load(h), weight, bias)
        (dx,) = ops.call(info.graph, popxl.constant(dy), inputs_dict=info.inputs_dict(site))
        ops.host_store(d, dx)
    with popxl.Session(ir, "cpu") as s:
        out = s.run({h: x})[d]
    np.testing.assert_allclose(out, dy @ w.T, rtol=1e-5, atol=1e-6)


def test_gradient_accumulated_into_a_variable_over_runs() -> None:
    x = rng.normal(size=(4, 3)).astype(np.float32)
    ir = popxl.Ir()
    with ir.main_graph:
        h = popxl.h2d_stream((4, 3), popxl.float32, "x")
        graph = ir.create_graph(lambda x, w: ops.sum(x @ w), h.spec, popxl.TensorSpec((3, 2), popxl.float32))
        info = autodiff(graph, grads_required=graph.inputs[1:])
        w = popxl.variable(np.ones((3, 2), np.float32), name="w")
        acc = popxl.variable(np.zeros((3, 2), np.float32), name="acc")
        site = ops.call_with_info(graph, ops.host_load(h), w)
        (dw,) = ops.call(info.graph, popxl.constant(np.float32(1)), inputs_dict=info.inputs_dict(site))
        ops.var_updates.accumulate_(acc, dw)
    with popxl.Session(ir, "cpu") as s:
        for k in range(3):
            s.run({h: x * (k + 1)})
    np.testing.assert_allclose(s.get_tensor_data(acc), 6 * np.repeat(x.sum(0)[:, None], 2, axis=1), rtol=1e-5)


def test_two_layer_mlp_sgd_matches_jax() -> None:
    steps, lr = 20, 0.1
    xs = rng.normal(size=(steps, 8, 4)).astype(np.float32)
    ys = rng.normal(size=(steps, 8, 2)).astype(np.float32)
    w1_0 = rng.normal(0, 0.5, size=(4, 16)).astype(np.float32)
    w2_0 = rng.normal(0, 0.5, size=(16, 2)).astype(np.float32)

    ir = popxl.Ir()
    with ir.main_graph, popxl.in_sequence():
        hx = popxl.h2d_stream((8, 4), popxl.float32, "x")
        hy = popxl.h2d_stream((8, 2), popxl.float32, "y")

        def loss_fn(x: popxl.Tensor, y: popxl.Tensor, w1: popxl.Tensor, w2: popxl.Tensor) -> popxl.Tensor:
            err = ops.gelu(x @ w1) @ w2 - y
            return ops.mean(err * err)

        graph = ir.create_graph(
            loss_fn,
            hx.spec,
            hy.spec,
            popxl.TensorSpec((4, 16), popxl.float32),
            popxl.TensorSpec((16, 2), popxl.float32),
        )
        info = autodiff(graph, grads_required=graph.inputs[2:])
        w1 = popxl.variable(w1_0, name="w1")
        w2 = popxl.variable(w2_0, name="w2")
        site = ops.call_with_info(graph, ops.host_load(hx), ops.host_load(hy), w1, w2)
        g1, g2 = ops.call(info.graph, popxl.constant(np.float32(1)), inputs_dict=info.inputs_dict(site))
        ops.var_updates.scaled_add_(w1, g1, 1.0, -lr)
        ops.var_updates.scaled_add_(w2, g2, 1.0, -lr)
    with popxl.Session(ir, "cpu") as s:
        for i in range(steps):
            s.run({hx: xs[i], hy: ys[i]})

    def loss(params: tuple[Any, Any], x: Any, y: Any) -> Any:
        err = jax.nn.gelu(x @ params[0], approximate=True) @ params[1] - y
        return jnp.mean(err * err)

    params = (jnp.asarray(w1_0), jnp.asarray(w2_0))
    for i in range(steps):
        grads = jax.grad(loss)(params, xs[i], ys[i])
        params = (params[0] - lr * grads[0], params[1] - lr * grads[1])
    np.testing.assert_allclose(s.get_tensor_data(w1), params[0], atol=1e-5)
    np.testing.assert_allclose(s.get_tensor_data(w2), params[1], atol=1e-5)


@pytest.mark.parametrize("count", [1, 5])
def test_gradient_through_repeat(count: int) -> None:
    w = rng.normal(0, 0.5, size=(4, 4)).astype(np.float32)
    b = rng.normal(size=(4,)).astype(np.float32)

    def looped(x: popxl.Tensor, w: popxl.Tensor, b: popxl.Tensor) -> popxl.Tensor:
        def body(
            i: popxl.Tensor, h: popxl.Tensor, w: popxl.Tensor, b: popxl.Tensor
        ) -> tuple[popxl.Tensor, popxl.Tensor]:
            scale = ops.cast(i, popxl.float32) * 0.1 + 1.0
            return i + 1, ops.tanh(h @ w + b) * scale + h

        g = popxl.gir().create_graph(body, popxl.TensorSpec((), popxl.int32), x.spec, w.spec, b.spec)
        _, h = ops.repeat(g, count, 0, x, w, b)
        return h * h

    def ref(x: Any, w: Any, b: Any) -> Any:
        h = x
        for i in range(count):
            h = jnp.tanh(h @ w + b) * (i * 0.1 + 1.0) + h
        return h * h

    dy = rng.normal(size=(3, 4)).astype(np.float32)
    y, grads = _grads(looped, [A, w, b], dy)
    y_ref, grads_ref = _reference(ref, [A, w, b], dy)
    np.testing.assert_allclose(y, y_ref, rtol=1e-5, atol=1e-5)
    for g, r in zip(grads, grads_ref):
        np.testing.assert_allclose(g, r, rtol=1e-4, atol=1e-4)
