"""Graph building at GPT-2-small widths: popxl's build and autodiff against JAX's tracing, and Session
compile time against `jax.jit(...).lower().compile()` of the same training step, measured side by side.

The model is a stack of MLP-residual blocks, x <- x + gelu(x @ W1 + b1) @ W2 + b2, over
`batch x seq` tokens of width `width` with a hidden width of `hidden`.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from common import add_out_option, interleaved, plot_ratios, save

import popxl
from popxl import ops
from popxl.transforms import autodiff

LR = 1e-3


def block_specs(width: int, hidden: int) -> list[popxl.TensorSpec]:
    """Specs of one block's weights: W1, b1, W2, b2."""
    shapes = [(width, hidden), (hidden,), (hidden, width), (width,)]
    return [popxl.TensorSpec(s, popxl.float32) for s in shapes]


def stack(x: popxl.Tensor, *weights: popxl.Tensor) -> popxl.Tensor:
    """The residual MLP stack in popxl."""
    for w1, b1, w2, b2 in zip(*[iter(weights)] * 4):
        x = x + ops.gelu(x @ w1 + b1) @ w2 + b2
    return x


def stack_jax(x: jax.Array, weights: list[jax.Array]) -> jax.Array:
    """The same stack written directly in JAX."""
    for w1, b1, w2, b2 in zip(*[iter(weights)] * 4):
        x = x + jax.nn.gelu(x @ w1 + b1, approximate=True) @ w2 + b2
    return x


def build_popxl(tokens: int, width: int, hidden: int, blocks: int) -> popxl.Ir:
    """An Ir with the forward graph of the stack and its gradient graph."""
    ir = popxl.Ir()
    with ir.main_graph:
        x = popxl.TensorSpec((tokens, width), popxl.float32)
        forward = ir.create_graph(stack, x, *(block_specs(width, hidden) * blocks))
        autodiff(forward)
    return ir


def trace_jax(tokens: int, width: int, hidden: int, blocks: int) -> Any:
    """The jaxpr of the stack's forward and VJP."""
    x = jax.ShapeDtypeStruct((tokens, width), jnp.float32)
    weights = [jax.ShapeDtypeStruct(s.shape, jnp.float32) for s in block_specs(width, hidden) * blocks]

    def forward_and_vjp(x: jax.Array, weights: list[jax.Array], dy: jax.Array) -> Any:
        y, pullback = jax.vjp(stack_jax, x, weights)
        return y, pullback(dy)

    return jax.make_jaxpr(forward_and_vjp)(x, weights, x)


def training_program(
    tokens: int, width: int, weights: list[np.ndarray[Any, Any]]
) -> tuple[popxl.Ir, dict[popxl.HostToDeviceStream, np.ndarray[Any, Any]]]:
    """One SGD step of the stack in popxl: forward, gradient, weights updated in place."""
    ir = popxl.Ir()
    with ir.main_graph:
        h = popxl.h2d_stream((tokens, width), popxl.float32, "x")
        hdy = popxl.h2d_stream((tokens, width), popxl.float32, "dy")
        out = popxl.d2h_stream((tokens, width), popxl.float32, "y")
        variables = [popxl.variable(w, name=f"w{i}") for i, w in enumerate(weights)]
        forward = ir.create_graph(stack, h.spec, *(v.spec for v in variables))
        info = autodiff(forward, grads_required=forward.inputs[1:])
        site = ops.call_with_info(forward, ops.host_load(h), *variables)
        ops.host_store(out, site.outputs[0])
        grads = ops.call(info.graph, ops.host_load(hdy), inputs_dict=info.inputs_dict(site))
        for v, g in zip(variables, grads):
            ops.var_updates.accumulate_(v, g, -LR)
    x = np.zeros((tokens, width), np.float32)
    return ir, {h: x, hdy: x}


def compile_popxl(tokens: int, width: int, hidden: int, blocks: int, weights: list[np.ndarray[Any, Any]]) -> float:
    """Seconds to create the training program's Session and compile it (device transfers excluded)."""
    ir, feeds = training_program(tokens, width, weights)
    start = time.perf_counter()
    session = popxl.Session(ir, "cpu", checks=False)
    elapsed = time.perf_counter() - start
    with session:
        start = time.perf_counter()
        session.memory_analysis(feeds)
        elapsed += time.perf_counter() - start
    return elapsed


