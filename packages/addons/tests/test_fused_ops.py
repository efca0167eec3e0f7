"""popxl-addons' fused ops of popxl_addons.core against the maths written directly in NumPy and JAX."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import popxl
import popxl_addons as addons
from popxl.op import REGISTRY
from popxl.op_contract import OpExample, check_op, float16_errors
from popxl_addons.core.ops.cross_entropy import cross_entropy, cross_entropy_with_grad
from popxl_addons.core.ops.grad_reduce_square_add import grad_reduce_square_add
from popxl_addons.core.ops.rotary_pos_embed import rotary_pos_embed, trig_table_constants, trig_tables

RNG = np.random.default_rng(7)


def _run(ir: popxl.Ir, outputs: list[popxl.Tensor]) -> list[np.ndarray[Any, Any]]:
    with ir.main_graph:
        streams = [addons.host_store(t) for t in outputs]
    ir.num_host_transfers = 1
    with popxl.Session(ir, "cpu") as session:
        result = session.run()
    return [np.asarray(result[s]) for s in streams]


# ---- the reference maths, written directly --------------------------------------------------------------------


def _np_rope(x: np.ndarray[Any, Any], sin: np.ndarray[Any, Any], cos: np.ndarray[Any, Any], rd: int) -> Any:
    """RoPE as the GPT-J reference writes it: x * cos + rotate_every_two(x) * sin, tables interleaved."""
    rot = x[..., :rd]
    s = np.repeat(sin, 2, axis=-1)[:, :, None, :]
    c = np.repeat(cos, 2, axis=-1)[:, :, None, :]
    swapped = np.stack([-rot[..., 1::2], rot[..., 0::2]], axis=-1).reshape(rot.shape)
    return np.concatenate([rot * c + swapped * s, x[..., rd:]], axis=-1)


def _jnp_rope(x: jax.Array, sin: jax.Array, cos: jax.Array, rd: int) -> jax.Array:
    rot = x[..., :rd]
    s = jnp.repeat(sin, 2, axis=-1)[:, :, None, :]
    c = jnp.repeat(cos, 2, axis=-1)[:, :, None, :]
    swapped = jnp.stack([-rot[..., 1::2], rot[..., 0::2]], axis=-1).reshape(rot.shape)
    return jnp.concatenate([rot * c + swapped * s, x[..., rd:]], axis=-1)


def _np_cross_entropy(x: np.ndarray[Any, Any], labels: np.ndarray[Any, Any], ignore: int | None, reduction: str) -> Any:
    """Loss and dloss/dx of softmax cross entropy, in float64."""
    x = x.astype(np.float64)
    p = np.exp(x - x.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    kept = np.ones(labels.shape, bool) if ignore is None else labels != ignore
    safe = np.where(kept, labels, 0)
    losses = np.where(kept, -np.log(np.take_along_axis(p, safe[..., None], -1)[..., 0]), 0.0)
    onehot = np.eye(x.shape[-1])[safe]
    dx = (p - onehot) * kept[..., None]
    if reduction == "none":
        return losses, dx
    n = max(int(kept.sum()), 1) if reduction == "mean" else 1
    return losses.sum() / n, dx / n


# ---- the registry sweep, for this package's op kinds ----------------------------------------------------------


def _rope_example(ir: popxl.Ir) -> OpExample:
    x = RNG.normal(size=(2, 3, 2, 8)).astype(np.float32)
    sin, cos = (t[None] for t in trig_tables(3, 6))
    return OpExample([x, sin, cos], {"rotary_dim": 6}, reference=lambda v, s, c: [_jnp_rope(v, s, c, 6)])


def _rope_grad_example(ir: popxl.Ir) -> OpExample:
    dy = RNG.normal(size=(2, 3, 2, 8)).astype(np.float32)
    sin, cos = (t[None] for t in trig_tables(3, 8))

    def transposed(d: jax.Array, s: jax.Array, c: jax.Array) -> jax.Array:  # the VJP of the rotation
        return jax.vjp(lambda v: _jnp_rope(v, s, c, 8), jnp.zeros_like(d))[1](d)[0]

    return OpExample([dy, sin, cos], {"rotary_dim": 8}, reference=lambda d, s, c: [transposed(d, s, c)])


def _rope_tables_grad_example(ir: popxl.Ir) -> OpExample:
    x = RNG.normal(size=(2, 3, 2, 8)).astype(np.float32)
    dy = RNG.normal(size=x.shape).astype(np.float32)
    sin, cos = trig_tables(3, 6)
    tables = np.stack([sin, cos])[:, None]  # both tables with one row, shared by the batch

    def reference(v: jax.Array, d: jax.Array) -> list[jax.Array]:
        _, pullback = jax.vjp(lambda s, c: _jnp_rope(v, s, c, 6), jnp.asarray(tables[0]), jnp.asarray(tables[1]))
        return list(pullback(d))

    attrs = {"rotary_dim": 6, "tables": [(1, np.dtype(np.float32)), (1, np.dtype(np.float32))]}
    return OpExample([x, dy], attrs, reference=reference)


def _grsa_example(ir: popxl.Ir) -> OpExample:
    t = RNG.normal(size=(3, 5)).astype(np.float32)
    scale = np.array(1 / 16, np.float32)
    return OpExample([t, scale], {}, reference=lambda v, s: [jnp.sum(v.astype(jnp.float32) ** 2) * s])


EXAMPLES: dict[str, Callable[[popxl.Ir], OpExample]] = {
    "rotary_pos_embed": _rope_example,
    "rotary_pos_embed_grad": _rope_grad_example,
    "rotary_pos_embed_tables_grad": _rope_tables_grad_example,
    "grad_reduce_square_add": _grsa_example,
}


def test_every_op_kind_of_these_modules_has_an_example() -> None:
    modules = {"popxl_addons.core.ops.rotary_pos_embed", "popxl_addons.core.ops.grad_reduce_square_add"}
    ours = {name for name, opdef in REGISTRY.items() if opdef.lower.__module__ in modules}
    assert ours == set(EXAMPLES)


@pytest.mark.parametrize("kind", sorted(EXAMPLES))
def test_registry_declarations(kind: str) -> None:
    check_op(REGISTRY[kind], EXAMPLES[kind])


@pytest.mark.parametrize("kind", sorted(EXAMPLES))
def test_float16_close_to_float32(kind: str) -> None:
    # The trig tables are values in [-1, 1], not activations: they keep their scale.
    powers = {1: 0.0, 2: 0.0} if kind in ("rotary_pos_embed", "rotary_pos_embed_grad") else None
    errors = float16_errors(REGISTRY[kind], EXAMPLES[kind], powers=powers)
    for scale, per_result in errors.items():
        for label, error in per_result.items():
            assert error < 1e-2, f"{label} at std {scale}: {error}"


# ---- cross entropy ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("ignore", "reduction"), [(None, "mean"), (3, "mean"), (3, "sum"), (None, "none")])
def test_cross_entropy_with_grad(ignore: int | None, reduction: str) -> None:
    x = RNG.normal(size=(2, 5, 7)).astype(np.float32)
    labels = RNG.integers(0, 7, size=(2, 5)).astype(np.int32)
    labels[0, :2] = 3
    ir = popxl.Ir()
    with ir.main_graph:
        xt, lt = popxl.variable(x), popxl.variable(labels)
        plain = cross_entropy(xt, lt, ignore_index=ignore, reduction=reduction)  # type: ignore[arg-type]
        loss, dx = cross_entropy_with_grad(xt, lt, loss_scaling=8, ignore_index=ignore, reduction=reduction)  # type: ignore[arg-type]
    got_plain, got_loss, got_dx = _run(ir, [plain, loss, dx])
    want_loss, want_dx = _np_cross_entropy(x, labels, ignore, reduction)
    np.testing.assert_allclose(got_plain, want_loss, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(got_loss, want_loss, rtol=1e-5, atol=1e-6)  # not scaled
    np.testing.assert_allclose(got_dx, 8 * want_dx, rtol=1e-5, atol=1e-6)
    assert dx.dtype == popxl.float32 and dx.shape == x.shape


@pytest.mark.parametrize("std", [0.02, 1.0])
def test_cross_entropy_float16(std: float) -> None:
    x = (RNG.normal(size=(6, 50)) * std).astype(np.float16)
    labels = RNG.integers(0, 50, size=(6,)).astype(np.int32)
    ir = popxl.Ir()
    with ir.main_graph:
        xt, lt = popxl.variable(x), popxl.variable(labels)
        loss, dx = cross_entropy_with_grad(xt, lt, loss_scaling=popxl.constant(np.float32(128)))
    got_loss, got_dx = _run(ir, [loss, dx])
    assert got_loss.dtype == np.float16 and got_dx.dtype == np.float16
    assert np.isfinite(got_loss).all() and np.isfinite(got_dx).all()
    want_loss, want_dx = _np_cross_entropy(x.astype(np.float32), labels, None, "mean")
    np.testing.assert_allclose(got_loss, want_loss, rtol=1e-2)
    assert np.abs(got_dx - 128 * want_dx).max() < 1e-2 * np.abs(128 * want_dx).max()


# ---- grad_reduce_square_add ----------------------------------------------------------------------------------


@pytest.mark.parametrize("as_tensor", [False, True])
def test_grad_reduce_square_add(as_tensor: bool) -> None:
    g = RNG.normal(size=(4, 3)).astype(np.float32) * 64
    ir = popxl.Ir()
    with ir.main_graph:
        scaling: float | popxl.Tensor = popxl.constant(np.float16(512)) if as_tensor else 512.0
        y = grad_reduce_square_add(popxl.variable(g.astype(np.float16)), loss_scaling=scaling)
    assert y.dtype == popxl.float32 and y.shape == ()
    (got,) = _run(ir, [y])
    want = np.sum(np.square(g.astype(np.float16).astype(np.float64) / 512))
    np.testing.assert_allclose(got, want, rtol=1e-6)


# ---- rotary_pos_embed ------------------------------------------------------------------------------------------


def test_trig_tables() -> None:
    sin, cos = trig_tables(5, 6, base=100)
    theta = 100.0 ** (-np.arange(0, 6, 2) / 6)
    angles = np.arange(5)[:, None] * theta[None]
    assert sin.shape == cos.shape == (5, 3) and sin.dtype == np.float32
    np.testing.assert_allclose(sin, np.sin(angles), rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(cos, np.cos(angles), rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("rotary_dim", [None, 4])
def test_rotary_pos_embed_and_gradient(rotary_dim: int | None) -> None:
    x = RNG.normal(size=(2, 5, 3, 8)).astype(np.float32)
    dy = RNG.normal(size=x.shape).astype(np.float32)
    rd = rotary_dim or 8
    sin, cos = trig_tables(5, rd)
    ir = popxl.Ir()
    with ir.main_graph:
        xt = popxl.variable(x)
        s, c = trig_table_constants(5, rd)
        graph = ir.create_graph(rotary_pos_embed, xt, s, c, rotary_dim)
        dgraph = popxl.transforms.autodiff(graph, grads_required=graph.inputs[:1])
        info = popxl.ops.call_with_info(graph, xt, s, c)
        (dx,) = popxl.ops.call(dgraph.graph, popxl.constant(dy), inputs_dict=dgraph.inputs_dict(info))
    y, got_dx = _run(ir, [info.outputs[0], dx])
    np.testing.assert_allclose(y, _np_rope(x, sin[None], cos[None], rd), rtol=1e-5, atol=1e-6)
    # The rotation is orthogonal: its gradient is the inverse rotation, by the negated angles.
    np.testing.assert_allclose(got_dx, _np_rope(dy, -sin[None], cos[None], rd), rtol=1e-5, atol=1e-6)


def test_rotary_pos_embed_refuses_bad_shapes() -> None:
    ir = popxl.Ir()
    with ir.main_graph:
        x = popxl.variable(np.zeros((1, 4, 2, 8), np.float32))
        s, c = trig_table_constants(4, 8)
        with pytest.raises(ValueError, match="even"):
            rotary_pos_embed(x, s, c, rotary_dim=3)
        with pytest.raises(ValueError, match="does not fit"):
            rotary_pos_embed(x, s, c, rotary_dim=4)
