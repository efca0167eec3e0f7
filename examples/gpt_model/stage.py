"""One kind of phased stage (embeddings, decoder layer, head): its batch-serialised graphs, its state in
replica-sharded remote buffers (an entry per layer) and its forward, backward and optimizer phases."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

import popxl
import popxl_addons as addons
from gpt_model.config import Config, Groupings
from gpt_model.optimizer import adam_step
from popxl_addons.core.training import Serialisation, serialise_step
from popxl_addons.named_replica_grouping import NamedReplicaGrouping
from popxl_addons.ops.grad_reduce_square_add import grad_reduce_square_add
from popxl_addons.remote import NamedRemoteBuffers
from popxl_addons.rts import all_gather_replica_sharded_graph, reduce_replica_sharded_graph
from popxl_addons.transforms.batch_serialisation import BatchSerialResult

Row = int | popxl.Tensor  # a layer's entry in its stage's remote buffers: fixed, or the layer loop's counter


def shard_groups(factories: addons.NamedVariableFactories) -> NamedReplicaGrouping:
    """Each weight's replicated-tensor-sharding group, chosen as popxl-addons' GPT applications choose it.

    That is the weight's whole replica group (the data-parallel replicas for a
    tensor-parallel weight, every replica for a shared one) where its elements
    divide evenly over it, else a group of one (not sharded).
    """
    ir = popxl.gir()
    groups = {}
    for name, f in factories.to_dict().items():
        group = f.replica_grouping
        groups[name] = group if math.prod(f.shape) % group.group_size == 0 else ir.replica_grouping(group_size=1)
    return NamedReplicaGrouping.from_dict(groups)


def shard_spec(f: addons.VariableFactory, group: popxl.ReplicaGrouping) -> popxl.TensorSpec:
    """The spec of one replica's shard over `group` of the variable `f` makes (its whole spec for a group of one)."""
    if group.group_size == 1:
        return popxl.TensorSpec(f.shape, f.dtype)
    return popxl.TensorSpec((math.prod(f.shape) // group.group_size,), f.dtype, f.shape)


@dataclass
class Remote:
    """Named state in remote buffers, a buffer entry per layer, with the graphs that load and store an entry."""

    buffers: NamedRemoteBuffers
    load: addons.GraphWithNamedArgs
    names: list[str]
    store: addons.GraphWithNamedArgs

    @classmethod
    def of(cls, buffers: NamedRemoteBuffers) -> Remote:
        load, names = addons.load_remote_graph(buffers)
        return cls(buffers, load, names, addons.store_remote_graph(buffers))

    def host_bytes(self, sharded: bool = True) -> int:
        """Bytes the buffers hold on each replica's host; with `sharded` False, as if nothing were sharded."""
        total = 0
        for b in self.buffers.values_flat():
            shape = b.tensor_shape if sharded or not b.meta_shape else b.meta_shape
            total += b.entries * math.prod(shape) * b.tensor_dtype.itemsize
        return total

    def loaded(self, row: Row) -> addons.NamedTensors:
        """Entry `row` of every buffer."""
        return addons.NamedTensors.pack(self.names, self.load.call(row))

    def stored(self, tensors: addons.NamedTensors, row: Row) -> None:
        """`tensors` into entry `row` of their buffers."""
        self.store.bind(tensors).call(row)


@dataclass
class Stage:
    """One kind of stage (embeddings, layer, head): its serialised graphs, its remote state (weights, reduced
    gradients and Adam state, each replica-sharded, an entry per layer) and its gradient accumulators."""

    forward: BatchSerialResult
    backward: BatchSerialResult
    weights: Remote
    grads: Remote
    adam: Remote
    gather: tuple[addons.GraphWithNamedArgs, list[str]]
    reduce: tuple[addons.GraphWithNamedArgs, list[str]]
    optimizers: dict[str, Any]
    accums: addons.NamedVariableFactories  # the gradient accumulators, made zero on the device in each phase
    copies: dict[str, int]  # how many replicas hold each element of a weight's shard
    variables: list[addons.NamedTensors] = field(default_factory=list)

    def state_bytes(self, sharded: bool = True) -> int:
        """Host bytes per replica of the stage's remote state (see `Remote.host_bytes`)."""
        return sum(r.host_bytes(sharded) for r in (self.weights, self.grads, self.adam))

    def _gathered(self, row: Row) -> addons.NamedTensors:
        graph, names = self.gather
        return addons.NamedTensors.pack(names, graph.bind(self.weights.loaded(row)).call())

    def forward_phase(self, row: Row) -> None:
        """The stage's forward over every micro-batch, with the weights of layer `row`."""
        self.forward.graph.bind(self._gathered(row)).call(row)

    def backward_phase(self, row: Row, config: Config) -> popxl.Tensor:
        """The gradients over every micro-batch, reduce-scattered over the data-parallel replicas into this
        replica's shards and stored; this replica's part of the squared norm."""
        state = self._gathered(row)
        accums = self.accums.init_zero()
        state.update(accums)
        self.backward.graph.bind(state).call(row)
        graph, names = self.reduce
        grads = addons.NamedTensors.pack(names, graph.bind(accums.get("accum")).call())
        total: popxl.Tensor = popxl.constant(np.float32(0.0))
        for name, grad in grads.to_dict().items():
            square = grad_reduce_square_add(grad, loss_scaling=config.loss_scaling * config.dp)
            total = total + (square * (1 / self.copies[name]) if self.copies[name] > 1 else square)
        self.grads.stored(grads, row)
        return total

    def optimizer_phase(self, row: Row, norm: popxl.Tensor) -> None:
        """An Adam step on this replica's shards of the layer's weights."""
        weights, grads, adam = self.weights.loaded(row), self.grads.loaded(row), self.adam.loaded(row)
        for name, graph in self.optimizers.items():
            graph.bind(adam.get(name)).call(weights.get(name), grads.get(name), norm)
        self.weights.stored(weights, row)
        self.adam.stored(adam, row)


def build_stage(
    module: addons.Module, specs: Sequence[popxl.TensorSpec], rows: int, config: Config, **handles: Any
) -> Stage:
    """A stage serialised over the micro-batches with its state in replica-sharded remote variables, `rows`
    layers of it. `handles` are `serialise_step`'s: where the stage's inputs and output gradient come from, and
    where its output and input gradient go."""
    factories, forward = module.create_graph(*specs)
    serialisation = Serialisation(steps=config.steps, rows=rows, io_mode="io")
    groupings = factories.replica_groupings
    step = serialise_step(forward, serialisation, replica_groupings=groupings, recompute=True, **handles)
    accums = step.accumulators
    accum_inputs = step.gradient_graph.args.get("accum")  # the specs the reduction takes
    groups = shard_groups(factories)
    by_name, group_of = factories.to_dict(), groups.to_dict()
    shard_over = {name: g.group_size for name, g in group_of.items()}
    adam_state = addons.NamedVariableFactories()
    optimizers = {}
    for name, f in by_name.items():
        adam, optimizers[name] = adam_step(shard_spec(f, group_of[name]), f.replica_grouping, config)
        adam_state.insert(name, adam, overwrite=True)  # merges into the subtree of a sibling weight
    weight_buffers = addons.named_variable_buffers(factories, rows, shard_over)
    grad_buffers = addons.named_variable_buffers(accums.get("accum"), rows, shard_over)
    adam_buffers = addons.named_variable_buffers(adam_state, rows, shard_over_dict=False)  # shards have meta shapes
    weights = Remote.of(weight_buffers)
    shards = addons.NamedTensors.pack(weights.names, weights.load.graph.outputs)
    name = type(module).__name__
    stage = Stage(
        step.forward,
        step.gradient,
        weights,
        Remote.of(grad_buffers),
        Remote.of(adam_buffers),
        all_gather_replica_sharded_graph(shards, replica_groups=groups),
        reduce_replica_sharded_graph(accum_inputs, "add", shard_groups=groups, replica_group=Groupings(config).dp),
        optimizers,
        accums,
        {n: config.replicas // (f.replica_grouping.num_groups * group_of[n].group_size) for n, f in by_name.items()},
    )
    for row in range(rows):
        variables = factories.init_remote(weight_buffers, row, prefix=f"{name}{row}")
        variables.insert("adam", adam_state.init_remote(adam_buffers, row, prefix=f"{name}{row}.adam"))
        stage.variables.append(variables)
    return stage
