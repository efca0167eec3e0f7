"""Forward and gradient of an 8-layer 1024-wide MLP over a global batch of 512, batch-serialised in
`steps` micro-batches with each io_mode, against (i) the un-serialised popxl program and (ii) the
same micro-batching written directly in JAX (`lax.scan` accumulating gradients). Reports XLA's temp
memory and run time as ratios measured side by side, and the cost of the run-time index checks."""

from __future__ import annotations

import argparse
from functools import partial
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from common import interleaved, save

import popxl
from popxl import ops
from popxl_addons.core import IO_MODES, Module, autodiff_with_accumulation, batch_serialise_fwd_and_grad


class MLP(Module):
    def __init__(self, layers: int) -> None:
        super().__init__()
        self.layers = layers

    def build(self, x: popxl.Tensor) -> popxl.Tensor:
        for i in range(self.layers):
            with popxl.name_scope(f"layer{i}"):
                w = self.add_variable_input(f"w{i}", partial(np.zeros, (x.shape[-1], x.shape[-1])), x.dtype)
                b = self.add_variable_input(f"b{i}", partial(np.zeros, (x.shape[-1],)), x.dtype)
                x = ops.gelu(x @ w + b)
        return x


def _program(width: int, layers: int, micro: int, steps: int, io_mode: str | None) -> tuple[popxl.Ir, Any, Any, Any]:
    """The serialised program (io_mode given) or the un-serialised one over the whole batch."""
    ir = popxl.Ir()
    ir._pb_ir.getSessionOptions().numIOTiles = 32
    with ir.main_graph, popxl.in_sequence(True):
        x = popxl.h2d_stream((micro, width), popxl.float32, "x")
        dy = popxl.h2d_stream((micro, width), popxl.float32, "dy")
        args, graph = MLP(layers).create_graph(x.spec)
        dargs, dgraph = autodiff_with_accumulation(graph, graph.args.tensors)
        weights, accums = args.init(), dargs.init()
        if io_mode is None:
            site = graph.bind(weights).call_with_info(ops.host_load(x))
            dgraph.bind(accums).call(ops.host_load(dy), args=dgraph.grad_graph_info.inputs_dict(site))
        else:
            fwd, grad = batch_serialise_fwd_and_grad(
                graph,
                dgraph,
                graph.args,
                steps,
                load_handles={graph.graph.inputs[0]: x, dgraph.graph.inputs[0]: dy},
                store_streams={},
                store_buffers={},
                io_mode=io_mode,
            )
            grad_vars = accums.copy()
            grad_vars.update(weights)
            fwd.graph.bind(weights).call(0)
            grad.graph.bind(grad_vars).call(0)
    ir.num_host_transfers = steps if io_mode is not None else 1
    return ir, (x, dy), weights, accums


def _mlp(params: list[tuple[jax.Array, jax.Array]], x: jax.Array) -> jax.Array:
    for w, b in params:
        x = jax.nn.gelu(x @ w + b, approximate=True)
    return x


@partial(jax.jit, static_argnums=3)
def _jax_train(params: Any, xs: jax.Array, dys: jax.Array, steps: int) -> Any:
    def body(acc: Any, batch: tuple[jax.Array, jax.Array]) -> tuple[Any, None]:
        x, dy = batch
        _, pullback = jax.vjp(lambda p: _mlp(p, x), params)
        (g,) = pullback(dy)
        return jax.tree.map(jnp.add, acc, g), None

    zeros = jax.tree.map(jnp.zeros_like, params)
    total, _ = jax.lax.scan(body, zeros, (xs, dys))
    return jax.tree.map(lambda t: t / steps, total)


