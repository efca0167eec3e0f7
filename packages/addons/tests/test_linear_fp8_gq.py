"""LinearFP8 and LinearGQ against NumPy written directly, in float16 and float32."""

from __future__ import annotations

from typing import Any

import ml_dtypes
import numpy as np
import pytest
import torch

import popxl
from popxl import ops
from popxl_addons.layers import LinearFP8, LinearGQ

Array = np.ndarray[Any, Any]
rng = np.random.default_rng(8)
E4M3, E5M2 = ml_dtypes.float8_e4m3fnuz, ml_dtypes.float8_e5m2fnuz  # popart's 1.4.3 and 1.5.2


def _fwd_and_grads(
    module: Any, x: Array, dy: Array, weights: dict[str, Array], grads: bool = True
) -> tuple[Array, dict[str, Array]]:
    """The module's output for `x`, and with `grads` the gradients ("x" and the weights') for dL/dy = `dy`,
    through the module's own gradient graph as popxl-addons programs build it."""
    dtype = popxl.dtypes.as_dtype(x)
    ir = popxl.Ir()
    streams: dict[str, popxl.DeviceToHostStream] = {}
    with ir.main_graph, popxl.in_sequence():
        h = popxl.h2d_stream(x.shape, dtype, "x")
        xt = ops.host_load(h)
        args, graph = module.create_graph(xt)
        variables = args.init()
        if grads:
            grad_graph = graph.autodiff()
        site = graph.bind(variables).call_with_info(xt)
        results = {"y": site.outputs[0]}
        if grads:
            grad_site = grad_graph.call_with_info(popxl.constant(dy), args=grad_graph.grad_graph_info.inputs_dict(site))
            found = grad_graph.grad_graph_info.fwd_parent_ins_to_grad_parent_outs(site, grad_site)
            results["x"] = found[xt]
            results |= {k: found[variables[k]] for k in weights}
        for name, t in results.items():
            streams[name] = popxl.d2h_stream(t.shape, t.dtype, name)
            ops.host_store(streams[name], t)
    session = popxl.Session(ir, "cpu")
    session.write_variables_data({variables[k]: v for k, v in weights.items()})
    with session:
        out = session.run({h: x})
    values = {name: np.asarray(out[s]) for name, s in streams.items()}
    return values.pop("y"), values


# ---- LinearFP8 ---------------------------------------------------------------------------------------------------


def _amax_scale(t: Array, largest: float) -> int:
    """popxl-addons' amax scale: floor(log2(largest / max|t|)), clipped to [-31, 31]."""
    return int(np.clip(np.floor(np.log2(largest / np.abs(t).astype(np.float64).max())), -31, 31))


def _fp8(t: Array, scale: int, fmt: Any) -> Array:
    return (t.astype(np.float32) * np.float32(2.0**scale)).astype(fmt).astype(np.float32)


def _np_linear_fp8(x: Array, w: Array, b: Array, dy: Array, manual: int | None) -> tuple[Array, ...]:
    """LinearFP8's forward and gradients: float8 operands, float32 products, float16 results."""
    sx, sw = (manual, manual) if manual is not None else (_amax_scale(x, 240.0), _amax_scale(w, 240.0))
    sdy = int(np.clip((manual if manual is not None else _amax_scale(dy, 57344.0)) - 3, -31, 31))
    x8, w8, dy8 = _fp8(x, sx, E4M3), _fp8(w, sw, E4M3), _fp8(dy, sdy, E5M2)
    y = ((x8 @ w8) * 2.0 ** (-sx - sw)).astype(np.float16).astype(x.dtype) + b
    dx = ((dy8 @ w8.T) * 2.0 ** (-sw - sdy)).astype(np.float16)
    dw = ((dy8.T @ x8) * 2.0 ** (-sx - sdy)).astype(np.float16).T
    return y, dx, dw, dy.sum(0)


@pytest.mark.parametrize("dtype", [np.float16, np.float32])
@pytest.mark.parametrize("metric", ["amax", "manual_scale"])
def test_linear_fp8_forward_and_gradients(dtype: type, metric: str) -> None:
    x: Array = rng.normal(size=(6, 16)).astype(dtype)
    weights: dict[str, Array] = {
        "weight": (rng.normal(size=(16, 8)) * 0.05).astype(dtype),
        "bias": rng.normal(size=(8,)).astype(dtype),
    }
    dy: Array = (rng.normal(size=(6, 8)) * 1e-2).astype(dtype)
    manual = 4 if metric == "manual_scale" else None
    y, grads = _fwd_and_grads(LinearFP8(8, scale_metric=metric, scale=manual or 0), x, dy, weights)
    want_y, want_dx, want_dw, want_db = _np_linear_fp8(x, weights["weight"], weights["bias"], dy, manual)
    assert y.dtype == grads["x"].dtype == grads["weight"].dtype == dtype
    np.testing.assert_allclose(y, want_y, rtol=2e-3, atol=2e-3)
    np.testing.assert_allclose(grads["x"], want_dx, rtol=2e-3, atol=1e-6)
    np.testing.assert_allclose(grads["weight"], want_dw, rtol=2e-3, atol=1e-6)
    np.testing.assert_allclose(grads["bias"], want_db, rtol=2e-3, atol=1e-5)
    # float8's three mantissa bits: within a few percent of the float64 product.
    exact = x.astype(np.float64) @ weights["weight"] + weights["bias"]
    np.testing.assert_allclose(y, exact, atol=0.15)


