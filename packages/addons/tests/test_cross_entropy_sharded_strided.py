"""`cross_entropy_sharded_loss` over strided tensor-parallel groupings, as GPT-3 175B's 2D tensor
parallelism shards its vocabulary, against the maths written in NumPy."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import popxl
import popxl_addons as addons
from popxl_addons.collectives import cross_entropy_sharded_loss

RNG = np.random.default_rng(175)


def _np_loss_and_grad(x: np.ndarray[Any, Any], labels: np.ndarray[Any, Any]) -> tuple[Any, Any]:
    """Per-sample softmax cross entropy and its gradient wrt the logits (unit loss gradient), in float64."""
    p = np.exp(x - x.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    return -np.log(p[np.arange(len(labels)), labels]), p - np.eye(x.shape[-1])[labels]


@pytest.mark.parametrize(("replicas", "stride", "shards"), [(4, 2, 2), (8, 2, 4), (8, 4, 2)])
def test_loss_and_gradient_over_a_strided_grouping(replicas: int, stride: int, shards: int) -> None:
    n, c = 5, 3
    ir = popxl.Ir()
    ir.replication_factor = replicas
    tp = ir.replica_grouping(stride=stride, group_size=shards)
    groups = tp.num_groups
    x = RNG.normal(size=(groups, n, shards * c))  # each group's own samples over all its classes
    labels = RNG.integers(0, shards * c, size=(groups, n)).astype(np.int32)
    with ir.main_graph:
        xs = popxl.h2d_stream((n, c), popxl.float32, name="x")
        ls = popxl.h2d_stream((n,), popxl.int32, name="labels")
        logits, lab = popxl.ops.host_load(xs), popxl.ops.host_load(ls)

        def loss_fn(logits: popxl.Tensor, lab: popxl.Tensor) -> popxl.Tensor:
            return cross_entropy_sharded_loss(logits, lab, replica_grouping=tp, reduction="sum")

        graph = ir.create_graph(loss_fn, logits, lab)
        dgraph = popxl.transforms.autodiff(graph, grads_required=graph.inputs[:1])
        info = popxl.ops.call_with_info(graph, logits, lab)
        (dx,) = popxl.ops.call(dgraph.graph, popxl.constant(np.float32(1)), inputs_dict=dgraph.inputs_dict(info))
        outs = [addons.host_store(info.outputs[0]), addons.host_store(dx)]
    # Replica r is in group tp.assignment[r] with rank (r % (stride * shards)) // stride; it holds that
    # rank's slice of the group's classes and the labels shifted by the slice's start.
    group = tp.assignment
    rank = [(r % (stride * shards)) // stride for r in range(replicas)]
    replica_x = np.stack([x[group[r]][:, rank[r] * c : (rank[r] + 1) * c] for r in range(replicas)])
    replica_labels = np.stack([labels[group[r]] - rank[r] * c for r in range(replicas)])
    with popxl.Session(ir, "cpu") as session:
        result = session.run({xs: replica_x.astype(np.float32), ls: replica_labels})
    got_loss, got_dx = (np.asarray(result[o], np.float64) for o in outs)
    for r in range(replicas):
        per_sample, d = _np_loss_and_grad(x[group[r]].astype(np.float32).astype(np.float64), labels[group[r]])
        np.testing.assert_allclose(got_loss[r], per_sample.sum(), rtol=1e-5)
        np.testing.assert_allclose(got_dx[r], d[:, rank[r] * c : (rank[r] + 1) * c], rtol=1e-5, atol=1e-6)
