"""Phased training of a small transformer classifier on scikit-learn's digits, with batch serialisation.

Each 8x8 digit is a sequence of 8 tokens (its rows). The model is an embedding,
`--layers` transformer blocks (single-head attention and an MLP, each residual)
and a head (mean over tokens, then a linear layer to 10 classes).

Phased execution, as popxl-addons users build it:

- every stage's weights, gradient accumulators and Adam state are remote
  variables: one buffer entry per block, so the device holds one stage at a time;
- a phase loads one stage's state, runs the stage batch-serialised over the
  micro-batches (activations through remote buffers), and stores the state back;
- the backward phases run in reverse, each ending with the stage's Adam step.

The same model trained un-phased (weights on the device, the whole batch at
once) gives the same loss curve to float tolerance; the script prints both,
writes a PNG of both curves and reports each program's device and host memory.

With `--float16` both programs train as popxl users train: float16 weights,
activations and gradient accumulators, the loss computed in float32 from
float16 logits, a loss scale on the loss gradient that Adam divides out, and
Adam's second moment in float32 (its first moment in float16, popxl-addons'
default).
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Sequence
from contextlib import nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

import popxl
from popxl import ops
from popxl_addons.core import (
    AdamOptimizerStep,
    BatchSerialResult,
    GraphWithNamedArgs,
    Module,
    NamedTensors,
    NamedVariableFactories,
    RemoteHandle,
    batch_serial_buffer,
    load_remote_graph,
    named_variable_buffers,
    store_remote_graph,
)
from popxl_addons.core.training import Serialisation, serialise_step
from popxl_addons.layers import LayerNorm, Linear

TOKENS, PIXELS, CLASSES = 8, 8, 10
Array = np.ndarray[Any, Any]


@dataclass(frozen=True)
class Config:
    """The model and the training run."""

    width: int = 32
    layers: int = 2
    batch: int = 128
    steps: int = 4  # micro-batches per training step
    training_steps: int = 30
    lr: float = 3e-3
    seed: int = 0
    float16: bool = False
    init_std: float = 0.2  # of the matrices; GPT-style models start at 0.02

    @property
    def dtype(self) -> popxl.dtype:
        """The dtype of the weights, activations and gradients."""
        return popxl.float16 if self.float16 else popxl.float32

    @property
    def loss_scaling(self) -> float:
        """The loss gradient's scale, which keeps small float16 gradients from flushing to zero."""
        return 1024.0 if self.float16 else 1.0

    @property
    def first_order_dtype(self) -> popxl.dtype:
        """Adam's first moment: float16 when training in float16, as popxl-addons keeps it by default."""
        return popxl.float16 if self.float16 else popxl.float32

    @property
    def micro(self) -> int:
        """Samples per micro-batch."""
        return self.batch // self.steps


class Embed(Module):
    """Each token (a row of pixels) to the model width."""

    def __init__(self, width: int) -> None:
        super().__init__()
        self.linear = Linear(width)

    def build(self, x: popxl.Tensor) -> popxl.Tensor:
        """(micro, tokens, pixels) -> (micro, tokens, width)."""
        y: popxl.Tensor = self.linear(x)
        return y


class Block(Module):
    """A pre-norm transformer block: single-head attention, then an MLP, each added to its input."""

    def __init__(self, width: int) -> None:
        super().__init__()
        self.width = width
        self.ln1, self.ln2 = LayerNorm(), LayerNorm()
        self.q, self.k, self.v, self.o = Linear(width), Linear(width), Linear(width), Linear(width)
        self.up, self.down = Linear(4 * width), Linear(width)

    def build(self, x: popxl.Tensor) -> popxl.Tensor:
        """(micro, tokens, width) -> (micro, tokens, width)."""
        micro, tokens, width = x.shape
        rows = (micro * tokens, width)
        h = ops.reshape(self.ln1(ops.reshape(x, rows)), x.shape)
        scores = ops.matmul(self.q(h), ops.transpose(self.k(h), (0, 2, 1))) * (1.0 / math.sqrt(width))
        attended = ops.matmul(ops.softmax(scores, axis=-1), self.v(h))
        x = x + self.o(attended)
        h = self.ln2(ops.reshape(x, rows))
        return x + ops.reshape(self.down(ops.gelu(self.up(h))), x.shape)


