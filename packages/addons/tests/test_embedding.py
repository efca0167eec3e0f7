"""Embedding against NumPy: lookups, their gradients, and a vocabulary sharded over replicas."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import popxl
from popxl import ops
from popxl_addons.core import autodiff_with_accumulation
from popxl_addons.layers import MULTISLICE_MAGIC_NUMBER, Embedding

rng = np.random.default_rng(11)
Array = np.ndarray[Any, Any]


def _lookup_and_weight_grad(
    layer: Embedding, indices: Array, weight: Array, dy: Array, dtype: popxl.dtype = popxl.float32
) -> tuple[Array, Array]:
    """The layer's output for `indices` and the gradient of its weight for output gradient `dy`."""
    ir = popxl.Ir()
    with ir.main_graph, popxl.in_sequence():
        h = popxl.h2d_stream(indices.shape, popxl.int32, "indices")
        args, graph = layer.create_graph(h.spec)
        dargs, dgraph = autodiff_with_accumulation(graph, graph.args.tensors, grads_required=[])
        variables, accums = args.init(), dargs.init()
        site = graph.bind(variables).call_with_info(ops.host_load(h))
        dgraph.bind(accums).call(popxl.constant(dy, dtype), args=dgraph.grad_graph_info.inputs_dict(site))
        d = popxl.d2h_stream(site.outputs[0].shape, dtype, "y")
        ops.host_store(d, site.outputs[0])
    with popxl.Session(ir, "cpu") as s:
        s.write_variables_data({variables.weight: weight})
        y = s.run({h: indices})[d]
        grad = s.get_tensor_data(accums.accum.weight)
    return np.asarray(y), np.asarray(grad)


def _scatter_add(shape: tuple[int, ...], indices: Array, dy: Array) -> Array:
    out = np.zeros(shape, np.float32)
    np.add.at(out, indices, dy.astype(np.float32))
    return out


def test_shard_size_and_offsets() -> None:
    assert MULTISLICE_MAGIC_NUMBER == 16
    assert Embedding.get_vocab_shard_size(20, 1) == 32
    assert Embedding.get_vocab_shard_size(1000, 1) == 1008
    assert Embedding.get_vocab_shard_size(64, 4) == 16
    assert Embedding.get_vocab_shard_size(65, 4) == 32
    np.testing.assert_array_equal(Embedding.get_offsets(50, 4), [0, 16, 32, 48])
    np.testing.assert_array_equal(Embedding.get_offsets(50, 1), [0])
    layer = Embedding(popxl.float32, 50, 8)
    assert (layer.n_shards, layer.vocab_shard_size) == (1, 64)
    np.testing.assert_array_equal(layer.offsets, [0])


def test_variable_and_default_init() -> None:
    ir = popxl.Ir()
    with ir.main_graph:
        args, graph = Embedding(popxl.float16, 100, 40).create_graph(popxl.TensorSpec((2, 3), popxl.int32))
        assert sorted(args.to_dict()) == ["weight"]
        w = args.init().weight
    assert w.shape == (112, 40) and w.dtype == popxl.float16
    assert graph.graph.outputs[0].shape == (2, 3, 40)
    assert np.abs(w.host_data).max() <= 0.04 and 0.015 < w.host_data.astype(np.float32).std() < 0.02


@pytest.mark.parametrize("axis", [0, 1])
def test_lookup_and_gradient(axis: int) -> None:
    weight = rng.normal(size=(32, 6)).astype(np.float32)
    indices = rng.integers(0, 20 if axis == 0 else 6, size=(3, 5)).astype(np.int32)
    indices[0, :2] = indices[1, 0]  # repeated indices accumulate
    expected = np.take(weight, indices, axis=axis)
    dy = rng.normal(size=expected.shape).astype(np.float32)
    y, grad = _lookup_and_weight_grad(Embedding(popxl.float32, 20, 6, axis=axis), indices, weight, dy)
    np.testing.assert_array_equal(y, expected)
    if axis == 0:
        ref = _scatter_add((32, 6), indices, dy)
    else:  # columns: scatter along axis 1
        ref = _scatter_add((6, 32), indices, np.moveaxis(dy, 0, -1)).T
    np.testing.assert_allclose(grad, ref, rtol=1e-6, atol=1e-6)


