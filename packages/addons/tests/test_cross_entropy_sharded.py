"""The cross entropy of sharded classes against the maths written directly, and its op kinds in the sweep."""

from __future__ import annotations

import itertools
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
from popxl_addons.collectives import cross_entropy_sharded_loss, cross_entropy_sharded_wr_loss

RNG = np.random.default_rng(11)
MODULE = "popxl_addons.collectives.cross_entropy_sharded"


def _np_softmax_ce(x: np.ndarray[Any, Any], labels: np.ndarray[Any, Any]) -> tuple[Any, Any]:
    """Per-sample loss and dloss/dx (unit loss gradient) of softmax cross entropy, in float64."""
    x = x.astype(np.float64)
    p = np.exp(x - x.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    loss = -np.log(p[np.arange(len(labels)), labels])
    return loss, p - np.eye(x.shape[-1])[labels]


def _jnp_parts(full: jax.Array, labels: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array]:
    """Loss, -log softmax and softmax - onehot of unsharded logits, in float32."""
    nls = jax.nn.logsumexp(full, axis=-1, keepdims=True) - full
    loss = jnp.take_along_axis(nls, labels[:, None], axis=1)[:, 0]
    return loss, nls, jax.nn.softmax(full, axis=-1) - jax.nn.one_hot(labels, full.shape[-1])


# ---- the registry sweep ------------------------------------------------------------------------------------------

N, C = 4, 3  # samples, classes per replica (two replicas)


def _tp_inputs() -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any], np.ndarray[Any, Any]]:
    logits = RNG.normal(size=(2, N, C)).astype(np.float32)
    labels = RNG.integers(0, 2 * C, size=(N,)).astype(np.int32)
    shifted = np.stack([labels, labels - C])  # each replica's labels shifted by its slice's offset
    return logits, labels, shifted


def _tp_example(ir: popxl.Ir) -> OpExample:
    logits, labels, shifted = _tp_inputs()

    def whole(x: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array]:
        return _jnp_parts(jnp.concatenate([x[0], x[1]], axis=-1), jnp.asarray(labels))

    def reference(x: jax.Array, _: jax.Array) -> list[jax.Array]:
        loss, nls, _ = whole(x)
        return [jnp.stack([loss, loss]), jnp.stack([nls[:, :C], nls[:, C:]])]

    def grad_reference(inputs: list[jax.Array], dys: list[jax.Array]) -> list[jax.Array]:
        # Each replica's own loss gradient times its slice of (softmax - onehot); -log softmax gives none.
        _, _, d = whole(inputs[0])
        return [jnp.stack([dys[0][0][:, None] * d[:, :C], dys[0][1][:, None] * d[:, C:]])]

    attrs = {"group": ir.replica_grouping(), "available_memory_proportion": 0.4}
    return OpExample([logits, shifted], attrs, reference=reference, grad_reference=grad_reference, replicas=2)


def _tp_grad_example(ir: popxl.Ir) -> OpExample:
    logits, labels, shifted = _tp_inputs()
    nls = np.asarray(_jnp_parts(jnp.asarray(logits[0]), jnp.asarray(labels % C))[1])
    dloss = RNG.normal(size=(N,)).astype(np.float32)

    def reference(dl: jax.Array, n: jax.Array, lab: jax.Array) -> list[jax.Array]:
        return [dl[:, None] * (jnp.exp(-n) - jax.nn.one_hot(lab, C))]  # one_hot is 0 outside the slice

    return OpExample([dloss, nls, shifted[1]], {}, reference=reference)


def _wr_sizes() -> tuple[int, int]:
    return 3, 2