def compile_jax(tokens: int, width: int, weights: list[np.ndarray[Any, Any]]) -> float:
    """Seconds to trace, lower and compile the same training step written directly in JAX."""
    params = [jnp.asarray(w) for w in weights]
    x = jnp.zeros((tokens, width), jnp.float32)

    def step(params: list[jax.Array], x: jax.Array, dy: jax.Array) -> Any:
        y, pullback = jax.vjp(stack_jax, x, params)
        _, grads = pullback(dy)
        return [p - LR * g for p, g in zip(params, grads)], y

    start = time.perf_counter()
    jax.jit(step, donate_argnums=0).lower(params, x, x).compile()
    return time.perf_counter() - start


def median_pair(fns: dict[str, Callable[[], float]], repeats: int) -> dict[str, float]:
    """Median of each self-timed function, called in alternation."""
    samples: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(repeats):
        for name, fn in fns.items():
            samples[name].append(fn())
    return {name: statistics.median(s) for name, s in samples.items()}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--batch", type=int, default=8, help="sequences per step")
    p.add_argument("--seq", type=int, default=1024, help="tokens per sequence")
    p.add_argument("--width", type=int, default=768, help="model width d")
    p.add_argument("--hidden", type=int, default=3072, help="MLP hidden width")
    p.add_argument("--blocks", type=int, default=12, help="residual blocks")
    p.add_argument("--repeats", type=int, default=15, help="timed repeats of graph building")
    p.add_argument("--compile-repeats", type=int, default=3, help="timed repeats of compilation")
    add_out_option(p)
    args = p.parse_args()
    tokens = args.batch * args.seq
    shape = (tokens, args.width, args.hidden, args.blocks)
    build = interleaved(
        {"popxl": lambda: build_popxl(*shape), "jax": lambda: trace_jax(*shape)}, args.repeats, warmup=2
    )
    rng = np.random.default_rng(0)
    weights = [
        rng.normal(0, 0.02, s.shape).astype(np.float32) for s in block_specs(args.width, args.hidden) * args.blocks
    ]
    compiled = median_pair(
        {
            "popxl": lambda: compile_popxl(*shape, weights),
            "jax": lambda: compile_jax(tokens, args.width, weights),
        },
        args.compile_repeats,
    )
    ops_built = sum(len(g.ops) for g in build_popxl(*shape).graphs)
    figures = {
        "device": str(jax.devices()[0]),
        "tokens": tokens,
        "width": args.width,
        "hidden": args.hidden,
        "blocks": args.blocks,
        "popxl_ops": ops_built,
        "build_popxl_s": build["popxl"],
        "trace_jax_s": build["jax"],
        "build_ratio_popxl_over_jax": build["popxl"] / build["jax"],
        "compile_popxl_s": compiled["popxl"],
        "compile_jax_s": compiled["jax"],
        "compile_ratio_popxl_over_jax": compiled["popxl"] / compiled["jax"],
    }
    path = save("build_scaling", figures, args.out)
    print(
        f"build + autodiff ({ops_built} ops) / jax.make_jaxpr of forward and VJP = "
        f"{figures['build_ratio_popxl_over_jax']:.2f} ({build['popxl'] * 1e3:.1f} ms / {build['jax'] * 1e3:.1f} ms)"
    )
    print(
        f"Session compile / jax.jit(...).lower().compile() = {figures['compile_ratio_popxl_over_jax']:.2f} "
        f"({compiled['popxl']:.2f} s / {compiled['jax']:.2f} s)"
    )
    print(f"written to {path}")
    groups = {
        "build + autodiff / make_jaxpr": {"popxl / JAX": figures["build_ratio_popxl_over_jax"]},
        "Session compile / jit compile": {"popxl / JAX": figures["compile_ratio_popxl_over_jax"]},
    }
    title = f"Graph building, {args.blocks} blocks, {tokens} tokens x {args.width} ({figures['device']})"
    print(f"picture in {plot_ratios('build_scaling', title, groups, out=args.out)}")


if __name__ == "__main__":
    main()
