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
import time
from dataclasses import replace

from gpt_model import Config, train  # the model, its two programs and their training: examples/gpt_model/


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
