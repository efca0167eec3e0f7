"""The GPT decoder of examples/gpt_phased.py at GPT-2-small widths (12 layers of width 768, 12 heads,
vocabulary 50304) on one replica, one training step (forward, backward, clipped Adam) measured side
by side for:

- phased: the example's phased, batch-serialised program (weights, gradients and Adam state in
  remote buffers, activations through remote buffers, one layer on the device at a time);
- un-phased: the example's popxl program over the whole batch, every weight on the device;
- JAX: the same model written directly in JAX: a `lax.scan` over the micro-batches accumulating
  the mean gradient, then the global-norm clip and Adam, as one jitted step.

All three run in one process from the same weights and data, one after the other (one program's
state on the device at a time); their first losses are checked to agree. Each reports the time to
build and compile it, the median time per step after a warm-up step, device and host bytes (arguments and outputs by
where they live, less what is updated in place, plus XLA's temporaries), and the achieved matmul
FLOP/s (the model's matmul FLOPs per step over the time) as a fraction of the machine's matmul
rate, measured once with a large `jnp` matmul.

The default step, 4 micro-batches of one 256-token sequence (1024 tokens), is what fits in about
ten minutes on two CPU cores; `--sequence 1024` gives GPT-2's 4096 tokens per step.
"""

from __future__ import annotations

import argparse
import contextlib
import resource
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from common import add_out_option, interleaved, machine_matmul_rate, matmul_flops, save
from gpt_jax import train_step
from gpt_model import Array, Config, initial_weights, phased_program, phased_variable, unphased_program

import popxl
from popxl.memory import memory_figures

# A program built and compiled: a function that runs one step and returns its loss, and its memory figures.
Built = tuple[Callable[[], float], dict[str, int]]


def _gib(figures: dict[str, int]) -> str:
    return f"{figures['device_bytes'] / 2**30:7.2f} / {figures['host_bytes'] / 2**30:7.2f}"


def parse_args() -> argparse.Namespace:
    """The command line, with `--small` applied to the sizes."""
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--layers", type=int, default=12, help="decoder layers")
    p.add_argument("--width", type=int, default=768, help="model width")
    p.add_argument("--heads", type=int, default=12, help="attention heads")
    p.add_argument("--vocab", type=int, default=50304, help="vocabulary size")
    p.add_argument("--sequence", type=int, default=256, help="tokens per sequence")
    p.add_argument("--micro", type=int, default=1, help="sequences per micro-batch")
    p.add_argument("--micro-batches", type=int, default=4, help="micro-batches per step")
    p.add_argument("--float16", action="store_true", help="float16 with loss scaling (default: float32)")
    p.add_argument("--repeats", type=int, default=2, help="timed steps of each program, interleaved")
    p.add_argument("--matmul-size", type=int, default=2048, help="side of the matmul that measures the machine")
    p.add_argument("--device", default="cpu", choices=["cpu", "gpu"], help="where popxl Sessions and JAX run")
    p.add_argument("--small", action="store_true", help="a quick check: 2 layers of width 128, short sequences")
    add_out_option(p)
    args = p.parse_args()
    if args.small:
        args.layers, args.width, args.heads, args.vocab, args.sequence = 2, 128, 4, 512, 64
    return args


def model_config(args: argparse.Namespace) -> Config:
    """The example's model at the sizes asked for, on one replica."""
    return Config(
        vocab=args.vocab,
        width=args.width,
        heads=args.heads,
        layers=args.layers,
        sequence=args.sequence,
        tp=1,
        dp=1,
        micro=args.micro,
        steps=args.micro_batches,
        float16=args.float16,
        init_std=0.02,
    )


@dataclass
class Inputs:
    """What every program trains on: one step's tokens and next tokens, and the starting weights."""

    tokens: Array
    labels: Array
    start: dict[str, Array]

    @classmethod
    def of(cls, config: Config) -> Inputs:
        rng = np.random.default_rng(0)
        data = rng.integers(0, config.vocab, (config.steps, config.micro, config.sequence + 1)).astype(np.int32)
        return cls(data[..., :-1], data[..., 1:].reshape(config.steps, -1), initial_weights(config))


@dataclass
class Measurements:
    """Each program's losses, seconds per step, memory figures and build-and-compile seconds."""

    repeats: int
    losses: dict[str, list[float]] = field(default_factory=dict)
    seconds: dict[str, float] = field(default_factory=dict)
    memory: dict[str, dict[str, int]] = field(default_factory=dict)
    compile_seconds: dict[str, float] = field(default_factory=dict)

    def measure(self, name: str, build: Callable[[], Built]) -> None:
        """Build and compile one program and time its steps."""
        begin = time.perf_counter()
        run, self.memory[name] = build()
        self.compile_seconds[name] = time.perf_counter() - begin
        losses = self.losses[name] = []
        self.seconds[name] = interleaved({name: lambda: losses.append(run())}, self.repeats, warmup=1)[name]
        compiled = self.compile_seconds[name]
        print(f"{name}: compiled in {compiled:.1f} s, {self.seconds[name]:.2f} s per step", flush=True)


