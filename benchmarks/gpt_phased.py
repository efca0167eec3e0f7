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
import resource
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))

import jax
import jax.numpy as jnp
from common import add_out_option, interleaved, machine_matmul_rate, matmul_flops, save
from gpt_jax import train_step
from gpt_phased import Config, _phased_variable, initial_weights, phased_program, unphased_program

import popxl
from popxl.lowering.memory import memory_figures

# ---- Running --------------------------------------------------------------------------------------------------


def _gib(figures: dict[str, int]) -> str:
    return f"{figures['device_bytes'] / 2**30:7.2f} / {figures['host_bytes'] / 2**30:7.2f}"


def main() -> None:
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
    config = Config(
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
    target = jax.devices(args.device)[0]
    rng = np.random.default_rng(0)
    data = rng.integers(0, config.vocab, (config.steps, config.micro, config.sequence + 1)).astype(np.int32)
    tokens, labels = data[..., :-1], data[..., 1:].reshape(config.steps, -1)
    start = initial_weights(config)

    losses: dict[str, list[float]] = {}
    seconds: dict[str, float] = {}
    memory: dict[str, dict[str, int]] = {}
    compile_seconds: dict[str, float] = {}

    def measure(name: str, build: Callable[[], tuple[Callable[[], float], dict[str, int]]]) -> None:
        """Build and compile one program, time its steps, and release it before the next one."""
        begin = time.perf_counter()
        run, memory[name] = build()
        compile_seconds[name] = time.perf_counter() - begin
        losses[name] = []
        seconds[name] = interleaved({name: lambda: losses[name].append(run())}, args.repeats, warmup=1)[name]
        print(f"{name}: compiled in {compile_seconds[name]:.1f} s, {seconds[name]:.2f} s per step", flush=True)

    def popxl_program(phased: bool) -> tuple[Callable[[], float], dict[str, int]]:
        if phased:
            ir, streams, stages = phased_program(config)
            # One transfer per micro-batch: as in popxl, the host arrays have a transfers axis only when
            # there are several (one micro-batch takes the stream's shape alone).
            layout = popxl.HostLayout.of(ir)
            feeds = {
                streams["tokens"]: tokens.reshape(layout.shape(streams["tokens"].shape)),
                streams["labels"]: labels.reshape(layout.shape(streams["labels"].shape)),
            }
            variables = {_phased_variable(stages, n): v for n, v in start.items()}
        else:
            ir, streams, weights = unphased_program(config)
            batch = (config.batch, config.sequence)
            feeds = {streams["tokens"]: tokens.reshape(batch), streams["labels"]: labels.reshape(-1)}
            variables = {weights.get(n): v for n, v in start.items()}
        session = popxl.Session(ir, args.device, checks=False)
        session.write_variables_data(variables)
        session.__enter__()
        sessions.append(session)
        return (lambda: float(np.mean(session.run(feeds)[streams["loss"]]))), session.memory_analysis(feeds)

    def jax_program() -> tuple[Callable[[], float], dict[str, int]]:
        params = jax.device_put({n: jnp.asarray(v) for n, v in start.items()}, target)
        adam = jax.device_put(
            (
                jax.tree.map(lambda w: jnp.zeros(w.shape, config.dtype.as_numpy()), params),
                jax.tree.map(lambda w: jnp.zeros(w.shape, jnp.float32), params),
                jnp.zeros((), jnp.float32),
            ),
            target,
        )
        batch = jax.device_put((jnp.asarray(tokens), jnp.asarray(labels)), target)
        step = jax.jit(lambda q, a, t, y: train_step(q, a, t, y, config), donate_argnums=(0, 1))
        compiled = step.lower(params, adam, *batch).compile()
        figures = memory_figures(compiled, (params, adam, *batch))
        state = [params, adam]

        def run() -> float:
            state[0], state[1], loss = compiled(state[0], state[1], *batch)
            return float(loss)

        return run, figures

    # One program attached at a time: three copies of a model's state at once would not fit on a small host.
    sessions: list[popxl.Session] = []
    measure("phased", lambda: popxl_program(True))
    sessions.pop().__exit__(None, None, None)
    measure("unphased", lambda: popxl_program(False))
    sessions.pop().__exit__(None, None, None)
    measure("jax", jax_program)
    first = {name: curve[0] for name, curve in losses.items()}
    tolerance = 2e-2 if config.float16 else 2e-3
    np.testing.assert_allclose(first["phased"], first["jax"], rtol=tolerance)
    np.testing.assert_allclose(first["unphased"], first["jax"], rtol=tolerance)
    rate = machine_matmul_rate(target, config.dtype.as_numpy(), args.matmul_size)
    flops = matmul_flops(config.layers, config.width, config.sequence, config.vocab, config.batch * config.sequence)
    figures: dict[str, Any] = {
        "device": str(target),
        "config": {k: getattr(config, k) for k in ("vocab", "width", "heads", "layers", "sequence", "micro", "steps")},
        "dtype": config.dtype.name,
        "tokens_per_step": config.batch * config.sequence,
        "parameters": int(sum(v.size for v in start.values())),
        "matmul_flops_per_step": flops,
        "machine_matmul_flops_per_s": rate,
        "losses": losses,
        "programs": {
            name: {
                "seconds_per_step": seconds[name],
                "build_and_compile_seconds": compile_seconds[name],
                "memory": memory[name],
                "matmul_flops_per_s": flops / seconds[name],
                "fraction_of_machine_matmul": flops / seconds[name] / rate,
            }
            for name in seconds
        },
    }
    print(
        f"GPT {config.layers} x {config.width}, vocab {config.vocab}, {figures['parameters'] / 1e6:.1f} M parameters, "
        f"{figures['tokens_per_step']} tokens per step ({config.steps} x {config.micro} x {config.sequence}), "
        f"{config.dtype.name} on {target}; machine matmul {rate / 1e9:.1f} GFLOP/s"
    )
    print("program     s/step   device / host GiB   matmul GFLOP/s  of machine  first loss")
    for name, run in figures["programs"].items():
        print(
            f"{name:10s} {run['seconds_per_step']:7.2f}   {_gib(run['memory'])}   "
            f"{run['matmul_flops_per_s'] / 1e9:13.1f}  {run['fraction_of_machine_matmul']:9.3f}   {first[name]:.4f}"
        )
    figures["peak_host_rss_bytes"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    print(f"peak resident memory of this process {figures['peak_host_rss_bytes'] / 2**30:.1f} GiB")
    print(f"written to {save('gpt_phased', figures, args.out)}")


if __name__ == "__main__":
    main()