class Head(Module):
    """The mean over tokens, the class logits, and the mean cross-entropy of a micro-batch."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = Linear(CLASSES)

    def build(self, x: popxl.Tensor, labels: popxl.Tensor) -> popxl.Tensor:
        """(micro, tokens, width), (micro,) -> () float32 loss."""
        logits = ops.cast(self.linear(ops.mean(x, axis=1)), popxl.float32)
        hot = ops.onehot(labels, CLASSES, popxl.constant(np.asarray([0.0, 1.0], np.float32)), axis=-1)
        picked = ops.sum(logits * hot, axis=1)
        return ops.mean(ops.logsumexp(logits, axis=1) - picked)


def digits(config: Config) -> tuple[Array, Array]:
    """scikit-learn's digits as (samples, tokens, pixels) in [0, 1] and int32 labels, shuffled."""
    from sklearn.datasets import load_digits  # type: ignore[import-untyped]

    data = load_digits()
    images = (data.images / 16.0).astype(np.float32)
    order = np.random.default_rng(config.seed).permutation(len(images))
    return images[order], data.target[order].astype(np.int32)


def batches(config: Config, images: Array, labels: Array) -> list[tuple[Array, Array]]:
    """One (images, labels) batch per training step, cycling through the data."""
    out = []
    for step in range(config.training_steps):
        index = (np.arange(config.batch) + step * config.batch) % len(images)
        out.append((images[index], labels[index]))
    return out


# ---- Phased ---------------------------------------------------------------------------------------------------


@dataclass
class Stage:
    """One kind of stage (embed, block or head): its serialised graphs and its state, one buffer entry per layer."""

    weights: NamedVariableFactories
    forward: BatchSerialResult
    backward: BatchSerialResult
    state: NamedVariableFactories
    optimizers: dict[str, GraphWithNamedArgs]
    load: GraphWithNamedArgs
    names: list[str]
    store: GraphWithNamedArgs
    variables: list[NamedTensors] = field(default_factory=list)

    def forward_phase(self, row: int) -> None:
        """Load layer `row`'s state and run its forward over every micro-batch."""
        state = NamedTensors.pack(self.names, self.load.call(row))
        self.forward.graph.bind(state).call(row)

    def backward_phase(self, row: int) -> None:
        """Load layer `row`'s state, run its backward over every micro-batch, step Adam, store the state back."""
        state = NamedTensors.pack(self.names, self.load.call(row))
        self.backward.graph.bind(state).call(row)
        for name, graph in self.optimizers.items():
            graph.bind(state.get(f"adam.{name}")).call(state.get(name), state.get(f"accum.{name}"))
        for accum in state.get("accum").values_flat():
            ops.var_updates.accumulator_zero_(accum)
        ops.var_updates.accumulator_zero_(state.get("mean_accum_counter"))
        self.store.bind(state).call(row)


def _optimizers(weights: NamedVariableFactories, config: Config) -> tuple[NamedVariableFactories, dict[str, Any]]:
    """One Adam step graph per weight, and the Adam state of all of them under `adam.<weight name>`."""
    state = NamedVariableFactories()
    graphs = {}
    for name, factory in weights.to_dict().items():
        spec = popxl.TensorSpec(factory.shape, factory.dtype)
        adam, graph = _adam_step(spec, config)
        graphs[name] = graph
        state.insert(f"adam.{name}", adam, overwrite=True)
    return state, graphs


def _adam_step(spec: popxl.TensorSpec, config: Config) -> tuple[NamedVariableFactories, GraphWithNamedArgs]:
    """The Adam step graph of one weight, dividing out the loss scale."""
    return AdamOptimizerStep().create_graph(
        spec,
        spec,
        lr=config.lr,
        weight_decay=0.0,
        first_order_dtype=config.first_order_dtype,
        loss_scaling=config.loss_scaling,
    )


