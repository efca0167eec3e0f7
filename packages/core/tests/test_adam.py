"""AdamOptimizerStep against Adam written in NumPy."""

from __future__ import annotations

import numpy as np
import pytest

import popxl
from popxl import ops
from popxl_addons.core import AdamOptimizerStep


def numpy_adamw(w, grads, lr, b1, b2, eps, wd, first_dtype=np.float32, scale=1.0):  # type: ignore[no-untyped-def]
    """AdamW over the given gradients, the first moment stored in `first_dtype` after each update."""
    w = w.astype(np.float64)
    m = np.zeros_like(w)
    v = np.zeros_like(w)
    for t, g in enumerate(grads, start=1):
        g = g * scale
        m = (b1 * m + (1 - b1) * g).astype(first_dtype).astype(np.float64)
        v = b2 * v + (1 - b2) * g * g
        update = (m / (1 - b1**t)) / (np.sqrt(v / (1 - b2**t)) + eps) + wd * w
        w = w - lr * update
    return w


@pytest.mark.parametrize("first_order_dtype", [popxl.float32, popxl.float16])
def test_three_adamw_steps_match_numpy(first_order_dtype: popxl.dtype) -> None:
    rng = np.random.default_rng(42)
    w0 = rng.normal(size=(2, 3)).astype(np.float32)
    grads = rng.normal(size=(3, 2, 3)).astype(np.float32)
    ir = popxl.Ir()
    with ir.main_graph:
        var = popxl.variable(w0, name="w")
        h = popxl.h2d_stream((2, 3), popxl.float32, "grad")
        grad = ops.host_load(h)
        state, step = AdamOptimizerStep().create_graph(
            var, grad, lr=0.05, eps=1e-5, weight_decay=0.01, first_order_dtype=first_order_dtype
        )
        variables = state.init()
        step.bind(variables).call(var, grad)
    assert sorted(variables.keys_flat()) == ["first_order", "second_order", "step"]
    assert variables.first_order.dtype == first_order_dtype
    with popxl.Session(ir, "cpu") as session:
        for g in grads:
            session.run({h: g})
        got = session.get_tensor_data(var)
        assert session.get_tensor_data(variables.step) == 3
    first = np.float16 if first_order_dtype == popxl.float16 else np.float32
    expected = numpy_adamw(w0, grads, 0.05, 0.9, 0.999, 1e-5, 0.01, first)
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-5)


def test_loss_scaling_and_global_norm_clipping_scale_the_gradient() -> None:
    rng = np.random.default_rng(3)
    w0 = rng.normal(size=4).astype(np.float32)
    g0 = rng.normal(size=4).astype(np.float32)
    ir = popxl.Ir()
    with ir.main_graph:
        var = popxl.variable(w0, name="w")
        grad = popxl.constant(g0 * 8)
        norm = popxl.constant(np.float32(4.0))
        state, step = AdamOptimizerStep().create_graph(
            var, grad, lr=0.1, weight_decay=0.0, first_order_dtype=popxl.float32, bias_correction=False,
            loss_scaling=8, global_norm=norm, global_norm_max=2.0,
        )  # fmt: skip
        step.bind(state.init()).call(var, grad, norm)  # a tensor argument becomes a graph input
    with popxl.Session(ir, "cpu") as session:
        session.run()
        got = session.get_tensor_data(var)
    g = g0 * (2.0 / 4.0)  # unscaled, then clipped to the max norm
    m, v = 0.1 * g, 0.001 * g * g  # one step without bias correction
    np.testing.assert_allclose(got, w0 - 0.1 * m / (np.sqrt(v) + 1e-5), rtol=1e-5)
    assert "step" not in state.keys_flat()
