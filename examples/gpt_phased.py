"""A GPT-style decoder trained phase by phase over 8 replicas: tensor parallel 4 x data parallel 2.

The model (`Config`): a vocabulary-sharded token `Embedding` plus a positional
table, `--layers` pre-norm decoder layers (causal self-attention and a GELU
feed-forward) and a head (a final layer norm and a vocabulary-sharded projection)
trained with the sharded cross-entropy loss on next-token prediction of a
synthetic repeating token pattern.

Parallel layout, as popxl-addons GPT applications lay it out: replica
`r = d * tp + t` is tensor-parallel rank `t` of data-parallel rank `d`. The
tensor-parallel group is `ir.replica_grouping(group_size=tp)`; variables that
differ between its members (the vocabulary shards, the column-sharded QKV and
feed-forward-up Linears, the row-sharded output Linears) have the data-parallel
grouping `ir.replica_grouping(stride=tp, group_size=dp)` (one value per
tensor-parallel rank); layer norms, the positional table and the biases added
after a row-sharded Linear are the same on every replica. Each column-sharded
Linear is entered through `replicated_all_reduce_identical_inputs` and each
row-sharded one left through `replicated_all_reduce_identical_grad_inputs`.

Phased execution with replicated tensor sharding (RTS): every stage's weights,
reduced gradients and Adam state live in remote buffers, one entry per layer, each
replica holding a 1-D shard of each over the weight's RTS group (`shard_groups`:
the weight's own replica group, as popxl-addons' GPT applications choose it: the
data-parallel replicas for a tensor-parallel weight, every replica for a shared
one; a weight that does not divide evenly, or a step count, is not sharded). A
layer's gradient accumulators are made zero on the device in its backward phase,
and live only through it. A training step is

1. forward phases (embedding, each layer, head): load the stage's weight shards,
   all-gather them (`all_gather_replica_sharded_graph`), run the stage
   batch-serialised over the micro-batches, activations through remote buffers;
2. backward phases in reverse (head, layers, embedding): load and gather the
   weights, run the gradient batch-serialised (accumulating a mean over the
   micro-batches; each stage's gradient runs its forward again from the
   stage's input, `recompute_graph`, as Graphcore's GPT applications do, so
   only the activations between stages are stored, not each layer's attention
   scores and feed-forward activations), reduce-scatter the accumulated gradients over the
   data-parallel replicas into shards (`reduce_replica_sharded_graph`; a shared
   weight's is all-reduced, then sliced), add their squared norms
   (`grad_reduce_square_add`) to the step's total, store the shards;
3. the global gradient norm: the total all-reduced over every replica (each
   holds a disjoint part of the square; an unsharded copy counts a share);
4. optimizer phases: load each stage's weight, gradient and Adam shards, an Adam
   step per shard clipped by the global norm, store the weights and Adam state.

The decoder layers' phases of each kind are one loop (`over_layers`: `ops.repeat`
of a graph taking the layer index, a tensor that picks the layer's remote buffer
entries), as Graphcore's GPT applications loop over their layers: the program
holds one layer's phases whatever the number of layers, so XLA compiles the
same program, in the same time, for 1 layer or 48.

The un-phased program is the same model on the same replicas with every weight on
the device and the whole batch at once; both train from the same weights on the
same data and their losses agree to float tolerance.

The example prints both programs' device and host bytes per replica (the
Session's `memory_analysis`) and the host bytes of the phased program's remote
state, sharded and as it would be unsharded.
"""

from __future__ import annotations

import argparse
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import jax
import numpy as np

import popxl
import popxl_addons as addons
from popxl import ops
from popxl_addons.core.planning import Serialisation, serialise_step
from popxl_addons.layers import Embedding, LayerNorm, Linear
from popxl_addons.named_replica_grouping import NamedReplicaGrouping
from popxl_addons.ops.cross_entropy_sharded_loss import cross_entropy_sharded_loss
from popxl_addons.ops.grad_reduce_square_add import grad_reduce_square_add
from popxl_addons.ops.replicated_all_reduce_TP import (
    replicated_all_reduce_identical_grad_inputs,
    replicated_all_reduce_identical_inputs,
)
from popxl_addons.patterns import apply_pre_alias_patterns
from popxl_addons.remote import NamedRemoteBuffers
from popxl_addons.rts import all_gather_replica_sharded_graph, reduce_replica_sharded_graph
from popxl_addons.transforms.batch_serialisation import BatchSerialResult, RemoteHandle, batch_serial_buffer