def test_linear_fp8_mse_close_to_float64() -> None:
    x = rng.normal(size=(4, 32)).astype(np.float16)
    weights = {"weight": (rng.normal(size=(32, 8)) * 0.05).astype(np.float16), "bias": np.zeros(8, np.float16)}
    dy = (rng.normal(size=(4, 8)) * 1e-2).astype(np.float16)
    y, grads = _fwd_and_grads(LinearFP8(8, scale_metric="mse"), x, dy, weights)
    w = weights["weight"].astype(np.float64)
    np.testing.assert_allclose(y, x.astype(np.float64) @ w, atol=0.1)
    np.testing.assert_allclose(grads["x"], dy.astype(np.float64) @ w.T, atol=2e-3)
    np.testing.assert_allclose(grads["weight"], x.astype(np.float64).T @ dy, atol=2e-2)


def test_linear_fp8_refuses_unknown_metric() -> None:
    with pytest.raises(ValueError, match="scale_metric option max is not available"):
        LinearFP8(4, scale_metric="max")


# ---- LinearGQ ----------------------------------------------------------------------------------------------------


def _pack_by_hand(ids: Array) -> Array:
    """Four 4-bit ids per uint16 word along the last axis, the first id in the top nibble."""
    words = ids.reshape(*ids.shape[:-1], -1, 4).astype(np.int64)
    return (words[..., 0] * 4096 + words[..., 1] * 256 + words[..., 2] * 16 + words[..., 3]).astype(np.uint16)


@pytest.mark.parametrize("dtype", [np.float16, np.float32])
@pytest.mark.parametrize("dim", [-1, 0])
def test_linear_gq_forward(dtype: type, dim: int) -> None:
    n_in, n_out, group = 16, 24, 8
    kept, grouped = (n_out, n_in) if dim == 0 else (n_in, n_out)
    ids = rng.integers(0, 16, size=(kept, grouped // group, group))
    scale: Array = rng.uniform(0.01, 0.1, size=(kept, grouped // group, 1)).astype(dtype)
    bias: Array = rng.normal(size=(kept, grouped // group, 1)).astype(dtype)
    w = (ids.astype(np.float64) * scale + bias).reshape(kept, grouped)
    if dim == 0:
        w = w.T
    weights = {
        "weight_compressed": _pack_by_hand(ids),
        "weight_decompression_scale": scale,
        "weight_decompression_bias": bias,
        "bias": rng.normal(size=(n_out,)).astype(dtype),
    }
    x: Array = rng.normal(size=(3, n_in)).astype(dtype)
    y, _ = _fwd_and_grads(
        LinearGQ(n_out, group_size=group, dim=dim), x, np.zeros((3, n_out), dtype), weights, grads=False
    )
    assert y.dtype == dtype
    tol = 1e-2 if dtype == np.float16 else 1e-5
    np.testing.assert_allclose(y, x.astype(np.float64) @ w + weights["bias"], rtol=tol, atol=tol)


@pytest.mark.parametrize("dim", [-1, 0])
def test_linear_gq_torch_mapping(dim: int) -> None:
    torch.manual_seed(0)
    layer = torch.nn.Linear(16, 8)
    module = LinearGQ(8, group_size=4, dim=dim)
    ir = popxl.Ir()
    with ir.main_graph:
        args, _ = module.create_graph(popxl.TensorSpec((2, 16), popxl.float16))
        variables = args.init()
    mapping = LinearGQ.torch_mapping(variables, layer, dtype=popxl.float16, group_size=4, dim=dim)
    packed = mapping[variables.weight_compressed]
    scale = mapping[variables.weight_decompression_scale].astype(np.float64)
    bias = mapping[variables.weight_decompression_bias].astype(np.float64)
    ids = np.stack([(packed >> s) & 15 for s in (12, 8, 4, 0)], axis=-1).reshape(*packed.shape[:-1], -1)
    restored = (ids * scale + bias).reshape(packed.shape[0], -1)
    w = layer.weight.detach().numpy().T.astype(np.float64)  # (in, out)
    grouped_last = w.T if dim == 0 else w
    step = np.repeat(scale[..., 0], 4, axis=-1)
    assert (np.abs(restored - grouped_last) <= step / 2 + 2e-3 * np.abs(grouped_last) + 1e-4).all()
    np.testing.assert_array_equal(mapping[variables.bias], layer.bias.detach().numpy().astype(np.float16))


def test_linear_gq_refuses_bad_group_size() -> None:
    with popxl.Ir().main_graph, pytest.raises(ValueError, match="group_size must be a positive multiple of 4"):
        LinearGQ(8, group_size=6).create_graph(popxl.TensorSpec((2, 16), popxl.float16))
    with pytest.raises(ValueError, match="dim 0, 1 or -1, got 2"):
        LinearGQ(8, group_size=4, dim=2)
