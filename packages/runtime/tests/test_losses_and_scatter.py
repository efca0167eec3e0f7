"""nll_loss, its softmax-gradient form, scatter_reduce, histogram and the within-replica all_reduce, against NumPy
and JAX."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from runtime_helpers import run_main

import popxl
from popxl import ops
from popxl.transforms import autodiff

RNG = np.random.default_rng(11)
LOGITS = RNG.normal(size=(2, 3, 6)).astype(np.float32)
PROBS = np.asarray(jax.nn.softmax(LOGITS, axis=-1))
LABELS = np.array([[0, 5, 3], [3, 1, 3]], np.int32)


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("log_prob", [False, True])
def test_nll_loss(reduction: str, log_prob: bool) -> None:
    given = np.log(PROBS) if log_prob else PROBS
    got = run_main(
        lambda: {"l": ops.nll_loss(popxl.constant(given), popxl.constant(LABELS), None, reduction, log_prob)}
    )["l"]
    per_sample = -np.log(np.take_along_axis(PROBS, LABELS[..., None], -1))[..., 0]
    want = {"mean": per_sample.mean(), "sum": per_sample.sum(), "none": per_sample}[reduction]
    np.testing.assert_allclose(got, want, rtol=1e-5)


@pytest.mark.parametrize("reduction", ["mean", "sum"])
def test_nll_loss_with_softmax_grad_is_the_gradient_wrt_the_logits(reduction: str) -> None:
    def build() -> dict[str, popxl.Tensor]:
        loss, dx = ops.nll_loss_with_softmax_grad(
            popxl.constant(PROBS), popxl.constant(LABELS), 2.0, ignore_index=3, reduction=reduction
        )
        return {"loss": loss, "dx": dx}

    got = run_main(build)

    def loss(x: jax.Array) -> jax.Array:
        logp = jnp.take_along_axis(jax.nn.log_softmax(x, axis=-1), LABELS[..., None], -1)[..., 0]
        kept = LABELS != 3
        total = -jnp.sum(jnp.where(kept, logp, 0.0))
        return total / jnp.sum(kept) if reduction == "mean" else total

    np.testing.assert_allclose(got["loss"], loss(LOGITS), rtol=1e-5)
    np.testing.assert_allclose(got["dx"], 2.0 * jax.grad(loss)(LOGITS), rtol=1e-5, atol=1e-6)


def test_scatter_reduce_max_min_and_broadcast_indices() -> None:
    data = RNG.normal(size=(4, 3)).astype(np.float32)
    rows = np.array([2, 0, 2, 0], np.int32)
    init = RNG.normal(size=(5, 3)).astype(np.float32)

    def build() -> dict[str, popxl.Tensor]:
        d, i = popxl.constant(data), popxl.constant(rows)
        return {
            "max": ops.scatter_reduce(d, i, "max", axis_size=5),
            "min": ops.scatter_reduce(d, i, "min", initial_values=popxl.constant(init)),
        }

    got = run_main(build)
    want_max = np.zeros((5, 3), np.float32)
    want_min = init.copy()
    for r in (0, 2):
        want_max[r] = data[rows == r].max(0)
        want_min[r] = np.minimum(init[r], data[rows == r].min(0))
    np.testing.assert_array_equal(got["max"], want_max)
    np.testing.assert_array_equal(got["min"], want_min)


@pytest.mark.parametrize("absolute", [False, True])
def test_histogram_bins_as_popart(absolute: bool) -> None:
    x = np.array([-10, -0.1, 0.01, 0.09, 1.1, 4, 6.9, 7, 8.0, 900], np.float32)
    levels = [0.1, 7, 3.1]  # popart sorts the levels
    got = run_main(lambda: {"h": ops.histogram(popxl.constant(x), levels, absolute)})["h"]
    values = np.abs(x) if absolute else x
    want = np.bincount(np.searchsorted(sorted(levels), values, side="right"), minlength=4)
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize(
    ("fn", "forward_reduces", "gradient_reduces"),
    [
        (ops.collectives.all_reduce, True, True),
        (ops.collectives.all_reduce_identical_inputs, False, True),
        (ops.collectives.all_reduce_identical_grad_inputs, True, False),
    ],
)
def test_within_replica_all_reduce(fn: object, forward_reduces: bool, gradient_reduces: bool) -> None:
    xs = [RNG.normal(size=3).astype(np.float32) for _ in range(2)]
    weights = [np.float32(2.0), np.float32(5.0)]
    ir = popxl.Ir()
    spec = popxl.TensorSpec((3,), popxl.float32)
    with ir.main_graph:

        def fwd(a: popxl.Tensor, b: popxl.Tensor) -> tuple[popxl.Tensor, popxl.Tensor]:
            ya, yb = fn([a, b])  # type: ignore[operator]
            return ya, ops.sum(ya * weights[0] + yb * weights[1])

        graph = ir.create_graph(fwd, spec, spec)
        info = autodiff(graph, grads_provided=graph.outputs[1:])
        site = ops.call_with_info(graph, *(popxl.constant(x) for x in xs))
        grads = ops.call(info.graph, popxl.constant(np.float32(1.0)), inputs_dict=info.inputs_dict(site))
        streams = [popxl.d2h_stream((3,), popxl.float32, n) for n in ("y", "da", "db")]
        for s, t in zip(streams, [site.outputs[0], *grads]):
            ops.host_store(s, t)
    with popxl.Session(ir, "cpu") as s:
        out = s.run()
    np.testing.assert_allclose(out[streams[0]], xs[0] + xs[1] if forward_reduces else xs[0], rtol=1e-6)
    for k, stream in enumerate(streams[1:]):
        want = sum(weights) if gradient_reduces else weights[k]
        np.testing.assert_allclose(out[stream], np.full(3, want), rtol=1e-6)


def test_comm_groups_as_replica_groupings() -> None:
    ir = popxl.Ir(replication=8)
    c = ops.collectives
    assert c.CommGroup(c.CommGroupType.Consecutive, 2).to_replica_grouping(ir) == ir.replica_grouping(group_size=2)
    assert c.CommGroup(c.CommGroupType.Orthogonal, 2).to_replica_grouping(ir) == ir.replica_grouping(4, 2)
    assert c.CommGroup().to_replica_grouping(ir) == ir.replica_grouping()
    assert c.CommGroup(c.CommGroupType.Ungrouped).to_replica_grouping(ir).group_size == 1