Array = np.ndarray[Any, Any]
Row = int | popxl.Tensor  # a layer's entry in its stage's remote buffers: fixed, or the layer loop's counter

jax.config.update("jax_num_cpu_devices", 8)  # before JAX initialises: one CPU device per replica


@dataclass(frozen=True)
class Config:
    """The model, the replica layout and the training run."""

    vocab: int = 128
    width: int = 32
    heads: int = 4
    layers: int = 2
    sequence: int = 16
    tp: int = 4
    dp: int = 2
    micro: int = 4  # sequences per micro-batch and replica
    steps: int = 2  # micro-batches per training step
    training_steps: int = 8
    lr: float = 1e-2
    clip: float = 1.0  # the global gradient norm's limit
    init_std: float = 0.05
    seed: int = 0
    float16: bool = True

    @property
    def replicas(self) -> int:
        return self.tp * self.dp

    @property
    def dtype(self) -> popxl.dtype:
        return popxl.float16 if self.float16 else popxl.float32

    @property
    def loss_scaling(self) -> float:
        return 256.0 if self.float16 else 1.0

    @property
    def batch(self) -> int:
        """Sequences per training step and data-parallel replica."""
        return self.micro * self.steps


class Groupings:
    """The replica groupings: over the tensor-parallel members, and the data-parallel one of sharded variables."""

    def __init__(self, config: Config) -> None:
        ir = popxl.gir()
        self.dp = ir.replica_grouping(stride=config.tp, group_size=config.dp)
        self.tp = self.dp.transpose()


# ---- The model ------------------------------------------------------------------------------------------------


class Embeddings(addons.Module):
    """Token embedding (vocabulary sharded over the tensor-parallel replicas) plus a positional table."""

    def __init__(self, config: Config) -> None:
        super().__init__()
        self.config = config
        self.groups = Groupings(config)
        self.word = Embedding(config.dtype, config.vocab, config.width, replica_grouping=self.groups.dp)

    def build(self, tokens: popxl.Tensor) -> popxl.Tensor:
        """(micro, sequence) tokens less this replica's vocabulary offset -> (micro, sequence, width)."""
        x = replicated_all_reduce_identical_grad_inputs(self.word(tokens), group=self.groups.tp)
        shape = (self.config.sequence, self.config.width)
        pos = self.add_variable_input("positional", lambda: np.zeros(shape), x.dtype)
        return x + pos