def _run_jax(params: Any, xs: jax.Array, dys: jax.Array, steps: int) -> Any:
    return jax.block_until_ready(_jax_train(params, xs, dys, steps))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--width", type=int, default=1024)
    p.add_argument("--layers", type=int, default=8)
    p.add_argument("--batch", type=int, default=512)
    p.add_argument("--steps", type=lambda s: [int(v) for v in s.split(",")], default=[1, 2, 8, 32])
    p.add_argument("--io-modes", type=lambda s: s.split(","), default=list(IO_MODES))
    p.add_argument("--repeats", type=int, default=5)
    args = p.parse_args()
    rng = np.random.default_rng(0)
    width, layers, batch = args.width, args.layers, args.batch
    ws = [rng.normal(0, width**-0.5, (width, width)).astype(np.float32) for _ in range(layers)]
    bs = [rng.normal(0, 0.1, (width,)).astype(np.float32) for _ in range(layers)]
    x = rng.normal(size=(batch, width)).astype(np.float32)
    dy = rng.normal(size=(batch, width)).astype(np.float32)
    params = [(jnp.asarray(w), jnp.asarray(b)) for w, b in zip(ws, bs)]
    figures: dict[str, Any] = {
        "device": str(jax.devices()[0]),
        "width": width,
        "layers": layers,
        "batch": batch,
        "runs": [],
    }

    def session_for(
        io_mode: str | None, steps: int, checks: bool, donate: bool | None = None
    ) -> tuple[popxl.Session, dict[Any, Any], Any]:
        micro = batch // steps
        ir, (hx, hdy), weights, accums = _program(width, layers, micro if io_mode else batch, steps, io_mode)
        session = popxl.Session(ir, "cpu", checks=checks, donate_state=donate)
        session.write_variables_data(
            {weights[f"w{i}"]: ws[i] for i in range(layers)} | {weights[f"b{i}"]: bs[i] for i in range(layers)}
        )
        session.__enter__()
        shape = (steps, micro, width) if io_mode and steps > 1 else (batch, width) if not io_mode else (micro, width)
        feeds = {hx: x.reshape(shape), hdy: dy.reshape(shape)}
        return session, feeds, accums

    normal, normal_feeds, _ = session_for(None, 1, True)
    normal_temp = normal.memory_analysis(normal_feeds)["temp"]
    for steps in args.steps:
        micro = batch // steps
        xs, dys = jnp.asarray(x.reshape(steps, micro, width)), jnp.asarray(dy.reshape(steps, micro, width))
        jax_compiled = _jax_train.lower(params, xs, dys, steps).compile()
        jax_temp = jax_compiled.memory_analysis().temp_size_in_bytes
        reference = _jax_train(params, xs, dys, steps)
        for io_mode in args.io_modes:
            if io_mode == "io_overlapped" and steps < 2:
                continue
            ours, feeds, accums = session_for(io_mode, steps, True)
            unchecked, unchecked_feeds, _ = session_for(io_mode, steps, False, donate=False)
            donated, donated_feeds, _ = session_for(io_mode, steps, False)
            ours.run(feeds)
            grad_w0 = ours.get_tensor_data(accums.accum.w0)
            np.testing.assert_allclose(grad_w0, np.asarray(reference[0][0]), rtol=2e-3, atol=2e-4)
            times = interleaved(
                {
                    "serialised": partial(ours.run, feeds),
                    "unchecked": partial(unchecked.run, unchecked_feeds),
                    "donated": partial(donated.run, donated_feeds),
                    "normal": partial(normal.run, normal_feeds),
                    "jax": partial(_run_jax, params, xs, dys, steps),
                },
                args.repeats,
                warmup=1,
            )
            temp = ours.memory_analysis(feeds)["temp"]
            run = {
                "steps": steps,
                "io_mode": io_mode,
                "temp_bytes": temp,
                "temp_bytes_jax": jax_temp,
                "temp_bytes_normal": normal_temp,
                "temp_ratio_vs_jax": temp / jax_temp,
                "temp_ratio_vs_normal": temp / normal_temp,
                "seconds": times["serialised"],
                "seconds_jax": times["jax"],
                "seconds_normal": times["normal"],
                "time_ratio_vs_jax": times["serialised"] / times["jax"],
                "time_ratio_vs_normal": times["serialised"] / times["normal"],
                "check_cost": times["serialised"] / times["unchecked"] - 1,
                "donation_gain": 1 - times["donated"] / times["unchecked"],
            }
            figures["runs"].append(run)
            print(
                f"steps {steps:2d} {io_mode:13s} temp/jax {run['temp_ratio_vs_jax']:.3f} "
                f"temp/normal {run['temp_ratio_vs_normal']:.3f} time/jax {run['time_ratio_vs_jax']:.3f} "
                f"time/normal {run['time_ratio_vs_normal']:.3f} checks {100 * run['check_cost']:+.1f}% "
                f"donation {100 * run['donation_gain']:+.1f}% "
                f"({temp / 2**20:.1f} MiB vs jax {jax_temp / 2**20:.1f} MiB; "
                f"{times['serialised'] * 1e3:.0f} ms vs jax {times['jax'] * 1e3:.0f} ms)",
                flush=True,
            )
            for s in (ours, unchecked, donated):
                s.__exit__(None, None, None)
    print(f"written to {save('batch_serialisation', figures)}")


if __name__ == "__main__":
    main()