def build_stage(module: Module, specs: Sequence[popxl.TensorSpec], rows: int, config: Config, **handles: Any) -> Stage:
    """A stage's graphs serialised over the micro-batches, with its state in remote variables, `rows` layers of it.

    `handles` are `serialise_step`'s: where the stage's inputs and output gradient come from, and where its
    output and input gradient go.
    """
    weights, forward = module.create_graph(*specs)
    step = serialise_step(forward, Serialisation(steps=config.steps, rows=rows, io_mode="io"), **handles)
    adam, optimizers = _optimizers(weights, config)
    state = weights.copy()
    state.update(step.accumulators.copy())
    state.update(adam)
    buffers = named_variable_buffers(state, rows, shard_over_dict=False)
    load, names = load_remote_graph(buffers)
    stage = Stage(weights, step.forward, step.gradient, state, optimizers, load, names, store_remote_graph(buffers))
    stage.variables = [state.init_remote(buffers, row, prefix=f"{type(module).__name__}{row}") for row in range(rows)]
    return stage


def phased_program(config: Config) -> tuple[popxl.Ir, dict[str, Any], list[Stage]]:
    """One Session.run = one training step over `config.batch` samples, phase by phase."""
    ir = popxl.Ir()
    ir.session_options.numIOTiles = 32
    steps, micro, width, layers = config.steps, config.micro, config.width, config.layers
    with ir.main_graph, popxl.in_sequence(True):
        x_stream = popxl.h2d_stream((micro, TOKENS, PIXELS), config.dtype, "x")
        label_stream = popxl.h2d_stream((micro,), popxl.int32, "labels")
        loss_stream = popxl.d2h_stream((), popxl.float32, "loss")
        act = popxl.TensorSpec((micro, TOKENS, width), config.dtype)
        # Boundary activations and their gradients: row r holds what enters block r (row L enters the head).
        acts = batch_serial_buffer(act, steps, rows=layers + 1)
        grads = batch_serial_buffer(act, steps, rows=layers + 1)
        # The loss's (scaled) gradient for each micro-batch: the accumulators keep means over the micro-batches.
        seeds = batch_serial_buffer(popxl.TensorSpec((), popxl.float32), steps)
        for j in range(steps):
            ops.remote_store(seeds, j, popxl.constant(np.float32(config.loss_scaling)))
        embed = build_stage(
            Embed(width), [x_stream.spec], 1, config,
            inputs=[x_stream], outputs=[RemoteHandle(acts, 0)], output_gradients=[RemoteHandle(grads, 0)],
        )  # fmt: skip
        # Called with row l, a block reads row l of the boundary buffers and writes row l + 1.
        block = build_stage(
            Block(width), [act], layers, config,
            inputs=[RemoteHandle(acts, 0)], outputs=[RemoteHandle(acts, 1)],
            output_gradients=[RemoteHandle(grads, 1)], input_gradient=RemoteHandle(grads, 0),
        )  # fmt: skip
        head = build_stage(
            Head(), [act, label_stream.spec], 1, config,
            inputs=[RemoteHandle(acts, layers), label_stream], outputs=[loss_stream],
            output_gradients=[RemoteHandle(seeds, 0)], input_gradient=RemoteHandle(grads, layers),
        )  # fmt: skip
        embed.forward_phase(0)
        for layer in range(layers):
            block.forward_phase(layer)
        head.forward_phase(0)
        head.backward_phase(0)
        for layer in reversed(range(layers)):
            block.backward_phase(layer)
        embed.backward_phase(0)
    ir.num_host_transfers = steps
    return ir, {"x": x_stream, "labels": label_stream, "loss": loss_stream}, [embed, block, head]


# ---- Un-phased ------------------------------------------------------------------------------------------------


