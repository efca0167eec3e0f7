"""Forward and gradient of an MLP (8 layers, 1024 wide, global batch 512 by default), batch-serialised
in `steps` micro-batches with each io_mode and remote buffers in host or device memory, measured side
by side against:

- the un-serialised popxl program over the whole batch;
- JAX offloading: `jax.vjp` of a `lax.scan` over the micro-batches whose body is under
  `jax.checkpoint` with `save_and_offload_only_these_names` (activations to pinned host memory),
  the same forward-then-gradient schedule as batch serialisation;
- JAX gradient accumulation: one micro-batch's forward and backward per `lax.scan` step.

Every program's memory is reported as device bytes and host bytes (arguments and outputs by where
they live, less what is updated in place, plus XLA's temporaries), with the same accounting for all.
A second measurement times one remote store inside a loop as the buffer grows: it should stay flat.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from common import add_out_option, interleaved, plot_ratios, save
from jax.ad_checkpoint import checkpoint_name

import popxl
from popxl import ops
from popxl.memory import memory_figures
from popxl_addons.core import IO_MODES, Module
from popxl_addons.core.training import Serialisation, StepOptions, build_training_step

MiB = 2**20
Array = np.ndarray[Any, Any]


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


def popxl_program(width: int, layers: int, micro: int, steps: int, io_mode: str | None) -> tuple[popxl.Ir, Any, Any]:
    """The serialised program (io_mode given) or the un-serialised one over the whole batch."""
    serialisation = Serialisation(steps=steps, io_mode=io_mode) if io_mode is not None else None
    step = build_training_step(
        partial(MLP, layers),
        popxl.TensorSpec((micro, width), popxl.float32),
        steps if io_mode is not None else 1,
        serialisation,
        StepOptions(store_outputs=False),
    )
    return step.ir, (step.inputs["x"], step.inputs["dy0"]), (step.weights, step.accumulators)


def _mlp(params: list[tuple[jax.Array, jax.Array]], x: jax.Array) -> jax.Array:
    for w, b in params:
        x = jax.nn.gelu(checkpoint_name(x, "activation") @ w + b, approximate=True)  # type: ignore[no-untyped-call]
    return x


def jax_accumulation(params: Any, xs: jax.Array, dys: jax.Array) -> Any:
    """Mean gradient over micro-batches, one forward and backward per scan step."""

    def body(acc: Any, batch: tuple[jax.Array, jax.Array]) -> tuple[Any, None]:
        x, dy = batch
        _, pullback = jax.vjp(lambda p: _mlp(p, x), params)
        (g,) = pullback(dy)
        return jax.tree.map(jnp.add, acc, g), None

    total, _ = jax.lax.scan(body, jax.tree.map(jnp.zeros_like, params), (xs, dys))
    return jax.tree.map(lambda t: t / xs.shape[0], total)


def offloaded(model: Callable[[Any, jax.Array], jax.Array]) -> Callable[[Any, jax.Array, jax.Array], Any]:
    """The mean gradient over micro-batches: `model`'s forward over every micro-batch (`lax.scan`), its tensors
    named "activation" offloaded to pinned host memory (`save_and_offload_only_these_names`), then the VJP."""
    policy = jax.checkpoint_policies.save_and_offload_only_these_names(
        names_which_can_be_saved=[],
        names_which_can_be_offloaded=["activation"],
        offload_src="device",
        offload_dst="pinned_host",
    )
    step = jax.checkpoint(model, policy=policy)

    def run(params: Any, xs: jax.Array, dys: jax.Array) -> Any:
        def forward(p: Any) -> jax.Array:
            ys: jax.Array = jax.lax.scan(lambda c, x: (c, step(p, x)), None, xs)[1]
            return ys

        _, pullback = jax.vjp(forward, params)
        (g,) = pullback(dys)
        return jax.tree.map(lambda t: t / xs.shape[0], g)

    return run


# JAX offloading over the MLP: the same forward-then-gradient schedule as batch serialisation.
jax_offload = offloaded(_mlp)


def jax_program(
    fn: Callable[..., Any], params: Any, xs: jax.Array, dys: jax.Array
) -> tuple[Callable[[], Any], dict[str, int]]:
    """A run of `fn` jitted, and its memory figures."""
    compiled = jax.jit(fn).lower(params, xs, dys).compile()

    def run() -> Any:
        return jax.block_until_ready(compiled(params, xs, dys))  # type: ignore[no-untyped-call]

    return run, memory_figures(compiled, (params, xs, dys))


def store_cost(width: int, micro: int, steps: int, repeats: int, checks: bool, device: str) -> float:
    """Seconds per remote store of a (micro, width) entry, in a loop of `steps` stores into `steps` entries."""
    ir = popxl.Ir()
    with ir.main_graph:
        buffer = popxl.remote_buffer((micro, width), popxl.float32, steps)
        value = popxl.variable(np.ones((micro, width), np.float32), name="value")

        def body(i: popxl.Tensor, v: popxl.Tensor) -> popxl.Tensor:
            ops.remote_store(buffer, i, v)
            return i + 1

        graph = ir.create_graph(body, popxl.TensorSpec((), popxl.int32), value.spec)
        ops.repeat(graph, steps, popxl.constant(np.int32(0)), value)
    with popxl.Session(ir, device, checks=checks) as session:
        seconds = interleaved({"store": session.run}, repeats, warmup=1)["store"]
    return seconds / steps


def _mib(figures: dict[str, int]) -> str:
    return f"{figures['device_bytes'] / MiB:7.1f} / {figures['host_bytes'] / MiB:7.1f}"


def parse_args() -> argparse.Namespace:
    """The command line."""
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--width", type=int, default=1024, help="MLP width")
    p.add_argument("--layers", type=int, default=8, help="MLP layers")
    p.add_argument("--batch", type=int, default=4096, help="global batch (tokens) per run")
    p.add_argument("--steps", type=lambda s: [int(v) for v in s.split(",")], default=[2, 8, 32], help="micro-batches")
    p.add_argument("--io-modes", type=lambda s: s.split(","), default=list(IO_MODES), help="io_modes to measure")
    p.add_argument("--repeats", type=int, default=3, help="timed repeats, interleaved")
    p.add_argument("--device", default="cpu", choices=["cpu", "gpu"], help="where popxl Sessions and JAX run")
    p.add_argument(
        "--store-steps",
        type=lambda s: [int(v) for v in s.split(",")],
        default=[8, 64, 256, 512],
        help="loop lengths (and buffer entries) for the per-store cost",
    )
    add_out_option(p)
    return p.parse_args()


# An attached Session, its host data for one run and the gradient accumulators it fills.
Attached = tuple[popxl.Session, dict[Any, Array], Any]


@dataclass
class Problem:
    """The MLP's weights and one run's data, on the host and (the weights) on the JAX device."""

    width: int
    layers: int
    batch: int
    device: str
    ws: list[Array]
    bs: list[Array]
    x: Array
    dy: Array
    target: Any
    params: Any

    @classmethod
    def of(cls, args: argparse.Namespace) -> Problem:
        rng = np.random.default_rng(0)
        width, layers, batch = args.width, args.layers, args.batch
        ws = [rng.normal(0, width**-0.5, (width, width)).astype(np.float32) for _ in range(layers)]
        bs = [rng.normal(0, 0.1, (width,)).astype(np.float32) for _ in range(layers)]
        x = rng.normal(size=(batch, width)).astype(np.float32)
        dy = rng.normal(size=(batch, width)).astype(np.float32)
        target = jax.devices(args.device)[0]
        params = jax.device_put([(w, b) for w, b in zip(ws, bs)], target)
        return cls(width, layers, batch, args.device, ws, bs, x, dy, target, params)

    def attached(self, io_mode: str | None, steps: int, memory: str, checks: bool) -> Attached:
        """The serialised program (io_mode given) or the un-serialised one, attached with the weights written."""
        micro = self.batch // steps if io_mode else self.batch
        ir, (hx, hdy), (weights, accums) = popxl_program(self.width, self.layers, micro, steps, io_mode)
        session = popxl.Session(ir, self.device, remote_memory=memory, checks=checks)
        session.write_variables_data(
            {weights[f"w{i}"]: self.ws[i] for i in range(self.layers)}
            | {weights[f"b{i}"]: self.bs[i] for i in range(self.layers)}
        )
        session.__enter__()
        shape = (steps, micro, self.width) if io_mode and steps > 1 else (micro, self.width)
        return session, {hx: self.x.reshape(shape), hdy: self.dy.reshape(shape)}, accums


@dataclass
class Baselines:
    """What each serialised program is measured against at one step count: the un-serialised program and JAX's
    accumulation and offloading, their runs and memory figures, and the gradient they agree on."""

    normal: Attached
    normal_memory: dict[str, int]
    jax: dict[str, tuple[Callable[[], Any], dict[str, int]]]
    reference: Array


def measure_io_mode(problem: Problem, steps: int, io_mode: str, base: Baselines, repeats: int) -> dict[str, Any]:
    """One io_mode at one step count: its programs checked against the reference, then measured and printed."""
    sessions = {
        "host": problem.attached(io_mode, steps, "host", True),
        "device": problem.attached(io_mode, steps, "device", True),
        "host_unchecked": problem.attached(io_mode, steps, "host", False),
    }
    for session, feeds, accums in sessions.values():
        session.run(feeds)
        got = session.get_tensor_data(accums.accum.w0)
        np.testing.assert_allclose(got, base.reference, rtol=2e-3, atol=2e-4)
    memory = {name: s.memory_analysis(f) for name, (s, f, _) in sessions.items()}
    timers: dict[str, Callable[[], Any]] = {name: partial(s.run, f) for name, (s, f, _) in sessions.items()}
    normal, normal_feeds, _ = base.normal
    (run_accum, accum_memory), (run_offload, offload_memory) = base.jax["jax_accum"], base.jax["jax_offload"]
    timers |= {"normal": partial(normal.run, normal_feeds), "jax_accum": run_accum, "jax_offload": run_offload}
    times = interleaved(timers, repeats, warmup=1)
    run = {
        "steps": steps,
        "io_mode": io_mode,
        "memory": {**memory, "normal": base.normal_memory, "jax_accum": accum_memory, "jax_offload": offload_memory},
        "seconds": times,
        "device_ratio_host_vs_normal": memory["host"]["device_bytes"] / base.normal_memory["device_bytes"],
        "device_ratio_host_vs_jax_offload": memory["host"]["device_bytes"] / offload_memory["device_bytes"],
        "time_ratio_vs_jax_accum": times["host"] / times["jax_accum"],
        "time_ratio_vs_jax_offload": times["host"] / times["jax_offload"],
        "time_ratio_unchecked_vs_jax_accum": times["host_unchecked"] / times["jax_accum"],
        "time_ratio_unchecked_vs_jax_offload": times["host_unchecked"] / times["jax_offload"],
    }
    print(
        f"steps {steps:2d} {io_mode:13s} device/host MiB: host {_mib(memory['host'])}, "
        f"device {_mib(memory['device'])}, jax offload {_mib(offload_memory)}, "
        f"jax accum {_mib(accum_memory)} | device vs un-serialised "
        f"{run['device_ratio_host_vs_normal']:.3f} | time vs jax accum/offload "
        f"{run['time_ratio_vs_jax_accum']:.3f}/{run['time_ratio_vs_jax_offload']:.3f} "
        f"(unchecked {run['time_ratio_unchecked_vs_jax_accum']:.3f}/"
        f"{run['time_ratio_unchecked_vs_jax_offload']:.3f}) "
        f"{times['host'] * 1e3:.0f} ms",
        flush=True,
    )
    for session, _, _ in sessions.values():
        session.__exit__(None, None, None)
    return run


def measure_runs(problem: Problem, args: argparse.Namespace) -> list[dict[str, Any]]:
    """Every step count and io_mode against the un-serialised program and JAX, a record each."""
    normal = problem.attached(None, 1, "host", True)
    normal_memory = normal[0].memory_analysis(normal[1])
    print(f"un-serialised: device / host MiB {_mib(normal_memory)}", flush=True)
    runs = []
    width = problem.width
    for steps in args.steps:
        micro = problem.batch // steps
        shaped = (problem.x.reshape(steps, micro, width), problem.dy.reshape(steps, micro, width))
        xs, dys = jax.device_put(shaped, problem.target)
        jax_runs = {
            "jax_accum": jax_program(jax_accumulation, problem.params, xs, dys),
            "jax_offload": jax_program(jax_offload, problem.params, xs, dys),
        }
        reference = np.asarray(jax_runs["jax_accum"][0]()[0][0])
        np.testing.assert_allclose(np.asarray(jax_runs["jax_offload"][0]()[0][0]), reference, rtol=2e-3, atol=2e-4)
        base = Baselines(normal, normal_memory, jax_runs, reference)
        for io_mode in args.io_modes:
            if io_mode == "io_overlapped" and steps < 2:
                continue
            runs.append(measure_io_mode(problem, steps, io_mode, base, args.repeats))
    return runs


def store_costs(problem: Problem, args: argparse.Namespace) -> list[dict[str, Any]]:
    """The cost of one remote store in loops of each `--store-steps` length, checked and unchecked."""
    micro = max(1, problem.batch // 8)
    costs = []
    for steps in args.store_steps:
        cost = {
            checks: store_cost(problem.width, micro, steps, args.repeats, checks, args.device)
            for checks in (True, False)
        }
        costs.append({"steps": steps, "entry_bytes": micro * problem.width * 4, "seconds": cost})
        print(
            f"one store of {micro * problem.width * 4 / MiB:.2f} MiB in a loop of {steps}: "
            f"{cost[True] * 1e6:.0f} us checked, {cost[False] * 1e6:.0f} us unchecked",
            flush=True,
        )
    return costs


def plot(figures: dict[str, Any], out: Path) -> Path:
    """The ratios of each run's host-placement program against its baselines, as a picture."""
    groups = {
        f"{r['io_mode']} x{r['steps']}": {
            "device bytes / un-serialised": r["device_ratio_host_vs_normal"],
            "time / JAX accumulation": r["time_ratio_vs_jax_accum"],
            "time / JAX offload": r["time_ratio_vs_jax_offload"],
            "time unchecked / JAX accumulation": r["time_ratio_unchecked_vs_jax_accum"],
        }
        for r in figures["runs"]
    }
    title = (
        f"Batch serialisation, host placement ({figures['device']}, batch {figures['batch']}, width {figures['width']})"
    )
    return plot_ratios("batch_serialisation", title, groups, out=out)


def main() -> None:
    """Measure every run and the store cost, save the figures and draw the picture."""
    args = parse_args()
    problem = Problem.of(args)
    figures: dict[str, Any] = {
        "device": str(problem.target),
        "width": problem.width,
        "layers": problem.layers,
        "batch": problem.batch,
        "runs": [],
        "store_cost": [],
    }
    figures["runs"] = measure_runs(problem, args)
    figures["store_cost"] = store_costs(problem, args)
    print(f"written to {save('batch_serialisation', figures, args.out)}")
    print(f"picture in {plot(figures, args.out)}")


if __name__ == "__main__":
    main()