def _wr_example(ir: popxl.Ir) -> OpExample:
    a, b = _wr_sizes()
    x0, x1 = RNG.normal(size=(N, a)).astype(np.float32), RNG.normal(size=(N, b)).astype(np.float32)
    labels = RNG.integers(0, a + b, size=(N,)).astype(np.int32)

    def reference(l0: jax.Array, l1: jax.Array, *_: jax.Array) -> list[jax.Array]:
        loss, nls, _ = _jnp_parts(jnp.concatenate([l0, l1], axis=-1), jnp.asarray(labels))
        return [loss, nls[:, :a], nls[:, a:]]

    def grad_reference(inputs: list[jax.Array], dys: list[jax.Array]) -> list[jax.Array]:
        _, _, d = _jnp_parts(jnp.concatenate(inputs[:2], axis=-1), jnp.asarray(labels))
        return [dys[0][:, None] * d[:, :a], dys[0][:, None] * d[:, a:]]

    return OpExample([x0, x1, labels, labels], {"ipus": [0, 1]}, reference=reference, grad_reference=grad_reference)


def _wr_grad_example(ir: popxl.Ir) -> OpExample:
    a, b = _wr_sizes()
    x = RNG.normal(size=(N, a + b)).astype(np.float32)
    labels = RNG.integers(0, a + b, size=(N,)).astype(np.int32)
    nls = np.asarray(_jnp_parts(jnp.asarray(x), jnp.asarray(labels))[1])
    dloss = RNG.normal(size=(N,)).astype(np.float32)

    def reference(dl: jax.Array, n0: jax.Array, n1: jax.Array, *_: jax.Array) -> list[jax.Array]:
        d = jnp.exp(-jnp.concatenate([n0, n1], axis=-1)) - jax.nn.one_hot(jnp.asarray(labels), a + b)
        return [dl[:, None] * d[:, :a], dl[:, None] * d[:, a:]]

    return OpExample([dloss, nls[:, :a], nls[:, a:], labels, labels], {"ipus": [0, 1]}, reference=reference)


EXAMPLES: dict[str, Callable[[popxl.Ir], OpExample]] = {
    "cross_entropy_sharded": _tp_example,
    "cross_entropy_sharded_grad": _tp_grad_example,
    "cross_entropy_sharded_wr": _wr_example,
    "cross_entropy_sharded_wr_grad": _wr_grad_example,
}


def test_every_op_kind_of_the_module_has_an_example() -> None:
    ours = {name for name, opdef in REGISTRY.items() if opdef.lower.__module__ == MODULE}
    assert ours == set(EXAMPLES)


@pytest.mark.parametrize("kind", sorted(EXAMPLES))
def test_registry_declarations(kind: str) -> None:
    check_op(REGISTRY[kind], EXAMPLES[kind])


@pytest.mark.parametrize("kind", sorted(EXAMPLES))
def test_float16_close_to_float32(kind: str) -> None:
    # -log softmax is a log probability, not an activation: it keeps its scale.
    powers = {1: 0.0, 2: 0.0} if kind.endswith("_grad") else None
    for scale, per_result in float16_errors(REGISTRY[kind], EXAMPLES[kind], powers=powers).items():
        for label, error in per_result.items():
            assert error < 1e-2, f"{label} at std {scale}: {error}"