class Classifier(Module):
    """The whole model over a whole batch, for the un-phased program."""

    def __init__(self, config: Config) -> None:
        super().__init__()
        self.embed = Embed(config.width)
        self.blocks = [Block(config.width) for _ in range(config.layers)]
        for i, b in enumerate(self.blocks):
            setattr(self, f"block{i}", b)
        self.head = Head()

    def build(self, x: popxl.Tensor, labels: popxl.Tensor) -> popxl.Tensor:
        """The mean loss of the batch."""
        h = self.embed(x)
        for b in self.blocks:
            h = b(h)
        loss: popxl.Tensor = self.head(h, labels)
        return loss


def unphased_program(config: Config) -> tuple[popxl.Ir, dict[str, Any], NamedTensors]:
    """One Session.run = one training step over the whole batch, every weight on the device."""
    ir = popxl.Ir()
    with ir.main_graph, popxl.in_sequence(True):
        x_stream = popxl.h2d_stream((config.batch, TOKENS, PIXELS), config.dtype, "x")
        label_stream = popxl.h2d_stream((config.batch,), popxl.int32, "labels")
        loss_stream = popxl.d2h_stream((), popxl.float32, "loss")
        factories, graph = Classifier(config).create_graph(x_stream.spec, label_stream.spec)
        weights = factories.init()
        grad = graph.autodiff(grads_required=graph.args.tensors)
        x, labels = ops.host_load(x_stream), ops.host_load(label_stream)
        site = graph.bind(weights).call_with_info(x, labels)
        ops.host_store(loss_stream, site.outputs[0])
        seed = popxl.constant(np.float32(config.loss_scaling))
        grads = grad.call(seed, args=grad.grad_graph_info.inputs_dict(site))
        by_name = {_name_in(graph.args, t): g for t, g in zip(grad.grad_graph_info.outputs, grads)}
        for name, w in weights.to_dict().items():
            spec = popxl.TensorSpec(w.shape, w.dtype)
            adam, step = _adam_step(spec, config)
            step.bind(adam.init(prefix=f"adam.{name}")).call(w, by_name[name])
    return ir, {"x": x_stream, "labels": label_stream, "loss": loss_stream}, weights


def _name_in(args: NamedTensors, t: popxl.Tensor) -> str:
    for name, arg in args.to_dict().items():
        if arg is t:
            return name
    raise KeyError(t)


# ---- Running --------------------------------------------------------------------------------------------------


def initial_weights(config: Config) -> dict[str, Array]:
    """The starting weights of every stage, by the un-phased model's names, in the model's dtype."""
    rng = np.random.default_rng(config.seed + 1)
    ir = popxl.Ir()
    with ir.main_graph:
        factories, _ = Classifier(config).create_graph(
            popxl.TensorSpec((config.batch, TOKENS, PIXELS), config.dtype),
            popxl.TensorSpec((config.batch,), popxl.int32),
        )
    out = {}
    for name, f in factories.to_dict().items():
        if name.endswith("weight") and len(f.shape) == 2:
            out[name] = rng.normal(0, config.init_std, f.shape).astype(np.float32)
        else:
            out[name] = (np.ones if "ln" in name and name.endswith("weight") else np.zeros)(f.shape, np.float32)
    return {name: v.astype(config.dtype.as_numpy()) for name, v in out.items()}


def _phased_variable(stages: Sequence[Stage], name: str) -> popxl.Variable:
    """The phased program's variable holding the un-phased weight `name`."""
    head, _, rest = name.partition(".")
    if head == "embed":
        return stages[0].variables[0].get(rest)  # type: ignore[no-any-return]
    if head == "head":
        return stages[2].variables[0].get(rest)  # type: ignore[no-any-return]
    return stages[1].variables[int(head.removeprefix("block"))].get(rest)  # type: ignore[no-any-return]


