"""Conv2D against NumPy and torch, forward and gradients."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import popxl
from popxl import ops
from popxl_addons.core import NamedTensors, autodiff_with_accumulation
from popxl_addons.layers import Conv2D

rng = np.random.default_rng(9)
Array = np.ndarray[Any, Any]
Weights = Callable[[NamedTensors], dict[Any, Array]]  # variable -> data


def _weight_and_bias(weight: Array, bias: Array) -> Weights:
    return lambda variables: {variables.weight: weight, variables.bias: bias}


def _fwd_and_grads(
    layer: Conv2D, x: Array, dy_shape: tuple[int, ...], weights: Weights | None = None
) -> tuple[Array, Array, dict[str, Array], Array]:
    """The layer's output for `x`, the gradients of `x` and of its variables for a random output
    gradient, and that gradient; `weights` gives the variables' data (their initial values without it)."""
    dtype = popxl.dtypes.as_dtype(x.dtype)
    dy = rng.normal(size=dy_shape).astype(x.dtype)
    ir = popxl.Ir()
    with ir.main_graph, popxl.in_sequence():
        h = popxl.h2d_stream(x.shape, dtype, "x")
        args, graph = layer.create_graph(h.spec)
        dargs, dgraph = autodiff_with_accumulation(graph, graph.args.tensors, grads_required=graph.graph.inputs[:1])
        variables, accums = args.init(), dargs.init()
        site = graph.bind(variables).call_with_info(ops.host_load(h))
        assert site.outputs[0].shape == dy_shape
        (dx,) = dgraph.bind(accums).call(popxl.constant(dy, dtype), args=dgraph.grad_graph_info.inputs_dict(site))
        streams = {"y": popxl.d2h_stream(dy_shape, dtype, "y"), "dx": popxl.d2h_stream(x.shape, dtype, "dx")}
        ops.host_store(streams["y"], site.outputs[0])
        ops.host_store(streams["dx"], dx)
    with popxl.Session(ir, "cpu") as s:
        if weights is not None:
            s.write_variables_data(weights(variables))
        out = s.run({h: x})
        grads = {k: np.asarray(s.get_tensor_data(v)) for k, v in accums.accum.to_dict().items()}
    return np.asarray(out[streams["y"]]), np.asarray(out[streams["dx"]]), grads, dy


def _conv_ref(
    x: Array, w: Array, b: Array, stride: tuple[int, int], pads: tuple[int, int, int, int], dy: Array
) -> tuple[Array, Array, Array, Array]:
    """A convolution (one group, no dilation) and its gradients (x, weight, bias), through the
    input patches, in float64 NumPy; `pads` are (top, left, bottom, right)."""
    x, w, dy = x.astype(np.float64), w.astype(np.float64), dy.astype(np.float64)
    height, width = x.shape[2:]
    kh, kw = w.shape[2:]
    xp = np.pad(x, ((0, 0), (0, 0), (pads[0], pads[2]), (pads[1], pads[3])))
    oh, ow = (xp.shape[2] - kh) // stride[0] + 1, (xp.shape[3] - kw) // stride[1] + 1
    rows = (np.arange(oh) * stride[0])[:, None] + np.arange(kh)  # (oh, kh)
    cols = (np.arange(ow) * stride[1])[:, None] + np.arange(kw)  # (ow, kw)
    ri, ci = rows[:, None, :, None], cols[None, :, None, :]  # broadcast to (oh, ow, kh, kw)
    patches = xp[:, :, ri, ci]  # (n, c, oh, ow, kh, kw)
    y = np.einsum("ncijhw,ochw->noij", patches, w) + b.reshape(1, -1, 1, 1)
    dw = np.einsum("noij,ncijhw->ochw", dy, patches)
    dpatches = np.einsum("noij,ochw->ncijhw", dy, w)
    dxp = np.zeros_like(xp)
    where: Any = (slice(None), slice(None), ri, ci)
    np.add.at(dxp, where, dpatches)  # each patch's gradient back where the patch came from
    dx = dxp[:, :, pads[0] : pads[0] + height, pads[1] : pads[1] + width]
    return y, dx, dw, dy.sum((0, 2, 3)).reshape(1, -1, 1, 1)


