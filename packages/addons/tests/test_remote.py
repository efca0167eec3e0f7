"""Phased execution's pieces: named buffers, remote variables, load and store graphs, sharded gathers and reductions."""

from __future__ import annotations

from functools import partial

import numpy as np
import pytest

import popxl
from popxl import ops
from popxl_addons.core import (
    InputStreams,
    Module,
    NamedTensors,
    OutputStreams,
    all_gather_replica_sharded_graph,
    host_load,
    host_store,
    load_remote,
    load_remote_graph,
    named_variable_buffers,
    reduce_replica_sharded_graph,
    repeat,
    shard,
    store_remote,
    store_remote_graph,
    tensor_parallel_input,
    unshard,
)


class Bump(Module):
    """Adds its input to a weight and a bias, both updated in place."""

    def build(self, x: popxl.Tensor) -> None:
        w = self.add_variable_input("w", partial(np.random.normal, 0, 1, x.shape), x.dtype, by_ref=True)
        b = self.add_variable_input("b", partial(np.full, x.shape, 2.0), x.dtype, by_ref=True)
        ops.var_updates.accumulate_(w, x)
        ops.var_updates.accumulate_(b, x, 3.0)


@pytest.mark.placement
def test_layers_loaded_run_and_stored_back_one_entry_each() -> None:
    np.random.seed(0)
    data = np.arange(4, dtype=np.float32).reshape(1, 4)
    ir = popxl.Ir()
    with ir.main_graph, popxl.in_sequence():
        data, stream, x = host_load(data, popxl.float32, "x")
        factories, graph = Bump().create_graph(x)
        buffers = named_variable_buffers(factories, 3)
        load, names = load_remote_graph(buffers)
        store = store_remote_graph(buffers)
        layers = [factories.init_remote(buffers, entry) for entry in range(3)]
        for entry in (0, 2):
            loaded = NamedTensors.pack(names, load.call(entry))
            graph.bind(loaded).call(x)
            store.bind(loaded).call(entry)
    assert names == ["b", "w"] and stream.tensor_id == "x_stream"
    with popxl.Session(ir, "cpu") as session:
        before = {t: v.copy() for t, v in session.get_tensors_data([t for n in layers for t in n.tensors]).items()}
        session.run({stream: data})
        after = session.get_tensors_data(list(before))
    for entry, layer in enumerate(layers):
        bumped = entry in (0, 2)
        np.testing.assert_allclose(after[layer.w], before[layer.w] + (data if bumped else 0))
        np.testing.assert_allclose(after[layer.b], before[layer.b] + (3 * data if bumped else 0))


@pytest.mark.placement
def test_load_remote_and_store_remote_in_the_current_graph() -> None:
    ir = popxl.Ir()
    with ir.main_graph, popxl.in_sequence():
        factories, _ = Bump().create_graph(popxl.TensorSpec((2,), popxl.float32))
        buffers = named_variable_buffers(factories, 2)
        variables = factories.init_remote(buffers, 1)
        loaded = load_remote(buffers, 1)
        store_remote(buffers, NamedTensors(w=loaded.w * 2, b=loaded.b), 1)
    with popxl.Session(ir, "cpu") as session:
        w0 = session.get_tensor_data(variables.w).copy()
        session.run()
        np.testing.assert_allclose(session.get_tensor_data(variables.w), 2 * w0)
        np.testing.assert_allclose(session.get_tensor_data(variables.b), np.full(2, 2.0))


