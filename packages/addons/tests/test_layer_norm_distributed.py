"""The layer norm of a sharded hidden axis against torch's of the whole axis, and its op kinds in the sweep."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch

import popxl
import popxl_addons as addons
import popxl_addons.collectives
from popxl.op import REGISTRY
from popxl.op_contract import OpExample, check_op, float16_errors
from popxl_addons.collectives import LayerNormDistributed, layer_norm_distributed

RNG = np.random.default_rng(21)
MODULE = "popxl_addons.collectives.layer_norm_distributed"
EPS = 1e-5

Array = np.ndarray[Any, Any]


def _jnp_layer_norm(x: jax.Array, w: jax.Array, b: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array]:
    """Layer norm of whole rows, with each row's mean and inverse standard deviation, in float32."""
    mean = jnp.mean(x, axis=1)
    inv_std = 1 / jnp.sqrt(jnp.var(x, axis=1) + EPS)
    return (x - mean[:, None]) * inv_std[:, None] * w + b, mean, inv_std


# ---- the registry sweep (two replicas, the hidden axis split in halves) ----------------------------------------

N, H = 3, 4  # rows, hidden width per replica


def _halves(v: jax.Array) -> jax.Array:
    """A (..., 2H) array as each replica's (..., H) half, stacked on a leading replica axis."""
    return jnp.stack([v[..., :H], v[..., H:]])


def _whole(v: jax.Array) -> jax.Array:
    return jnp.concatenate([v[0], v[1]], axis=-1)


def _forward_example(ir: popxl.Ir) -> OpExample:
    x = RNG.normal(size=(2, N, H)).astype(np.float32) + 0.5
    w = RNG.normal(size=(2, H)).astype(np.float32)
    b = RNG.normal(size=(2, H)).astype(np.float32)

    def reference(x: jax.Array, w: jax.Array, b: jax.Array) -> list[jax.Array]:
        y, mean, inv_std = _jnp_layer_norm(_whole(x), _whole(w), _whole(b))
        return [_halves(y), jnp.stack([mean, mean]), jnp.stack([inv_std, inv_std])]

    def grad_reference(inputs: Sequence[jax.Array], dys: Sequence[jax.Array]) -> list[jax.Array]:
        # Only the gradient of Y is propagated (as popart), through the whole axis: the statistics' are not.
        _, pullback = jax.vjp(lambda *v: reference(*v)[0], *inputs)
        return list(pullback(dys[0]))

    attrs = {"epsilon": EPS, "group": ir.replica_grouping()}
    return OpExample([x, w, b], attrs, reference=reference, grad_reference=grad_reference, replicas=2)


def _grad_example(ir: popxl.Ir) -> OpExample:
    x = RNG.normal(size=(N, 2 * H)).astype(np.float32)
    w = RNG.normal(size=(2 * H,)).astype(np.float32)
    _, mean, inv_std = _jnp_layer_norm(jnp.asarray(x), jnp.asarray(w), jnp.zeros(2 * H))
    dy = RNG.normal(size=(N, 2 * H)).astype(np.float32)

    def reference(x: jax.Array, w: jax.Array, mean: jax.Array, inv_std: jax.Array, dy: jax.Array) -> list[jax.Array]:
        # The exact gradients of the whole layer norm (the statistics taken from x itself), split per replica.
        _, pullback = jax.vjp(lambda a, c, d: _jnp_layer_norm(a, c, d)[0], _whole(x), _whole(w), jnp.zeros(2 * H))
        dx, dw, db = pullback(_whole(dy))
        return [_halves(dx), _halves(dw), _halves(db)]

    stats = [np.stack([np.asarray(s)] * 2) for s in (mean, inv_std)]
    inputs = [np.asarray(_halves(jnp.asarray(x))), np.asarray(_halves(jnp.asarray(w))), *stats]
    inputs.append(np.asarray(_halves(jnp.asarray(dy))))
    attrs = {"epsilon": EPS, "group": ir.replica_grouping()}
    return OpExample(inputs, attrs, reference=reference, replicas=2, rtol=1e-4, atol=1e-5)


EXAMPLES: dict[str, Callable[[popxl.Ir], OpExample]] = {
    "layer_norm_distributed": _forward_example,
    "layer_norm_distributed_grad": _grad_example,
}


def test_every_op_kind_of_the_module_has_an_example() -> None:
    ours = {name for name, opdef in REGISTRY.items() if opdef.lower.__module__ == MODULE}
    assert ours == set(EXAMPLES)


