"""layer_norm and group_norm of float16 inputs: finite, and close to float32 maths written in NumPy.

A float16 input of row std 0.02 has a variance (4e-4) whose -3/2 power overflows float16; popart computes the
statistics with float32 partials and differentiates in whitened form, so neither the output nor the gradients
may overflow here.
"""

from __future__ import annotations

import math
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import popxl
from popxl import ops
from popxl.op import REGISTRY, OpDef, register
from popxl.op_contract import OpExample, float16_errors
from popxl.opdefs.common import like_input, vjp_grad
from popxl.transforms import autodiff

Array = np.ndarray[Any, Any]
EPS = 1e-5


def _run(groups: int, x: Array, w: Array, b: Array, dy: Array) -> list[Array]:
    """y, dx, dweight and dbias of popxl's group_norm (layer_norm for one group), through autodiff."""
    ir = popxl.Ir()
    with ir.main_graph:
        specs = [popxl.TensorSpec(v.shape, popxl.float16) for v in (x, w, b)]

        def norm(t: popxl.Tensor, weight: popxl.Tensor, bias: popxl.Tensor) -> popxl.Tensor:
            if groups == 1:
                return ops.layer_norm(t, weight, bias, eps=EPS)
            return ops.group_norm(t, weight, bias, groups, eps=EPS)

        graph = ir.create_graph(norm, *specs)
        info = autodiff(graph)
        fwd = ops.call_with_info(graph, *(popxl.constant(v) for v in (x, w, b)))
        grads = ops.call(info.graph, popxl.constant(dy), inputs_dict=info.inputs_dict(fwd))
        results = [fwd.outputs[0], *grads]
        streams = [popxl.d2h_stream(t.shape, t.dtype, f"out{i}") for i, t in enumerate(results)]
        for s, t in zip(streams, results):
            ops.host_store(s, t)
    with popxl.Session(ir, "cpu") as session:
        out = session.run()
    return [out[s] for s in streams]


def _reference(groups: int, x: Array, w: Array, b: Array, dy: Array) -> list[Array]:
    """The same in float64 NumPy from the float16 values: the forward, then its derivative written out."""
    x, w, b, dy = (v.astype(np.float64) for v in (x, w, b, dy))
    n = x.shape[0]
    g = x.reshape(n, groups, -1)
    mean = g.mean(-1, keepdims=True)
    inv_std = 1 / np.sqrt(((g - mean) ** 2).mean(-1, keepdims=True) + EPS)
    xhat = ((g - mean) * inv_std).reshape(x.shape)
    shape = (1, -1) + (1,) * (x.ndim - 2)
    y = xhat * w.reshape(shape) + b.reshape(shape)
    # d/dx of (x - m) / s per group, m the mean and s the std: (d - mean(d) - xhat * mean(d * xhat)) / s.
    d = (dy * w.reshape(shape)).reshape(n, groups, -1)
    xh = xhat.reshape(n, groups, -1)
    dx = inv_std * (d - d.mean(-1, keepdims=True) - xh * (d * xh).mean(-1, keepdims=True))
    axes = (0, *range(2, x.ndim))
    return [y, dx.reshape(x.shape), (dy * xhat).sum(axis=axes), dy.sum(axis=axes)]


CASES = {"layer_norm": (1, (8, 64)), "group_norm": (4, (4, 8, 6))}


@pytest.mark.parametrize("std", [0.02, 1.0])
@pytest.mark.parametrize("case", sorted(CASES))
def test_norm_of_float16_is_finite_and_close_to_float32(case: str, std: float) -> None:
    groups, shape = CASES[case]
    rng = np.random.default_rng(3)
    channels = shape[1]
    x = (rng.normal(size=shape) * std + 0.1).astype(np.float16)
    w = (1 + 0.1 * rng.normal(size=channels)).astype(np.float16)
    b = (0.1 * rng.normal(size=channels)).astype(np.float16)
    dy = rng.normal(size=shape).astype(np.float16)
    got = _run(groups, x, w, b, dy)
    want = _reference(groups, x, w, b, dy)
    for name, g, r in zip(("y", "dx", "dweight", "dbias"), got, want):
        assert g.dtype == np.float16, name
        assert np.isfinite(g).all(), f"{case} std {std}: {name} is not finite"
        # Within a few float16 roundings of the tensor's own magnitude (float16's epsilon is 2**-10).
        scale = np.abs(r).max()
        err = np.abs(g.astype(np.float64) - r).max()
        assert err <= 8e-3 * scale, f"{case} std {std}: {name} is {err / scale:.2e} of its magnitude away"


def test_group_norm_exposes_mean_and_inverse_std_as_popart() -> None:
    rng = np.random.default_rng(4)
    x = (rng.normal(size=(3, 4, 5)) * 0.02).astype(np.float16)
    ir = popxl.Ir()
    with ir.main_graph:
        w = popxl.constant(np.ones(4, np.float16))
        y = ops.group_norm(popxl.constant(x), w, popxl.constant(np.zeros(4, np.float16)), 2)
        (op,) = [o for o in ir.main_graph.ops if o.name == "group_norm"]
        mean, inv_std = op.outputs[1:]
        assert y is op.outputs[0]
        assert [t.name for t in op.outputs] == ["group_norm_out", "group_norm_mean", "group_norm_inv_std_dev"]
        assert mean.shape == inv_std.shape == (6,) and mean.dtype == inv_std.dtype == popxl.float16
        streams = [popxl.d2h_stream(t.shape, t.dtype, f"s{i}") for i, t in enumerate((mean, inv_std))]
        for s, t in zip(streams, (mean, inv_std)):
            ops.host_store(s, t)
    with popxl.Session(ir, "cpu") as session:
        out = session.run()
    g = x.astype(np.float64).reshape(6, -1)
    np.testing.assert_allclose(out[streams[0]], g.mean(-1), rtol=2e-3, atol=1e-6)
    np.testing.assert_allclose(out[streams[1]], 1 / np.sqrt(g.var(-1) + 1e-5), rtol=2e-3)


def _normalise_rows_in_own_type(ctx: Any, attrs: Any, x: jax.Array) -> list[jax.Array]:
    centred = x - x.mean(axis=-1, keepdims=True)
    return [centred * jax.lax.rsqrt(jnp.square(centred).mean(axis=-1, keepdims=True) + 1e-5)]


# A row normalisation computed, and so differentiated by JAX, in its input's type: the way that overflows.
NAIVE_NORM = REGISTRY.get("test_float16.naive_norm") or register(
    OpDef("test_float16.naive_norm", like_input(0), _normalise_rows_in_own_type, grad=vjp_grad())
)


def test_the_registry_float16_pass_finds_an_overflowing_gradient() -> None:
    rng = np.random.default_rng(5)
    x = rng.normal(size=(8, 64)).astype(np.float32)
    naive = float16_errors(NAIVE_NORM, lambda ir: OpExample([x]), (0.02, 1.0))
    assert naive[0.02]["test_float16.naive_norm gradient 0"] == math.inf
    assert naive[1.0]["test_float16.naive_norm gradient 0"] < 1e-2
    w, b = np.ones(64, np.float32), np.zeros(64, np.float32)
    ours = float16_errors(REGISTRY["group_norm"], lambda ir: OpExample([x, w, b], {"num_groups": 1, "eps": 1e-5}))
    assert max(e for found in ours.values() for e in found.values()) < 1e-2