def test_float16_close_to_float32() -> None:
    weight = (rng.normal(size=(32, 8)) * 0.02).astype(np.float32)
    indices = rng.integers(0, 30, size=(4, 6)).astype(np.int32)
    indices[:, 0] = 3  # one row gathered four times: its gradient is a sum
    dy = (rng.normal(size=(4, 6, 8)) * 0.02).astype(np.float32)
    y32, g32 = _lookup_and_weight_grad(Embedding(popxl.float32, 30, 8), indices, weight, dy)
    y16, g16 = _lookup_and_weight_grad(
        Embedding(popxl.float16, 30, 8), indices, weight.astype(np.float16), dy.astype(np.float16), popxl.float16
    )
    assert y16.dtype == np.float16 and g16.dtype == np.float16
    assert np.isfinite(y16).all() and np.isfinite(g16).all()
    np.testing.assert_allclose(y16.astype(np.float32), y32, atol=1e-2 * np.abs(y32).max())
    np.testing.assert_allclose(g16.astype(np.float32), g32, atol=1e-2 * np.abs(g32).max())


@pytest.mark.parametrize("mode", ["devices", "simulate"])
def test_vocabulary_sharded_over_four_replicas(mode: str) -> None:
    """Each replica holds a quarter of the vocabulary; the sum over the shards is the full lookup."""
    vocab, hidden, n = 50, 8, 4
    full = rng.normal(size=(64, hidden)).astype(np.float32)  # 4 shards of 16 rows, the last 14 unused
    indices = rng.integers(0, vocab, size=(2, 5)).astype(np.int32)
    indices[0, 0], indices[1, 4] = 0, vocab - 1
    dy = rng.normal(size=(2, 5, hidden)).astype(np.float32)
    ir = popxl.Ir(replication=n)
    with ir.main_graph, popxl.in_sequence():
        tp = ir.replica_grouping(group_size=n)
        layer = Embedding(popxl.float32, vocab, hidden, replica_grouping=tp.transpose())
        assert (layer.n_shards, layer.vocab_shard_size) == (n, 16)
        h = popxl.h2d_stream(indices.shape, popxl.int32, "indices")
        args, graph = layer.create_graph(h.spec)
        dargs, dgraph = autodiff_with_accumulation(
            graph, graph.args.tensors, grads_required=[], replica_groupings={"weight": tp.transpose()}
        )
        variables, accums = args.init(), dargs.init()
        assert variables.weight.shape_on_host == (n, 16, hidden)
        site = graph.bind(variables).call_with_info(ops.host_load(h))
        dgraph.bind(accums).call(popxl.constant(dy), args=dgraph.grad_graph_info.inputs_dict(site))
        part = site.outputs[0]
        streams = [popxl.d2h_stream(part.shape, popxl.float32, name) for name in ("part", "sum")]
        ops.host_store(streams[0], part)
        ops.host_store(streams[1], ops.collectives.replicated_all_reduce(part, group=tp))
    offsets = layer.offsets
    with popxl.Session(ir, "cpu", replica_mode=mode) as s:
        s.write_variables_data({variables.weight: full.reshape(n, 16, hidden)})
        out = s.run({h: np.stack([indices - offsets[r] for r in range(n)])})
        grads = s.get_tensor_data(accums.accum.weight)
    expected = full[indices]
    for r in range(n):
        inside = (indices >= offsets[r]) & (indices < offsets[r] + 16)
        np.testing.assert_array_equal(out[streams[0]][r], np.where(inside[..., None], expected, 0))
        np.testing.assert_allclose(out[streams[1]][r], expected, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(grads.reshape(64, hidden), _scatter_add((64, hidden), indices, dy), rtol=1e-6, atol=1e-6)
