"""Linear, LayerNorm and Scale against NumPy and jax.vjp, forward and gradients."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import popxl
from popxl import ops
from popxl_addons.core import autodiff_with_accumulation, batch_serial_buffer, batch_serialise
from popxl_addons.layers import LayerNorm, Linear, Scale
from popxl_addons.layers.init import truncated_normal

rng = np.random.default_rng(4)


def _fwd_and_grads(
    module: Any, x: np.ndarray[Any, Any], dy_shape: tuple[int, ...], weights: dict[str, np.ndarray[Any, Any]]
) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any], dict[str, np.ndarray[Any, Any]], np.ndarray[Any, Any]]:
    dy = rng.normal(size=dy_shape).astype(np.float32)
    ir = popxl.Ir()
    with ir.main_graph, popxl.in_sequence():
        h = popxl.h2d_stream(x.shape, popxl.float32, "x")
        args, graph = module.create_graph(h.spec)
        dargs, dgraph = autodiff_with_accumulation(graph, graph.args.tensors, grads_required=graph.graph.inputs[:1])
        variables = args.init()
        accums = dargs.init()
        site = graph.bind(variables).call_with_info(ops.host_load(h))
        (dx,) = dgraph.bind(accums).call(popxl.constant(dy), args=dgraph.grad_graph_info.inputs_dict(site))
        streams = {
            "y": popxl.d2h_stream(dy_shape, popxl.float32, "y"),
            "dx": popxl.d2h_stream(x.shape, popxl.float32, "dx"),
        }
        ops.host_store(streams["y"], site.outputs[0])
        ops.host_store(streams["dx"], dx)
    s = popxl.Session(ir, "cpu")
    s.write_variables_data({variables[k]: v for k, v in weights.items()})
    with s:
        out = s.run({h: x})
    grads = {k: s.get_tensor_data(accums.accum[k]) for k in weights}
    return out[streams["y"]], out[streams["dx"]], grads, dy


def test_linear_forward_and_gradients() -> None:
    x = rng.normal(size=(2, 5, 3)).astype(np.float32)
    weights = {"weight": rng.normal(size=(3, 4)).astype(np.float32), "bias": rng.normal(size=(4,)).astype(np.float32)}
    y, dx, grads, dy = _fwd_and_grads(Linear(4), x, (2, 5, 4), weights)
    np.testing.assert_allclose(y, x @ weights["weight"] + weights["bias"], rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(dx, dy @ weights["weight"].T, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(grads["weight"], np.einsum("bni,bno->io", x, dy), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(grads["bias"], dy.sum((0, 1)), rtol=1e-5, atol=1e-5)


def test_linear_without_bias_and_default_init() -> None:
    ir = popxl.Ir()
    with ir.main_graph:
        args, _graph = Linear(7, bias=False).create_graph(popxl.TensorSpec((2, 300), popxl.float32))
        assert sorted(args.to_dict()) == ["weight"]
        w = args.init().weight.host_data
    assert w.shape == (300, 7) and np.abs(w).max() <= 0.04
    assert 0.015 < w.std() < 0.02


def test_truncated_normal_bounds() -> None:
    z = truncated_normal((10000,), std=1.0, bound=2.0)
    assert np.abs(z).max() <= 2.0 and 0.85 < z.std() < 0.9


def test_layer_norm_forward_and_gradients() -> None:
    x = rng.normal(size=(6, 5)).astype(np.float32) * 3 + 1
    weights = {"weight": rng.normal(size=(5,)).astype(np.float32), "bias": rng.normal(size=(5,)).astype(np.float32)}
    y, dx, grads, dy = _fwd_and_grads(LayerNorm(), x, (6, 5), weights)

    def ref(x: Any, w: Any, b: Any) -> Any:
        mean = x.mean(1, keepdims=True)
        return (x - mean) / jnp.sqrt(((x - mean) ** 2).mean(1, keepdims=True) + 1e-5) * w + b

    y_ref, pullback = jax.vjp(ref, x, weights["weight"], weights["bias"])
    gx, gw, gb = pullback(dy)
    np.testing.assert_allclose(y, y_ref, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(dx, gx, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(grads["weight"], gw, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(grads["bias"], gb, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("normalized_shape", [(12,), (3, 4)])
def test_layer_norm_torch_mapping_takes_torchs_weights(normalized_shape: tuple[int, ...]) -> None:
    """A torch.nn.LayerNorm over one or several trailing axes, mapped onto the layer (its input flattened to
    N x C as popxl-addons asks): the same output as torch's."""
    import torch

    torch.manual_seed(0)
    layer = torch.nn.LayerNorm(normalized_shape)
    with torch.no_grad():
        layer.weight.normal_()
        layer.bias.normal_()
    x = torch.randn(5, *normalized_shape)
    expected = layer(x).detach().numpy().reshape(5, -1)
    ir = popxl.Ir()
    with ir.main_graph:
        h = popxl.h2d_stream((5, 12), popxl.float32, "x")
        args, graph = LayerNorm().create_graph(h.spec)
        variables = args.init()
        (y,) = graph.bind(variables).call(ops.host_load(h))
        out = popxl.d2h_stream(y.shape, y.dtype, "y")
        ops.host_store(out, y)
    mapping = LayerNorm.torch_mapping(variables, layer)
    assert set(mapping) == {variables.weight, variables.bias}
    with popxl.Session(ir, "cpu") as session:
        session.write_variables_data(mapping)
        got = session.run({h: x.numpy().reshape(5, 12)})[out]
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)


