"""Compile time of a popxl `repeat` over 2 vs 256 iterations, and the run time of an 8-layer MLP
forward built with popxl vs the same maths written directly in JAX, measured side by side."""

from __future__ import annotations

import argparse
import statistics

import jax
import jax.numpy as jnp
import numpy as np
from common import add_out_option, interleaved, plot_ratios, save, timed

import popxl
from popxl import ops


def repeat_program(count: int) -> tuple[popxl.Ir, popxl.HostToDeviceStream, popxl.DeviceToHostStream]:
    ir = popxl.Ir()
    with ir.main_graph:
        h = popxl.h2d_stream((64, 64), popxl.float32, "x")
        d = popxl.d2h_stream((64, 64), popxl.float32, "y")
        w = popxl.variable(np.eye(64, dtype=np.float32) * 0.5, name="w")
        body = ir.create_graph(lambda x, w: ops.tanh(x @ w) + x, h.spec, w.spec)
        (y,) = ops.repeat(body, count, ops.host_load(h), w)
        ops.host_store(d, y)
    return ir, h, d


def compile_seconds(count: int) -> float:
    """First run (compile and run) minus a steady-state run, for a fresh Session."""
    ir, h, _ = repeat_program(count)
    x = np.ones((64, 64), np.float32)
    with popxl.Session(ir, "cpu") as session:
        first, _ = timed(lambda: session.run({h: x}))
        steady = statistics.median(timed(lambda: session.run({h: x}))[0] for _ in range(5))
    return first - steady


def mlp_figures(batch: int, width: int, layers: int, repeats: int) -> dict[str, float]:
    rng = np.random.default_rng(0)
    weights = [rng.normal(0, width**-0.5, (width, width)).astype(np.float32) for _ in range(layers)]
    biases = [rng.normal(0, 0.1, (width,)).astype(np.float32) for _ in range(layers)]
    x = rng.normal(size=(batch, width)).astype(np.float32)

    ir = popxl.Ir()
    with ir.main_graph:
        h = popxl.h2d_stream((batch, width), popxl.float32, "x")
        d = popxl.d2h_stream((batch, width), popxl.float32, "y")
        y = ops.host_load(h)
        for i in range(layers):
            w = popxl.variable(weights[i], name=f"w{i}")
            b = popxl.variable(biases[i], name=f"b{i}")
            y = ops.gelu(y @ w + b)
        ops.host_store(d, y)

    @jax.jit
    def direct(params: list[tuple[jax.Array, jax.Array]], x: jax.Array) -> jax.Array:
        for w, b in params:
            x = jax.nn.gelu(x @ w + b, approximate=True)
        return x

    params = [(jnp.asarray(w), jnp.asarray(b)) for w, b in zip(weights, biases)]
    with popxl.Session(ir, "cpu") as session:
        ours = session.run({h: x})[d]
        np.testing.assert_allclose(ours, np.asarray(direct(params, x)), rtol=1e-4, atol=1e-4)
        times = interleaved(
            {"popxl": lambda: session.run({h: x}), "jax": lambda: np.asarray(direct(params, x))}, repeats
        )
    return {"popxl_s": times["popxl"], "jax_s": times["jax"], "ratio": times["popxl"] / times["jax"]}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--repeats", type=int, default=30, help="timed repeats of the MLP, interleaved")
    p.add_argument("--batch", type=int, default=256, help="rows of the MLP forward")
    add_out_option(p)
    args = p.parse_args()
    pairs = [(compile_seconds(2), compile_seconds(256)) for _ in range(3)]
    c2 = statistics.median(a for a, _ in pairs)
    c256 = statistics.median(b for _, b in pairs)
    mlp = mlp_figures(args.batch, 1024, 8, args.repeats)
    figures = {
        "device": str(jax.devices()[0]),
        "compile_repeat2_s": c2,
        "compile_repeat256_s": c256,
        "compile_ratio_256_over_2": c256 / c2,
        "mlp_forward_batch": args.batch,
        "mlp_popxl_s": mlp["popxl_s"],
        "mlp_jax_s": mlp["jax_s"],
        "mlp_ratio_popxl_over_jax": mlp["ratio"],
    }
    path = save("compile_scaling", figures, args.out)
    print(
        f"compile(repeat 256) / compile(repeat 2) = {figures['compile_ratio_256_over_2']:.3f} "
        f"({c256 * 1e3:.1f} ms / {c2 * 1e3:.1f} ms)"
    )
    print(
        f"MLP forward popxl / hand-written JAX = {mlp['ratio']:.3f} "
        f"({mlp['popxl_s'] * 1e3:.2f} ms / {mlp['jax_s'] * 1e3:.2f} ms)"
    )
    print(f"written to {path}")
    groups = {
        "compile: repeat 256 / repeat 2": {"ratio": figures["compile_ratio_256_over_2"]},
        "MLP forward: popxl / JAX": {"ratio": figures["mlp_ratio_popxl_over_jax"]},
    }
    print(f"picture in {plot_ratios('compile_scaling', 'Compile scaling and run time', groups, out=args.out)}")


if __name__ == "__main__":
    main()