@pytest.mark.parametrize("kind", sorted(EXAMPLES))
def test_registry_declarations(kind: str) -> None:
    check_op(REGISTRY[kind], EXAMPLES[kind])


@pytest.mark.parametrize("kind", sorted(EXAMPLES))
def test_float16_close_to_float32(kind: str) -> None:
    # The grad op's inverse standard deviation scales inversely with x; the weights keep their scale.
    powers = {1: 0.0, 3: -1.0} if kind.endswith("_grad") else {1: 0.0, 2: 0.0}
    for scale, per_result in float16_errors(REGISTRY[kind], EXAMPLES[kind], powers=powers).items():
        assert per_result
        for label, error in per_result.items():
            assert error < 1e-2, f"{label} at std {scale}: {error}"


# ---- in programs: tensor parallel over a replica grouping ------------------------------------------------------


def _torch_layer_norm(x: Array, w: Array, b: Array, dy: Array) -> list[Array]:
    """y, dx, dw, db of torch's layer norm of whole rows, in float64."""
    xt, wt, bt = (torch.tensor(v, dtype=torch.float64, requires_grad=True) for v in (x, w, b))
    y = torch.nn.functional.layer_norm(xt, (x.shape[1],), wt, bt, eps=EPS)
    grads = torch.autograd.grad(y, (xt, wt, bt), torch.tensor(dy, dtype=torch.float64))
    return [t.detach().numpy() for t in (y, *grads)]