@pytest.mark.parametrize(
    ("kernel", "stride", "paddings", "pads"),
    [
        (3, (1, 2), (0, 0, 0, 0), (0, 0, 0, 0)),
        ((2, 3), (1, 1), (1, 2, 0, 1), (1, 2, 0, 1)),
        (2, (1, 1), "same_upper", (0, 0, 1, 1)),
        (2, (1, 1), "same_lower", (1, 1, 0, 0)),
    ],
)
def test_conv_against_numpy(
    kernel: Any, stride: tuple[int, int], paddings: Any, pads: tuple[int, int, int, int]
) -> None:
    x = rng.normal(size=(2, 3, 6, 7)).astype(np.float32)
    kh, kw = (kernel, kernel) if isinstance(kernel, int) else kernel
    w = rng.normal(size=(4, 3, kh, kw)).astype(np.float32)
    b = rng.normal(size=(1, 4, 1, 1)).astype(np.float32)
    oh, ow = (6 + pads[0] + pads[2] - kh) // stride[0] + 1, (7 + pads[1] + pads[3] - kw) // stride[1] + 1
    dy_shape = (2, 4, oh, ow)
    layer = Conv2D(4, kernel, strides=stride, paddings=paddings)
    y, dx, grads, dy = _fwd_and_grads(layer, x, dy_shape, _weight_and_bias(w, b))
    y_ref, dx_ref, dw_ref, db_ref = _conv_ref(x, w, b, stride, pads, dy)
    np.testing.assert_allclose(y, y_ref, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(dx, dx_ref, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(grads["weight"], dw_ref, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(grads["bias"], db_ref, rtol=1e-4, atol=1e-4)


def test_variables_default_init_and_attributes() -> None:
    ir = popxl.Ir()
    with ir.main_graph:
        layer = Conv2D(8, (3, 2), paddings="valid", groups=2, bias=False)
        assert (layer.k_h, layer.k_w, layer.pad_type, layer.paddings) == (3, 2, "valid", (0, 0, 0, 0))
        args, graph = layer.create_graph(popxl.TensorSpec((1, 6, 9, 9), popxl.float32))
        assert sorted(args.to_dict()) == ["weight"]
        w = args.init().weight.host_data
        assert graph.graph.outputs[0].shape == (1, 8, 7, 8)
        with_bias = Conv2D(5, 3, paddings=(1, 1, 1, 1))
        assert with_bias.pad_type == "not_set"
        args, _ = with_bias.create_graph(popxl.TensorSpec((1, 2, 4, 4), popxl.float32))
        args, _ = with_bias.create_graph(popxl.TensorSpec((1, 2, 4, 4), popxl.float32))  # builds again
        assert isinstance(with_bias.bias, popxl.Tensor) and with_bias.bias.shape == (1, 5, 1, 1)
        np.testing.assert_array_equal(args.init().bias.host_data, np.zeros((1, 5, 1, 1), np.float32))
    assert w.shape == (8, 3, 3, 2) and np.abs(w).max() <= 0.04
    with ir.main_graph, pytest.raises(ValueError, match="N, C, H, W"):
        Conv2D(2, 1).create_graph(popxl.TensorSpec((1, 2, 4), popxl.float32))


def test_float16_close_to_float32() -> None:
    x = rng.normal(size=(2, 4, 6, 6)).astype(np.float16)
    w = (rng.normal(size=(6, 2, 3, 3)) * 0.2).astype(np.float16)
    b = rng.normal(size=(1, 6, 1, 1)).astype(np.float16)
    results = {}
    for dtype in (np.float16, np.float32):
        layer = Conv2D(6, 3, paddings="same_upper", groups=2)
        rng_state = rng.bit_generator.state
        data = _weight_and_bias(w.astype(dtype), b.astype(dtype))
        results[dtype] = _fwd_and_grads(layer, x.astype(dtype), (2, 6, 6, 6), data)
        rng.bit_generator.state = rng_state  # the same output gradient for both
    (y16, dx16, g16, dy16), (y32, dx32, g32, dy32) = results[np.float16], results[np.float32]
    # One draw, rounded from float64 to each type (rounding dy32 again to float16 could round twice): float16's
    # rounding is within 2**-11 of the value, float32's within 2**-24, and below float16's normals within 2**-25.
    np.testing.assert_allclose(dy16.astype(np.float64), dy32, rtol=2.0**-11 + 2.0**-23, atol=2.0**-25)
    for a16, a32 in [(y16, y32), (dx16, dx32), (g16["weight"], g32["weight"]), (g16["bias"], g32["bias"])]:
        assert a16.dtype == np.float16 and np.isfinite(a16).all()
        np.testing.assert_allclose(a16.astype(np.float32), a32, atol=1e-2 * np.abs(a32).max())


@pytest.mark.parametrize(
    ("kwargs", "torch_kwargs"),
    [
        ({"strides": (1, 2)}, {"stride": (1, 2)}),
        ({"paddings": "same_upper", "dilations": (2, 1)}, {"padding": "same", "dilation": (2, 1)}),
        ({"paddings": (2, 1, 2, 1), "groups": 2, "bias": False}, {"padding": (2, 1), "groups": 2, "bias": False}),
    ],
)
def test_conv_against_torch(kwargs: dict[str, Any], torch_kwargs: dict[str, Any]) -> None:
    torch = pytest.importorskip("torch")
    conv = torch.nn.Conv2d(4, 6, kernel_size=3, **torch_kwargs)
    x = rng.random(size=(2, 4, 8, 7)).astype(np.float32)
    xt = torch.tensor(x, requires_grad=True)
    yt = conv(xt)
    y, dx, grads, dy = _fwd_and_grads(
        Conv2D(6, 3, **kwargs), x, tuple(yt.shape), lambda v: Conv2D.torch_mapping(v, conv, popxl.float32)
    )
    yt.backward(torch.tensor(dy))
    np.testing.assert_allclose(y, yt.detach().numpy(), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(dx, xt.grad.numpy(), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(grads["weight"], conv.weight.grad.numpy(), rtol=1e-4, atol=1e-4)
    assert ("bias" in grads) == kwargs.get("bias", True)
    if "bias" in grads:
        np.testing.assert_allclose(grads["bias"].reshape(-1), conv.bias.grad.numpy(), rtol=1e-4, atol=1e-4)