@pytest.mark.placement
@pytest.mark.parametrize("mode", ["simulate", "devices"])
def test_sharded_layer_gathered_updated_and_reduced_into_shards(mode: str) -> None:
    replicas = 4
    data = np.random.default_rng(1).normal(size=(1, 4)).astype(np.float32)
    ir = popxl.Ir(replication=replicas)
    with ir.main_graph, popxl.in_sequence():
        _, stream, x = host_load(data, popxl.float32, "x")
        factories, graph = Bump().create_graph(x)
        buffers = named_variable_buffers(factories, 1, {k: replicas for k in factories.keys_flat()})
        load, names = load_remote_graph(buffers)
        shards = NamedTensors.pack(names, load.graph.outputs)
        gather, _ = all_gather_replica_sharded_graph(shards, replica_groups=factories.replica_groupings)
        reduce, _ = reduce_replica_sharded_graph(
            NamedTensors.pack(names, gather.graph.outputs), shard_groups=factories.replica_groupings
        )
        store = store_remote_graph(buffers)
        variables = factories.init_remote(buffers, 0)
        layer = NamedTensors.pack(names, load.call(0))
        layer = NamedTensors.pack(names, gather.bind(layer).call())
        graph.bind(layer).call(x)
        layer = NamedTensors.pack(names, reduce.bind(layer).call())
        store.bind(layer).call(0)
    assert buffers.w.meta_shape == (1, 4) and buffers.w.tensor_shape == (1,)
    with popxl.Session(ir, "cpu", replica_mode=mode) as session:
        before = {t: v.copy() for t, v in session.get_tensors_data(variables.tensors).items()}
        session.run({stream: repeat(data, replicas, axis=0)})
        after = session.get_tensors_data(variables.tensors)
    # Every replica bumps the whole gathered layer; summing the replicas' copies into shards multiplies by 4.
    np.testing.assert_allclose(after[variables.w], (before[variables.w] + data) * replicas, rtol=1e-6)
    np.testing.assert_allclose(after[variables.b], (before[variables.b] + 3 * data) * replicas, rtol=1e-6)


def test_named_variable_buffers_shard_as_asked() -> None:
    ir = popxl.Ir(replication=4)
    with ir.main_graph:
        factories, _ = Bump().create_graph(popxl.TensorSpec((8,), popxl.float32))
        whole = named_variable_buffers(factories, 2, False)
        halves = named_variable_buffers(factories, 1, 2)
        mixed = named_variable_buffers(factories, 1, {"w": 4})
        with pytest.raises(ValueError, match="Invalid shard_over_dict"):
            named_variable_buffers(factories, 1, 5)
    assert whole.w.tensor_shape == (8,) and whole.w.entries == 2 and not whole.w.meta_shape
    assert halves.w.tensor_shape == (4,) and halves.w.meta_shape == (8,)
    assert mixed.w.tensor_shape == (2,) and mixed.b.tensor_shape == (2,)


def test_stream_collections_and_host_store() -> None:
    ir = popxl.Ir()
    with ir.main_graph:
        inputs = InputStreams(x=((2,), popxl.float32), y=((2,), popxl.int32))
        outputs = OutputStreams(z=((2,), popxl.float32))
        ops.host_store(outputs.z, ops.host_load(inputs.x) * 2)
        echo = host_store(ops.cast(ops.host_load(inputs[1]), popxl.float32))
    assert inputs.keys() == ["x", "y"] and [s.tensor_id for s in inputs] == ["x", "y"]
    with pytest.raises(AttributeError, match="No stream 'w'"):
        _ = inputs.w
    with popxl.Session(ir, "cpu") as session:
        out = session.run({inputs.x: np.ones(2, np.float32), inputs.y: np.arange(2, dtype=np.int32)})
    np.testing.assert_array_equal(out[outputs.z], [2.0, 2.0])
    np.testing.assert_array_equal(out[echo], [0.0, 1.0])


def test_array_munging_against_numpy() -> None:
    data = np.arange(24).reshape(4, 6)
    np.testing.assert_array_equal(shard(data, 3, 1), np.stack([data[:, :2], data[:, 2:4], data[:, 4:]]))
    np.testing.assert_array_equal(unshard(shard(data, 2, -1), -1), data)
    np.testing.assert_array_equal(repeat(data, 2, 1), np.stack([data, data], axis=1))
    fed = tensor_parallel_input(np.arange(4), 2, 4)
    np.testing.assert_array_equal(fed, [[0, 0, 1, 1], [2, 2, 3, 3]])


def test_host_load_takes_a_torch_tensor_that_requires_grad() -> None:
    torch = pytest.importorskip("torch")
    source = torch.arange(6, dtype=torch.float32).reshape(2, 3).requires_grad_()
    ir = popxl.Ir()
    with ir.main_graph:
        data, stream, x = host_load(source, popxl.float16, "x")
        out = popxl.d2h_stream(x.shape, x.dtype, "y")
        ops.host_store(out, x * 2)
    assert isinstance(data, np.ndarray) and data.dtype == np.float16
    with popxl.Session(ir, "cpu") as session:
        np.testing.assert_array_equal(session.run({stream: data})[out], 2 * source.detach().numpy())