class Attention(addons.Module):
    """Causal self-attention with this replica's heads: column-sharded QKV, row-sharded output."""

    def __init__(self, config: Config) -> None:
        super().__init__()
        self.config = config
        self.groups = Groupings(config)
        self.local_heads = config.heads // config.tp
        self.qkv = Linear(3 * config.width // config.tp, replica_grouping=self.groups.dp)
        self.out = Linear(config.width, bias=False, replica_grouping=self.groups.dp)

    def build(self, x: popxl.Tensor) -> popxl.Tensor:
        micro, seq, width = x.shape
        head = width // self.config.heads
        x = replicated_all_reduce_identical_inputs(x, group=self.groups.tp)
        q, k, v = ops.split(self.qkv(x), 3, axis=-1)

        def heads(t: popxl.Tensor) -> popxl.Tensor:
            return ops.transpose(ops.reshape(t, (micro, seq, self.local_heads, head)), (0, 2, 1, 3))

        q, k, v = heads(q), heads(k), heads(v)
        scores = ops.cast(ops.matmul(q, ops.transpose(k, (0, 1, 3, 2))), popxl.float32) * (1 / math.sqrt(head))
        mask = popxl.constant(np.triu(np.full((seq, seq), -1e4, np.float32), 1), popxl.float32)
        probs = ops.cast(ops.softmax(scores + mask, axis=-1), x.dtype)
        z = ops.transpose(ops.matmul(probs, v), (0, 2, 1, 3))
        z = self.out(ops.reshape(z, (micro, seq, self.local_heads * head)))
        z = replicated_all_reduce_identical_grad_inputs(z, group=self.groups.tp)
        bias = self.add_variable_input("bias", lambda: np.zeros(width), z.dtype)
        return z + bias


class FeedForward(addons.Module):
    """A GELU MLP of four times the width: column-sharded up, row-sharded down."""

    def __init__(self, config: Config) -> None:
        super().__init__()
        self.groups = Groupings(config)
        self.up = Linear(4 * config.width // config.tp, replica_grouping=self.groups.dp)
        self.down = Linear(config.width, bias=False, replica_grouping=self.groups.dp)

    def build(self, x: popxl.Tensor) -> popxl.Tensor:
        x = replicated_all_reduce_identical_inputs(x, group=self.groups.tp)
        z = replicated_all_reduce_identical_grad_inputs(self.down(ops.gelu(self.up(x))), group=self.groups.tp)
        bias = self.add_variable_input("bias", lambda: np.zeros(z.shape[-1]), z.dtype)
        return z + bias


class DecoderLayer(addons.Module):
    """Pre-norm: x + attention(ln1(x)), then + feed_forward(ln2(x))."""

    def __init__(self, config: Config) -> None:
        super().__init__()
        self.ln1, self.ln2 = LayerNorm(), LayerNorm()
        self.attention = Attention(config)
        self.feed_forward = FeedForward(config)

    def build(self, x: popxl.Tensor) -> popxl.Tensor:
        rows = (x.shape[0] * x.shape[1], x.shape[2])
        x = x + self.attention(ops.reshape(self.ln1(ops.reshape(x, rows)), x.shape))
        return x + self.feed_forward(ops.reshape(self.ln2(ops.reshape(x, rows)), x.shape))


class Head(addons.Module):
    """Final layer norm, the vocabulary-sharded logits and the sharded cross-entropy (float32) of a micro-batch."""

    def __init__(self, config: Config) -> None:
        super().__init__()
        self.groups = Groupings(config)
        self.ln = LayerNorm()
        self.logits = Linear(config.vocab // config.tp, bias=False, replica_grouping=self.groups.dp)

    def build(self, x: popxl.Tensor, labels: popxl.Tensor) -> popxl.Tensor:
        """(micro, sequence, width), (micro * sequence,) labels less this replica's vocabulary offset -> loss."""
        h = self.ln(ops.reshape(x, (x.shape[0] * x.shape[1], x.shape[2])))
        h = replicated_all_reduce_identical_inputs(h, group=self.groups.tp)
        logits = ops.cast(self.logits(h), popxl.float32)
        return cross_entropy_sharded_loss(logits, labels, replica_grouping=self.groups.tp)


class GPT(addons.Module):
    """The whole model, for the un-phased program."""

    def __init__(self, config: Config) -> None:
        super().__init__()
        self.embeddings = Embeddings(config)
        self.layers = [DecoderLayer(config) for _ in range(config.layers)]
        for i, layer in enumerate(self.layers):
            setattr(self, f"layer{i}", layer)
        self.head = Head(config)

    def build(self, tokens: popxl.Tensor, labels: popxl.Tensor) -> popxl.Tensor:
        x = self.embeddings(tokens)
        for layer in self.layers:
            x = layer(x)
        loss: popxl.Tensor = self.head(x, labels)
        return loss


# ---- The optimizer --------------------------------------------------------------------------------------------


def _tp_sharded(factory: addons.VariableFactory) -> bool:
    """Whether the tensor-parallel replicas hold different parts of this weight."""
    return bool(factory.replica_grouping.num_groups > 1)


def _reduce_and_square(
    grads: dict[str, popxl.Tensor], factories: dict[str, addons.VariableFactory], config: Config
) -> popxl.Tensor:
    """All-reduce each gradient over the data-parallel replicas in place; this replica's part of the squared norm.

    A weight the tensor-parallel replicas share counts 1/tp on each, so that summing over them counts it once.
    """
    groups = Groupings(config)
    total = popxl.constant(np.float32(0.0))
    for name, grad in grads.items():
        ops.collectives.replicated_all_reduce_(grad, "add", group=groups.dp)
        square = grad_reduce_square_add(grad, loss_scaling=config.loss_scaling * config.dp)
        total = total + (square if _tp_sharded(factories[name]) else square * (1 / config.tp))
    return total


def _global_norm(total: popxl.Tensor, group: popxl.ReplicaGrouping) -> popxl.Tensor:
    """The gradient norm from each replica's part of its square, summed over `group`."""
    return ops.sqrt(ops.collectives.replicated_all_reduce(total, "add", group=group))


def _adam(
    var: popxl.TensorSpec, grouping: popxl.ReplicaGrouping, config: Config
) -> tuple[addons.NamedVariableFactories, Any]:
    """The Adam step graph of one weight or shard of it: the loss scale and the sum over data-parallel
    replicas divided out. A shard (`var` with a meta shape) gets moments sharded alike."""
    state, graph = addons.optimizers.adam.AdamOptimizerStep().create_graph(
        var,
        var,
        grouping,
        lr=config.lr,
        weight_decay=0.0,
        first_order_dtype=config.dtype,
        loss_scaling=config.loss_scaling * config.dp,
        global_norm=popxl.TensorSpec((), popxl.float32),
        global_norm_max=config.clip,
    )
    return state, graph


# ---- Phased ---------------------------------------------------------------------------------------------------


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


def _shard_spec(f: addons.VariableFactory, group: popxl.ReplicaGrouping) -> popxl.TensorSpec:
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
        total = popxl.constant(np.float32(0.0))
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
        adam, optimizers[name] = _adam(_shard_spec(f, group_of[name]), f.replica_grouping, config)
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


def over_layers(body: Callable[..., Any], layers: int, first: int, *inputs: popxl.Tensor) -> tuple[popxl.Tensor, ...]:
    """`body(row, *inputs)` for `layers` rows from `first`, as one `ops.repeat` of one graph; its outputs after the
    loop, less the row.

    `body` returns the next row, then the new values of the first inputs it carries to the next layer. The
    program holds the layer's phase once whatever the number of layers, so it compiles in the same time; the
    row, a tensor, picks each layer's entry of the remote buffers.
    """
    row = popxl.constant(np.int32(first), popxl.int32, "layer")
    graph = popxl.gir().create_graph(body, row, *inputs)
    return ops.repeat(graph, layers, row, *inputs)[1:]


def phased_program(config: Config) -> tuple[popxl.Ir, dict[str, Any], list[Stage]]:
    """One Session.run = one training step, phase by phase."""
    ir = popxl.Ir(replication=config.replicas)
    ir.session_options.numIOTiles = 32
    steps, micro, seq, width = config.steps, config.micro, config.sequence, config.width
    with ir.main_graph, popxl.in_sequence(True):
        tokens = popxl.h2d_stream((micro, seq), popxl.int32, "tokens")
        labels = popxl.h2d_stream((micro * seq,), popxl.int32, "labels")
        loss = popxl.d2h_stream((), popxl.float32, "loss")
        act = popxl.TensorSpec((micro, seq, width), config.dtype)
        # Row r of the boundary buffers holds what enters layer r (row `layers` enters the head).
        acts = batch_serial_buffer(act, steps, rows=config.layers + 1)
        grads = batch_serial_buffer(act, steps, rows=config.layers + 1)
        seeds = batch_serial_buffer(popxl.TensorSpec((), popxl.float32), steps)
        for j in range(steps):
            ops.remote_store(seeds, j, popxl.constant(np.float32(config.loss_scaling)))
        embed = build_stage(
            Embeddings(config), [tokens.spec], 1, config,
            inputs=[tokens], outputs=[RemoteHandle(acts, 0)], output_gradients=[RemoteHandle(grads, 0)],
        )  # fmt: skip
        layer = build_stage(
            DecoderLayer(config), [act], config.layers, config,
            inputs=[RemoteHandle(acts, 0)], outputs=[RemoteHandle(acts, 1)],
            output_gradients=[RemoteHandle(grads, 1)], input_gradient=RemoteHandle(grads, 0),
        )  # fmt: skip
        head = build_stage(
            Head(config), [act, labels.spec], 1, config,
            inputs=[RemoteHandle(acts, config.layers), labels], outputs=[loss],
            output_gradients=[RemoteHandle(seeds, 0)], input_gradient=RemoteHandle(grads, config.layers),
        )  # fmt: skip
        embed.forward_phase(0)

        def forward(row: popxl.Tensor) -> popxl.Tensor:
            layer.forward_phase(row)
            return row + 1

        over_layers(forward, config.layers, 0)
        head.forward_phase(0)
        total = head.backward_phase(0, config)

        def backward(row: popxl.Tensor, total: popxl.Tensor) -> tuple[popxl.Tensor, popxl.Tensor]:
            return row - 1, total + layer.backward_phase(row, config)

        (total,) = over_layers(backward, config.layers, config.layers - 1, total)
        total = total + embed.backward_phase(0, config)
        norm = _global_norm(total, ir.replica_grouping())  # each replica holds a disjoint part of the square
        embed.optimizer_phase(0, norm)

        def optimizer(row: popxl.Tensor, norm: popxl.Tensor) -> popxl.Tensor:
            layer.optimizer_phase(row, norm)
            return row + 1

        over_layers(optimizer, config.layers, 0, norm)
        head.optimizer_phase(0, norm)
    ir.num_host_transfers = steps
    apply_pre_alias_patterns(ir)
    return ir, {"tokens": tokens, "labels": labels, "loss": loss}, [embed, layer, head]


def _phased_variable(stages: Sequence[Stage], name: str) -> popxl.Variable:
    """The phased program's variable holding the un-phased weight `name`."""
    first, _, rest = name.partition(".")
    if first == "embeddings":
        return stages[0].variables[0].get(rest)  # type: ignore[no-any-return]
    if first == "head":
        return stages[2].variables[0].get(rest)  # type: ignore[no-any-return]
    return stages[1].variables[int(first.removeprefix("layer"))].get(rest)  # type: ignore[no-any-return]


# ---- Un-phased ------------------------------------------------------------------------------------------------


def unphased_program(config: Config) -> tuple[popxl.Ir, dict[str, Any], addons.NamedTensors]:
    """One Session.run = one training step over the whole batch, every weight on the device."""
    ir = popxl.Ir(replication=config.replicas)
    rows = config.batch
    with ir.main_graph, popxl.in_sequence(True):
        tokens = popxl.h2d_stream((rows, config.sequence), popxl.int32, "tokens")
        labels = popxl.h2d_stream((rows * config.sequence,), popxl.int32, "labels")
        loss = popxl.d2h_stream((), popxl.float32, "loss")
        factories, graph = GPT(config).create_graph(tokens.spec, labels.spec)
        weights = factories.init()
        grad = addons.autodiff(graph, grads_required=graph.args.tensors)
        site = graph.bind(weights).call_with_info(ops.host_load(tokens), ops.host_load(labels))
        ops.host_store(loss, site.outputs[0])
        seed = popxl.constant(np.float32(config.loss_scaling))
        outputs = grad.call(seed, args=grad.grad_graph_info.inputs_dict(site))
        names = {id(t): name for name, t in graph.args.to_dict().items()}
        by_name = {names[id(t)]: g for t, g in zip(grad.grad_graph_info.outputs, outputs)}
        by_factory = factories.to_dict()
        norm = _global_norm(_reduce_and_square(by_name, by_factory, config), Groupings(config).tp)
        for name, w in weights.to_dict().items():
            f = by_factory[name]
            adam, step = _adam(popxl.TensorSpec(f.shape, f.dtype), f.replica_grouping, config)
            step.bind(adam.init(prefix=f"adam.{name}")).call(w, by_name[name], norm)
    apply_pre_alias_patterns(ir)
    return ir, {"tokens": tokens, "labels": labels, "loss": loss}, weights


# ---- Data, weights and running --------------------------------------------------------------------------------


def synthetic_batches(config: Config) -> list[tuple[Array, Array]]:
    """Per training step, (dp, batch, sequence + 1) tokens: runs of a repeating pattern from random starts."""
    rng = np.random.default_rng(config.seed)
    pattern = rng.permutation(config.vocab)[:24]  # next token = the pattern's next, cyclically
    out = []
    for _ in range(config.training_steps):
        starts = rng.integers(0, len(pattern), (config.dp, config.batch, 1))
        index = (starts + np.arange(config.sequence + 1)) % len(pattern)
        data = pattern[index].astype(np.int32)
        out.append((data[..., :-1], data[..., 1:]))
    return out


def per_replica(config: Config, tokens: Array, labels: Array) -> tuple[Array, Array]:
    """Each replica's (dp * tp, ...) inputs: its data-parallel rank's samples less its vocabulary shard's offset."""
    offsets = Embedding.get_offsets(config.vocab, config.tp)
    shard = config.vocab // config.tp
    t = np.repeat(tokens, config.tp, axis=0) - np.tile(offsets, config.dp)[:, None, None]
    y = np.repeat(labels, config.tp, axis=0) - (np.tile(np.arange(config.tp), config.dp) * shard)[:, None, None]
    return t.astype(np.int32), y.astype(np.int32)


def initial_weights(config: Config) -> dict[str, Array]:
    """The starting weights by the un-phased model's names, with a leading group axis where the tp ranks differ."""
    rng = np.random.default_rng(config.seed + 1)
    ir = popxl.Ir(replication=config.replicas)
    with ir.main_graph:
        factories, _ = GPT(config).create_graph(
            popxl.TensorSpec((config.batch, config.sequence), popxl.int32),
            popxl.TensorSpec((config.batch * config.sequence,), popxl.int32),
        )
    out = {}
    for name, f in factories.to_dict().items():
        groups = f.replica_grouping.num_groups
        shape = (groups, *f.shape) if groups > 1 else tuple(f.shape)
        is_norm = name.rpartition(".")[0].rpartition(".")[2] in ("ln", "ln1", "ln2")
        if is_norm and name.endswith("weight"):
            value = np.ones(shape, np.float32)
        elif name.endswith("bias"):
            value = np.zeros(shape, np.float32)
        else:
            value = rng.normal(0, config.init_std, shape).astype(np.float32)
        out[name] = value.astype(config.dtype.as_numpy())
    return out


def phased_feeds(
    config: Config, session: popxl.Session, streams: dict[str, Any], tokens: Array, labels: Array
) -> dict[Any, Array]:
    """The phased program's host data for one training step of `synthetic_batches`."""
    t, y = per_replica(config, tokens, labels)  # (replicas, batch, ...) -> (steps, replicas, micro, ...)
    t = t.reshape(config.replicas, config.steps, config.micro, config.sequence).swapaxes(0, 1)
    y = y.reshape(config.replicas, config.steps, config.micro * config.sequence).swapaxes(0, 1)
    # As in popxl, a single transfer (one micro-batch a step) takes no transfers axis.
    t = t.reshape(session.host_layout.shape(streams["tokens"].shape))
    y = y.reshape(session.host_layout.shape(streams["labels"].shape))
    return {streams["tokens"]: t, streams["labels"]: y}


def make_session(ir: popxl.Ir, config: Config) -> popxl.Session:
    """A CPU Session of `ir`: a JAX device per replica where there are enough, else replicas simulated on one."""
    mode = "devices" if jax.device_count() >= config.replicas else "simulate"
    return popxl.Session(ir, "cpu", replica_mode=mode)


def train(config: Config) -> dict[str, Any]:
    """Train both programs on the same data from the same weights; their losses, memory figures and run times."""
    data = synthetic_batches(config)
    start = initial_weights(config)
    phased_ir, phased_streams, stages = phased_program(config)
    plain_ir, plain_streams, plain_weights = unphased_program(config)
    phased, plain = make_session(phased_ir, config), make_session(plain_ir, config)
    phased.write_variables_data({_phased_variable(stages, n): v for n, v in start.items()})
    plain.write_variables_data({plain_weights.get(n): v for n, v in start.items()})

    def feeds_phased(tokens: Array, labels: Array) -> dict[Any, Array]:
        return phased_feeds(config, phased, phased_streams, tokens, labels)

    def feeds_plain(tokens: Array, labels: Array) -> dict[Any, Array]:
        t, y = per_replica(config, tokens, labels)
        return {plain_streams["tokens"]: t, plain_streams["labels"]: y.reshape(config.replicas, -1)}

    curves: dict[str, list[float]] = {"phased": [], "unphased": []}
    seconds = {"phased": 0.0, "unphased": 0.0}
    with phased, plain:
        for tokens, labels in data:
            begin = time.perf_counter()
            out = phased.run(feeds_phased(tokens, labels))
            seconds["phased"] += time.perf_counter() - begin
            curves["phased"].append(float(np.mean(out[phased_streams["loss"]])))
            begin = time.perf_counter()
            out = plain.run(feeds_plain(tokens, labels))
            seconds["unphased"] += time.perf_counter() - begin
            curves["unphased"].append(float(np.mean(out[plain_streams["loss"]])))
        memory = {
            "phased": phased.memory_analysis(feeds_phased(*data[0])),
            "unphased": plain.memory_analysis(feeds_plain(*data[0])),
        }
        # The trained weights, read back whole from the phased program's shards, against the un-phased ones.
        weights = {n: (_phased_variable(stages, n), plain_weights.get(n)) for n in start}
        got = phased.get_tensors_data([a for a, _ in weights.values()])
        want = plain.get_tensors_data([b for _, b in weights.values()])
    differences = {n: float(np.max(np.abs(got[a].astype(np.float32) - want[b]))) for n, (a, b) in weights.items()}
    state = {"sharded": sum(s.state_bytes() for s in stages), "unsharded": sum(s.state_bytes(False) for s in stages)}
    return {
        "curves": curves,
        "memory": memory,
        "seconds": seconds,
        "state_bytes": state,
        "weight_differences": differences,
    }


def main() -> None:
    """Train both programs and print the losses, the memory figures and the run times."""
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--steps", type=int, default=Config.training_steps, help="training steps")
    p.add_argument("--layers", type=int, default=Config.layers, help="decoder layers")
    p.add_argument("--micro-batches", type=int, default=Config.steps, help="micro-batches per training step")
    p.add_argument("--float32", action="store_true", help="train in float32 (default: float16, loss scaling)")
    args = p.parse_args()
    config = Config(training_steps=args.steps, layers=args.layers, steps=args.micro_batches)
    config = replace(config, float16=not args.float32)
    begin = time.perf_counter()
    result = train(config)
    curves = result["curves"]
    print(f"GPT: vocab {config.vocab}, width {config.width}, {config.layers} layers, sequence {config.sequence}, "
          f"tp {config.tp} x dp {config.dp}, {config.dtype}")  # fmt: skip
    print("step  phased   un-phased")
    for i, (a, b) in enumerate(zip(curves["phased"], curves["unphased"])):
        print(f"{i:4d}  {a:.5f}  {b:.5f}")
    worst = max(abs(a - b) for a, b in zip(curves["phased"], curves["unphased"]))
    differences = result["weight_differences"]
    name = max(differences, key=differences.__getitem__)
    print(f"largest difference between the losses: {worst:.2e}, the trained weights: {differences[name]:.2e} ({name})")
    for name, figures in result["memory"].items():
        device, host = figures["device_bytes"] / 2**10, figures["host_bytes"] / 2**10
        run = result["seconds"][name]
        print(f"{name:9s} device {device:8.1f} KiB, host {host:8.1f} KiB per replica; {run:.1f} s running")
    state = result["state_bytes"]
    print(f"phased remote state (weights, gradients, Adam) {state['sharded'] / 2**10:.1f} KiB per replica, "
          f"{state['unsharded'] / 2**10:.1f} KiB unsharded")  # fmt: skip
    print(f"total {time.perf_counter() - begin:.1f} s")


if __name__ == "__main__":
    main()