# ---- in programs ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("reduction", "dtype"), [("mean", np.float32), ("sum", np.float32), ("mean", np.float16)])
def test_tensor_parallel_loss_and_gradient_in_tp_groups(reduction: str, dtype: Any) -> None:
    """4 replicas: 2 data-parallel groups of 2 tensor-parallel shards (stride 1), each group its own samples."""
    n, c, shards = 6, 4, 2
    x = RNG.normal(size=(2, n, shards * c))  # per data-parallel group
    labels = RNG.integers(0, shards * c, size=(2, n)).astype(np.int32)
    labels[:, 0] = 1  # ignored: global class 1
    ir = popxl.Ir()
    ir.replication_factor = 4
    tp = ir.replica_grouping(stride=1, group_size=shards)
    with ir.main_graph:
        xs = popxl.h2d_stream((n, c), popxl.dtypes.as_dtype(np.dtype(dtype)), name="x")
        ls = popxl.h2d_stream((n,), popxl.int32, name="labels")
        ig = popxl.h2d_stream((), popxl.int32, name="ignore")
        logits, lab, ignore = popxl.ops.host_load(xs), popxl.ops.host_load(ls), popxl.ops.host_load(ig)

        def loss_fn(logits: popxl.Tensor, lab: popxl.Tensor, ignore: popxl.Tensor) -> popxl.Tensor:
            return cross_entropy_sharded_loss(
                logits, lab, ignore_index=ignore, replica_grouping=tp, reduction=reduction
            )  # type: ignore[arg-type]

        graph = ir.create_graph(loss_fn, logits, lab, ignore)
        dgraph = popxl.transforms.autodiff(graph, grads_required=graph.inputs[:1])
        info = popxl.ops.call_with_info(graph, logits, lab, ignore)
        loss = info.outputs[0]
        one = popxl.constant(np.ones((), dtype))
        (dx,) = popxl.ops.call(dgraph.graph, one, inputs_dict=dgraph.inputs_dict(info))
        outs = [addons.host_store(loss), addons.host_store(dx)]
    replica_x = np.stack([x[g][:, s * c : (s + 1) * c] for g in range(2) for s in range(shards)]).astype(dtype)
    replica_labels = np.stack([labels[g] - s * c for g in range(2) for s in range(shards)])
    replica_ignore = np.array([1 - s * c for _ in range(2) for s in range(shards)], np.int32)
    with popxl.Session(ir, "cpu") as session:
        result = session.run({xs: replica_x, ls: replica_labels, ig: replica_ignore})
    got_loss, got_dx = (np.asarray(result[o], np.float64) for o in outs)
    tol = 1e-5 if dtype == np.float32 else 1e-2
    for g in range(2):
        per_sample, d = _np_softmax_ce(x[g].astype(dtype), labels[g])
        kept = labels[g] != 1
        denominator = kept.sum() if reduction == "mean" else 1
        want_loss = (per_sample * kept).sum() / denominator
        want_dx = d * kept[:, None] / denominator
        for s in range(shards):
            r = 2 * g + s
            np.testing.assert_allclose(got_loss[r], want_loss, rtol=tol)
            np.testing.assert_allclose(got_dx[r], want_dx[:, s * c : (s + 1) * c], rtol=tol, atol=tol * 0.1)


def test_within_replica_loss_and_gradient_with_uneven_slices() -> None:
    n, sizes = 5, (4, 3, 3)
    x = RNG.normal(size=(n, sum(sizes))).astype(np.float32)
    labels = RNG.integers(0, sum(sizes), size=(n,)).astype(np.uint32)
    dloss = RNG.normal(size=(n,)).astype(np.float32)
    bounds = np.cumsum((0, *sizes))
    ir = popxl.Ir()
    with ir.main_graph:
        parts = [popxl.variable(x[:, a:b]) for a, b in itertools.pairwise(bounds)]
        labs = [popxl.variable(labels) for _ in sizes]

        def loss_fn(*ts: popxl.Tensor) -> popxl.Tensor:
            return cross_entropy_sharded_wr_loss(ts[:3], ts[3:], ipus=[0, 1, 2])

        graph = ir.create_graph(loss_fn, *parts, *labs)
        dgraph = popxl.transforms.autodiff(graph, grads_required=graph.inputs[:3])
        info = popxl.ops.call_with_info(graph, *parts, *labs)
        grads = popxl.ops.call(dgraph.graph, popxl.constant(dloss), inputs_dict=dgraph.inputs_dict(info))
        outs = [addons.host_store(t) for t in (info.outputs[0], *grads)]
    with popxl.Session(ir, "cpu") as session:
        result = session.run()
    got = [np.asarray(result[o]) for o in outs]
    want_loss, d = _np_softmax_ce(x, labels.astype(np.int64))
    np.testing.assert_allclose(got[0], want_loss, rtol=1e-5)
    np.testing.assert_allclose(np.concatenate(got[1:], axis=1), dloss[:, None] * d, rtol=1e-5, atol=1e-6)