def _rank_and_group(replica: int, stride: int, shards: int) -> tuple[int, int]:
    """A replica's rank in its tensor-parallel group (`shards` replicas `stride` apart), and that group's index."""
    return (replica // stride) % shards, replica % stride + (replica // (stride * shards)) * stride


def _run_sharded(
    x: Array, w: Array, b: Array, dy: Array, replicas: int, stride: int, shards: int, dtype: Any
) -> list[Array]:
    """y, dx, dw, db per replica, with x (groups, N, H) and w, b (H,): each data-parallel group its own rows,
    the hidden axis split over the `shards` replicas of each tensor-parallel group (`stride` apart)."""
    ir = popxl.Ir(replication=replicas)
    tp = ir.replica_grouping(stride=stride, group_size=shards)
    width = x.shape[-1] // shards

    def per_replica(v: Array) -> Array:
        """Each replica's slice of `v` (groups, N, H): its data-parallel group's rows, its rank's part of H."""
        out = []
        for r in range(replicas):
            rank, group = _rank_and_group(r, stride, shards)
            out.append(v[group][:, rank * width : (rank + 1) * width])
        return np.stack(out).astype(dtype)

    pdtype = popxl.dtypes.as_dtype(np.dtype(dtype))
    with ir.main_graph:
        xs = popxl.h2d_stream((x.shape[1], width), pdtype, name="x")
        dys = popxl.h2d_stream((x.shape[1], width), pdtype, name="dy")
        # The weights' slices differ along a tensor-parallel group and are shared across the groups.
        # (The transposed grouping's group j holds the replicas of rank j.)
        slices = [slice(j * width, (j + 1) * width) for j in range(shards)]
        wv = popxl.variable(np.stack([w[s] for s in slices]).astype(dtype), pdtype, replica_grouping=tp.transpose())
        bv = popxl.variable(np.stack([b[s] for s in slices]).astype(dtype), pdtype, replica_grouping=tp.transpose())
        xt, dyt = popxl.ops.host_load(xs), popxl.ops.host_load(dys)

        def norm(x: popxl.Tensor, w: popxl.Tensor, b: popxl.Tensor) -> popxl.Tensor:
            return layer_norm_distributed(x, w, b, epsilon=EPS, group=tp)

        graph = ir.create_graph(norm, xt, wv, bv)
        dgraph = popxl.transforms.autodiff(graph)
        info = popxl.ops.call_with_info(graph, xt, wv, bv)
        grads = popxl.ops.call(dgraph.graph, dyt, inputs_dict=dgraph.inputs_dict(info))
        outs = [addons.host_store(t) for t in (info.outputs[0], *grads)]
    with popxl.Session(ir, "cpu") as session:
        result = session.run({xs: per_replica(x), dys: per_replica(dy)})
    return [np.asarray(result[o], np.float64) for o in outs]


@pytest.mark.parametrize(
    ("replicas", "stride", "shards"),
    [(4, 1, 2), (4, 2, 2), (4, 1, 4)],
    ids=["dp2xtp2", "tp2-stride2", "tp4"],
)
def test_sharded_layer_norm_and_gradients_match_the_whole_axis(replicas: int, stride: int, shards: int) -> None:
    groups, n, h = replicas // shards, 5, 8
    x = RNG.normal(size=(groups, n, h)) + 1.0
    w, b = RNG.normal(size=(h,)), RNG.normal(size=(h,))
    dy = RNG.normal(size=(groups, n, h))
    got_y, got_dx, got_dw, got_db = _run_sharded(x, w, b, dy, replicas, stride, shards, np.float32)
    width = h // shards
    want = [_torch_layer_norm(x[g], w, b, dy[g]) for g in range(groups)]
    for r in range(replicas):
        rank, group = _rank_and_group(r, stride, shards)
        part = slice(rank * width, (rank + 1) * width)
        y, dx, dw, db = want[group]
        np.testing.assert_allclose(got_y[r], y[:, part], rtol=1e-5, atol=1e-5, err_msg=f"y of replica {r}")
        np.testing.assert_allclose(got_dx[r], dx[:, part], rtol=1e-4, atol=1e-5, err_msg=f"dx of replica {r}")
        # The weights' gradients stay each replica's own (its rows, its slice), as popart's.
        np.testing.assert_allclose(got_dw[r], dw[part], rtol=1e-4, atol=1e-5, err_msg=f"dw of replica {r}")
        np.testing.assert_allclose(got_db[r], db[part], rtol=1e-5, atol=1e-5, err_msg=f"db of replica {r}")


def test_layer_norm_distributed_layer_with_a_replica_grouping() -> None:
    """The layer over 2 data-parallel groups of 2 shards: weights ones and zeros, shared by the groups."""
    n, h, shards = 4, 6, 2
    x = RNG.normal(size=(2, n, h)).astype(np.float32)
    ir = popxl.Ir(replication=4)
    tp = ir.replica_grouping(group_size=shards)
    replica_x = np.stack([x[r // shards][:, (r % shards) * 3 : (r % shards + 1) * 3] for r in range(4)])
    with ir.main_graph:
        xv = popxl.variable(replica_x, popxl.float32, replica_grouping=ir.replica_grouping(group_size=1))
        facts, graph = LayerNormDistributed(replica_grouping=tp).create_graph(xv)
        variables = facts.init("ln")
        (y,) = graph.bind(variables).call(xv)
        out = addons.host_store(y)
    assert variables.weight.replica_grouping == tp.transpose()
    with popxl.Session(ir, "cpu") as session:
        got = np.asarray(session.run()[out])
    for r in range(4):
        want = _torch_layer_norm(x[r // shards], np.ones(h), np.zeros(h), np.zeros((n, h)))[0]
        np.testing.assert_allclose(got[r], want[:, (r % shards) * 3 : (r % shards + 1) * 3], rtol=1e-5, atol=1e-5)


def test_bad_operands_are_named() -> None:
    ir = popxl.Ir(replication=2)
    with ir.main_graph:
        x = popxl.variable(np.zeros((2, 3), np.float32))
        w = popxl.variable(np.zeros((3,), np.float32))
        with pytest.raises(ValueError, match="rank 2"):
            layer_norm_distributed(popxl.variable(np.zeros((3,), np.float32)), w, w)
        with pytest.raises(ValueError, match=r"weight must have shape \(3,\)"):
            layer_norm_distributed(x, popxl.variable(np.zeros((4,), np.float32)), w)
        with pytest.raises(ValueError, match="float16 or float32"):
            layer_norm_distributed(popxl.variable(np.zeros((2, 3), np.int32)), w, w)
        with pytest.raises(ValueError, match="the input's type"):
            layer_norm_distributed(x, popxl.variable(np.zeros((3,), np.float16)), w)


def test_popxl_addons_paths_resolve_here() -> None:
    from popxl_addons.layers.layer_norm_distributed import LayerNormDistributed as FromLayers
    from popxl_addons.ops.layer_norm_distributed import layer_norm_distributed as from_ops
    from popxl_addons.ops.layer_norm_distributed.layer_norm_distributed import layer_norm_distributed as from_op

    assert FromLayers is LayerNormDistributed
    assert from_ops is from_op is layer_norm_distributed