def popxl_program(config: Config, inputs: Inputs, phased: bool, device: str, held: contextlib.ExitStack) -> Built:
    """The example's phased or un-phased program in a Session attached until `held` closes."""
    if phased:
        ir, streams, stages = phased_program(config)
        # One transfer per micro-batch: as in popxl, the host arrays have a transfers axis only when
        # there are several (one micro-batch takes the stream's shape alone).
        layout = popxl.HostLayout.of(ir)
        feeds = {
            streams["tokens"]: inputs.tokens.reshape(layout.shape(streams["tokens"].shape)),
            streams["labels"]: inputs.labels.reshape(layout.shape(streams["labels"].shape)),
        }
        variables = {phased_variable(stages, n): v for n, v in inputs.start.items()}
    else:
        ir, streams, weights = unphased_program(config)
        batch = (config.batch, config.sequence)
        feeds = {streams["tokens"]: inputs.tokens.reshape(batch), streams["labels"]: inputs.labels.reshape(-1)}
        variables = {weights.get(n): v for n, v in inputs.start.items()}
    session = popxl.Session(ir, device, checks=False)
    session.write_variables_data(variables)
    held.enter_context(session)
    return (lambda: float(np.mean(session.run(feeds)[streams["loss"]]))), session.memory_analysis(feeds)


def jax_program(config: Config, inputs: Inputs, target: Any) -> Built:
    """The same model's step in JAX, jitted and compiled, its weights and Adam state on `target`."""
    params = jax.device_put({n: jnp.asarray(v) for n, v in inputs.start.items()}, target)
    adam = jax.device_put(
        (
            jax.tree.map(lambda w: jnp.zeros(w.shape, config.dtype.as_numpy()), params),
            jax.tree.map(lambda w: jnp.zeros(w.shape, jnp.float32), params),
            jnp.zeros((), jnp.float32),
        ),
        target,
    )
    batch = jax.device_put((jnp.asarray(inputs.tokens), jnp.asarray(inputs.labels)), target)
    step = jax.jit(lambda q, a, t, y: train_step(q, a, t, y, config), donate_argnums=(0, 1))
    compiled = step.lower(params, adam, *batch).compile()
    figures = memory_figures(compiled, (params, adam, *batch))
    state = [params, adam]

    def run() -> float:
        state[0], state[1], loss = compiled(state[0], state[1], *batch)
        return float(loss)

    return run, figures


def measure_all(config: Config, inputs: Inputs, args: argparse.Namespace, target: Any) -> Measurements:
    """The three programs measured one after the other, their first losses checked to agree."""
    measured = Measurements(args.repeats)
    # One program attached at a time: three copies of a model's state at once would not fit on a small host.
    with contextlib.ExitStack() as held:
        measured.measure("phased", lambda: popxl_program(config, inputs, True, args.device, held))
    with contextlib.ExitStack() as held:
        measured.measure("unphased", lambda: popxl_program(config, inputs, False, args.device, held))
    measured.measure("jax", lambda: jax_program(config, inputs, target))
    first = {name: curve[0] for name, curve in measured.losses.items()}
    tolerance = 2e-2 if config.float16 else 2e-3
    np.testing.assert_allclose(first["phased"], first["jax"], rtol=tolerance)
    np.testing.assert_allclose(first["unphased"], first["jax"], rtol=tolerance)
    return measured


def figures_of(config: Config, inputs: Inputs, measured: Measurements, rate: float, target: Any) -> dict[str, Any]:
    """The figures the benchmark saves: the model, the machine's matmul rate and each program's figures."""
    flops = matmul_flops(config.layers, config.width, config.sequence, config.vocab, config.batch * config.sequence)
    seconds = measured.seconds
    return {
        "device": str(target),
        "config": {k: getattr(config, k) for k in ("vocab", "width", "heads", "layers", "sequence", "micro", "steps")},
        "dtype": config.dtype.name,
        "tokens_per_step": config.batch * config.sequence,
        "parameters": int(sum(v.size for v in inputs.start.values())),
        "matmul_flops_per_step": flops,
        "machine_matmul_flops_per_s": rate,
        "losses": measured.losses,
        "programs": {
            name: {
                "seconds_per_step": seconds[name],
                "build_and_compile_seconds": measured.compile_seconds[name],
                "memory": measured.memory[name],
                "matmul_flops_per_s": flops / seconds[name],
                "fraction_of_machine_matmul": flops / seconds[name] / rate,
            }
            for name in seconds
        },
    }


def print_figures(config: Config, figures: dict[str, Any], target: Any) -> None:
    """The model and machine on one line, then a line per program."""
    rate = figures["machine_matmul_flops_per_s"]
    print(
        f"GPT {config.layers} x {config.width}, vocab {config.vocab}, {figures['parameters'] / 1e6:.1f} M parameters, "
        f"{figures['tokens_per_step']} tokens per step ({config.steps} x {config.micro} x {config.sequence}), "
        f"{config.dtype.name} on {target}; machine matmul {rate / 1e9:.1f} GFLOP/s"
    )
    print("program     s/step   device / host GiB   matmul GFLOP/s  of machine  first loss")
    for name, run in figures["programs"].items():
        print(
            f"{name:10s} {run['seconds_per_step']:7.2f}   {_gib(run['memory'])}   "
            f"{run['matmul_flops_per_s'] / 1e9:13.1f}  {run['fraction_of_machine_matmul']:9.3f}   "
            f"{figures['losses'][name][0]:.4f}"
        )


def main() -> None:
    """Measure the three programs, print their figures and save them."""
    args = parse_args()
    config = model_config(args)
    target = jax.devices(args.device)[0]
    inputs = Inputs.of(config)
    measured = measure_all(config, inputs, args, target)
    rate = machine_matmul_rate(target, config.dtype.as_numpy(), args.matmul_size)
    figures = figures_of(config, inputs, measured, rate, target)
    print_figures(config, figures, target)
    figures["peak_host_rss_bytes"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    print(f"peak resident memory of this process {figures['peak_host_rss_bytes'] / 2**30:.1f} GiB")
    print(f"written to {save('gpt_phased', figures, args.out)}")


if __name__ == "__main__":
    main()