def train(config: Config, show_progress: bool = True) -> dict[str, Any]:
    """Train both programs on the same data from the same weights; their loss curves and memory figures."""
    images, labels = digits(config)
    data = [(x.astype(config.dtype.as_numpy()), y) for x, y in batches(config, images, labels)]
    start = initial_weights(config)

    phased_ir, phased_streams, stages = phased_program(config)
    plain_ir, plain_streams, plain_weights = unphased_program(config)
    phased = popxl.Session(phased_ir, "cpu")
    plain = popxl.Session(plain_ir, "cpu")
    phased.write_variables_data({_phased_variable(stages, n): v for n, v in start.items()})
    plain.write_variables_data({plain_weights.get(n): v for n, v in start.items()})

    curves: dict[str, list[float]] = {"phased": [], "unphased": []}
    # As in popxl, the host arrays have a transfers (micro-batch) axis only when there are several.
    x_shape = phased.host_layout.shape(phased_streams["x"].shape)
    labels_shape = phased.host_layout.shape(phased_streams["labels"].shape)
    progress = _progress(show_progress)
    with phased, plain, progress as bar:
        task = bar.add_task("training", total=config.training_steps) if bar is not None else None
        for x, y in data:
            out = phased.run(
                {phased_streams["x"]: x.reshape(x_shape), phased_streams["labels"]: y.reshape(labels_shape)}
            )
            curves["phased"].append(float(np.mean(out[phased_streams["loss"]])))
            out = plain.run({plain_streams["x"]: x, plain_streams["labels"]: y})
            curves["unphased"].append(float(out[plain_streams["loss"]]))
            if bar is not None and task is not None:
                bar.update(task, advance=1, description=f"loss {curves['phased'][-1]:.3f}")
        feeds_phased = {
            phased_streams["x"]: data[0][0].reshape(x_shape),
            phased_streams["labels"]: data[0][1].reshape(labels_shape),
        }
        feeds_plain = {plain_streams["x"]: data[0][0], plain_streams["labels"]: data[0][1]}
        memory = {"phased": phased.memory_analysis(feeds_phased), "unphased": plain.memory_analysis(feeds_plain)}
    return {"curves": curves, "memory": memory}


def _progress(show: bool) -> Any:
    if not show:
        return nullcontext()
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

    return Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn())


def plot(curves: dict[str, list[float]], path: Path) -> None:
    """Both loss curves in one PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3.5))
    ax.plot(curves["unphased"], label="un-phased", lw=3, alpha=0.5)
    ax.plot(curves["phased"], label="phased (batch-serialised)", ls="--")
    ax.set_xlabel("training step")
    ax.set_ylabel("cross-entropy")
    ax.set_title("Digits classifier: phased vs un-phased")
    ax.legend()
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)


def main() -> None:
    """Train, print both curves and the memory figures, and write the picture."""
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--steps", type=int, default=Config.training_steps, help="training steps")
    p.add_argument("--layers", type=int, default=Config.layers, help="transformer blocks")
    p.add_argument("--micro-batches", type=int, default=Config.steps, help="micro-batches per training step")
    p.add_argument("--float16", action="store_true", help="train in float16 with loss scaling")
    p.add_argument("--png", default="out/phased_training.png", help="where to write the loss curves")
    args = p.parse_args()
    config = Config(training_steps=args.steps, layers=args.layers, steps=args.micro_batches, float16=args.float16)
    result = train(config)
    curves = result["curves"]
    print("step  phased   un-phased")
    for i, (a, b) in enumerate(zip(curves["phased"], curves["unphased"])):
        print(f"{i:4d}  {a:.5f}  {b:.5f}")
    worst = max(abs(a - b) for a, b in zip(curves["phased"], curves["unphased"]))
    print(f"largest difference between the curves: {worst:.2e}")
    for name, figures in result["memory"].items():
        device, host = figures["device_bytes"] / 2**10, figures["host_bytes"] / 2**10
        print(f"{name:9s} device {device:8.1f} KiB, host {host:8.1f} KiB")
    plot(curves, Path(args.png))
    print(f"loss curves written to {args.png}")


if __name__ == "__main__":
    main()
