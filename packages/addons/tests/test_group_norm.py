"""GroupNorm against NumPy and torch, forward and gradients."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import popxl
from popxl import ops
from popxl_addons.core import NamedTensors, autodiff_with_accumulation
from popxl_addons.layers import GroupNorm

rng = np.random.default_rng(5)
Array = np.ndarray[Any, Any]
Weights = Callable[[NamedTensors], dict[Any, Array]]  # variable -> data


def _fwd_and_grads(
    layer: GroupNorm, x: Array, dy: Array, weights: Weights | None = None
) -> tuple[Array, Array, dict[str, Array]]:
    """The layer's output for `x`, and the gradients of `x` and of its variables for output gradient `dy`;
    `weights` gives the variables' data (their initial values without it)."""
    dtype = popxl.dtypes.as_dtype(x.dtype)
    ir = popxl.Ir()
    with ir.main_graph, popxl.in_sequence():
        h = popxl.h2d_stream(x.shape, dtype, "x")
        args, graph = layer.create_graph(h.spec)
        dargs, dgraph = autodiff_with_accumulation(graph, graph.args.tensors, grads_required=graph.graph.inputs[:1])
        variables, accums = args.init(), dargs.init()
        site = graph.bind(variables).call_with_info(ops.host_load(h))
        (dx,) = dgraph.bind(accums).call(popxl.constant(dy, dtype), args=dgraph.grad_graph_info.inputs_dict(site))
        streams = {name: popxl.d2h_stream(x.shape, dtype, name) for name in ("y", "dx")}
        ops.host_store(streams["y"], site.outputs[0])
        ops.host_store(streams["dx"], dx)
    with popxl.Session(ir, "cpu") as s:
        if weights is not None:
            s.write_variables_data(weights(variables))
        out = s.run({h: x})
        grads = {k: np.asarray(s.get_tensor_data(accums.accum[k])) for k in ("weight", "bias")}
    return np.asarray(out[streams["y"]]), np.asarray(out[streams["dx"]]), grads


def _group_norm_ref(x: Array, w: Array, b: Array, groups: int, eps: float, dy: Array) -> tuple[Array, ...]:
    """Group norm and its gradients (x, weight, bias), in float64 NumPy."""
    n, c = x.shape[:2]
    x, dy = x.astype(np.float64), dy.astype(np.float64)
    shape = (1, c) + (1,) * (x.ndim - 2)
    xg = x.reshape(n, groups, -1)
    mean = xg.mean(-1, keepdims=True)
    invstd = 1 / np.sqrt(((xg - mean) ** 2).mean(-1, keepdims=True) + eps)
    xhat = ((xg - mean) * invstd).reshape(x.shape)
    y = xhat * w.reshape(shape) + b.reshape(shape)
    sum_axes = (0, *range(2, x.ndim))
    dw, db = (dy * xhat).sum(sum_axes), dy.sum(sum_axes)
    dxhat = (dy * w.reshape(shape)).reshape(n, groups, -1)
    xhat_g = xhat.reshape(n, groups, -1)
    dxg = invstd * (dxhat - dxhat.mean(-1, keepdims=True) - xhat_g * (dxhat * xhat_g).mean(-1, keepdims=True))
    return y, dxg.reshape(x.shape), dw, db


@pytest.mark.parametrize("shape", [(2, 6, 4, 5), (3, 4, 7), (2, 6)])
def test_group_norm_against_numpy(shape: tuple[int, ...]) -> None:
    x = (rng.normal(size=shape) * 2 + 0.5).astype(np.float32)
    dy = rng.normal(size=shape).astype(np.float32)
    c = shape[1]
    w, b = rng.normal(size=(c,)).astype(np.float32), rng.normal(size=(c,)).astype(np.float32)
    y, dx, grads = _fwd_and_grads(GroupNorm(2, eps=1e-4), x, dy, lambda v: {v.weight: w, v.bias: b})
    y_ref, dx_ref, dw_ref, db_ref = _group_norm_ref(x, w, b, 2, 1e-4, dy)
    np.testing.assert_allclose(y, y_ref, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(dx, dx_ref, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(grads["weight"], dw_ref, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(grads["bias"], db_ref, rtol=1e-5, atol=1e-5)


def test_variables_and_default_init() -> None:
    ir = popxl.Ir()
    with ir.main_graph:
        layer = GroupNorm(3)
        args, graph = layer.create_graph(popxl.TensorSpec((2, 6, 4), popxl.float32))
        variables = args.init()
    assert sorted(args.to_dict()) == ["bias", "weight"] and layer.eps == 1e-5
    np.testing.assert_array_equal(variables.weight.host_data, np.ones(6, np.float32))
    np.testing.assert_array_equal(variables.bias.host_data, np.zeros(6, np.float32))
    assert graph.graph.outputs[0].shape == (2, 6, 4)


def test_float16_close_to_float32() -> None:
    """Activations of std 0.02 (where a float16 rsqrt gradient would overflow) stay finite."""
    x = (rng.normal(size=(2, 8, 6)) * 0.02).astype(np.float16)
    dy = rng.normal(size=x.shape).astype(np.float16)
    y16, dx16, g16 = _fwd_and_grads(GroupNorm(4), x, dy)
    y32, dx32, g32 = _fwd_and_grads(GroupNorm(4), x.astype(np.float32), dy.astype(np.float32))
    assert y16.dtype == np.float16
    for a16, a32 in [(y16, y32), (dx16, dx32), (g16["weight"], g32["weight"]), (g16["bias"], g32["bias"])]:
        assert np.isfinite(a16).all()
        np.testing.assert_allclose(a16.astype(np.float32), a32, atol=1e-2 * np.abs(a32).max())


@pytest.mark.parametrize("shape", [(2, 6, 5, 4), (2, 6)])
def test_group_norm_against_torch(shape: tuple[int, ...]) -> None:
    torch = pytest.importorskip("torch")
    layer = torch.nn.GroupNorm(num_groups=3, num_channels=6, eps=1e-6)
    with torch.no_grad():
        layer.weight.normal_()
        layer.bias.normal_()
    x = rng.random(size=shape).astype(np.float32)
    dy = rng.normal(size=shape).astype(np.float32)
    xt = torch.tensor(x, requires_grad=True)
    layer(xt).backward(torch.tensor(dy))

    y, dx, grads = _fwd_and_grads(
        GroupNorm(3, eps=1e-6), x, dy, lambda v: GroupNorm.torch_mapping(v, layer, popxl.float32)
    )
    np.testing.assert_allclose(y, layer(torch.tensor(x)).detach().numpy(), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(dx, xt.grad.numpy(), rtol=1e-3, atol=1e-4)
    np.testing.assert_allclose(grads["weight"], layer.weight.grad.numpy(), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(grads["bias"], layer.bias.grad.numpy(), rtol=1e-5, atol=1e-5)