def test_layer_norm_needs_two_dimensions() -> None:
    ir = popxl.Ir()
    with ir.main_graph, pytest.raises(ValueError, match="N x C"):
        LayerNorm().create_graph(popxl.TensorSpec((2, 3, 4), popxl.float32))


@pytest.mark.placement
def test_scale_doubles_and_serialises() -> None:
    steps = 3
    data = rng.normal(size=(steps, 2, 2)).astype(np.float32)
    ir = popxl.Ir()
    with ir.main_graph, popxl.in_sequence():
        h = popxl.h2d_stream((2, 2), popxl.float32, "x")
        d = popxl.d2h_stream((2, 2), popxl.float32, "y")
        args, graph = Scale().create_graph(h.spec)
        buf = batch_serial_buffer(graph.graph.outputs[0], steps=steps)
        result = batch_serialise(
            graph,
            steps,
            {graph.graph.inputs[0]: h},
            {graph.graph.outputs[0]: d},
            {graph.graph.outputs[0]: (buf, 0)},
            io_mode="compute",
        )
        result.graph.bind(args.init()).call(0)
    ir.num_host_transfers = steps
    with popxl.Session(ir, "cpu") as s:
        # Doubling is exact (no overflow), on the device and in NumPy.
        np.testing.assert_array_equal(s.run({h: data})[d], data * 2)


@pytest.mark.parametrize("mode", ["devices", "simulate"])
def test_linear_with_grouped_weights(mode: str) -> None:
    ir = popxl.Ir(replication=8)
    x = rng.normal(size=(8, 2, 3)).astype(np.float32)
    w = rng.normal(size=(4, 3, 5)).astype(np.float32)
    b = rng.normal(size=(4, 5)).astype(np.float32)
    with ir.main_graph:
        grouping = ir.replica_grouping(stride=4, group_size=2)
        h = popxl.h2d_stream((2, 3), popxl.float32, "x")
        d = popxl.d2h_stream((2, 5), popxl.float32, "y")
        args, graph = Linear(5, replica_grouping=grouping).create_graph(h.spec)
        variables = args.init()
        assert variables.weight.shape_on_host == (4, 3, 5)
        (y,) = graph.bind(variables).call(ops.host_load(h))
        ops.host_store(d, y)
    with popxl.Session(ir, "cpu", replica_mode=mode) as s:
        s.write_variables_data({variables.weight: w, variables.bias: b})
        out = s.run({h: x})[d]
    for r in range(8):
        np.testing.assert_allclose(out[r], x[r] @ w[r % 4] + b[r % 4], rtol=1e-5, atol=1e-5)
