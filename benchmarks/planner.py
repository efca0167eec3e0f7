"""The batch-serialisation planner at three device budgets (about 60%, 30% and 15% of the un-serialised
footprint) on the fwd+grad MLP of batch_serialisation.py (`--model mlp`) or a transformer block stack
(`--model transformer`, transformer.py), side by side in one run with:

- the exhaustive best: every steps x io_mode x per-layer choice (host, recompute or keep for all of a
  layer's activations, a transformer block's attention and MLP being layers; host or keep for the input),
  each compiled and timed;
- the greedy baseline: everything recomputed (inputs to host), at the smallest steps that fits;
- the trivial plan: everything to host, at the smallest steps that fits;
- JAX: `lax.scan` over the micro-batches under `jax.checkpoint` with `save_and_offload_only_these_names`
  (activations offloaded to pinned host), at the smallest steps that fits.

The planner's plan and the exhaustive, greedy and trivial plans of each budget are timed again together,
in alternation, for the time ratios.

Targets (issue 22): within budget every time; time <= 1.05x the exhaustive best and never slower than
greedy or trivial; predicted device bytes within 10% of the compiled figure; planning time below five
compiles of one candidate. Figures go to out/bench/planner_<model>.json (or `--out`).
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import jax
import numpy as np
from batch_serialisation import MLP, jax_offload, jax_program
from common import add_out_option, interleaved, save
from transformer import TransformerStack, jax_params
from transformer import jax_offload as transformer_offload

import popxl
from popxl_addons.core import plan_batch_serialisation
from popxl_addons.core.planning.programs import measure, micro_batch_spec, serialised_program, step_program

MiB = 2**20


def per_layer_policies(activations: list[str], inputs: list[str]) -> list[dict[str, str]]:
    """Every assignment of one choice per layer (host or keep for the inputs).

    A layer is the first component of an activation's name; one without a scope (a view of the input) goes
    with the first layer."""
    groups = sorted({n.split("/")[0] for n in activations if "/" in n})

    def layer(name: str) -> str:
        return name.split("/")[0] if "/" in name else groups[0]

    out = []
    for combo in itertools.product(("host", "recompute", "keep"), repeat=len(groups)):
        for inp in itertools.product(("host", "keep"), repeat=len(inputs)):
            choice = dict(zip(groups, combo))
            policy = {n: choice[layer(n)] for n in activations if n not in inputs}
            out.append({**policy, **dict(zip(inputs, inp))})
    return out


def time_together(
    make: Callable[[], Any], spec: popxl.TensorSpec, plans: Mapping[str, Mapping[str, Any]], device: str, repeats: int
) -> dict[str, float]:
    """Median seconds per run of each plan's serialised program, run in alternation so that noise hits all alike.

    Plans that are the same program (same steps, io_mode and policy) are run once and share the figure."""

    def key(c: Mapping[str, Any]) -> str:
        return f"{c['steps']} {c['io_mode']} {sorted(c['policy'].items())}"

    with contextlib.ExitStack() as stack:
        runs = {}
        for c in plans.values():
            if key(c) in runs:
                continue
            spec_c = micro_batch_spec(spec, c["steps"], 0)
            program = serialised_program(make, spec_c, c["steps"], c["io_mode"], c["policy"])
            session = stack.enter_context(popxl.Session(program.ir, device, remote_memory="host"))
            runs[key(c)] = partial(session.run, program.feeds)
        medians = interleaved(runs, repeats)
        return {name: medians[key(c)] for name, c in plans.items()}


def jax_runs(args: argparse.Namespace) -> dict[int, dict[str, float]]:
    """JAX's offloading scan over the model at each steps: its device bytes and median seconds."""
    rng = np.random.default_rng(0)
    target = jax.devices(args.device)[0]
    if args.model == "mlp":
        fn: Callable[..., Any] = jax_offload
        params: Any = [
            (rng.normal(0, args.width**-0.5, (args.width,) * 2).astype(np.float32), np.zeros(args.width, np.float32))
            for _ in range(args.layers)
        ]
        sample: tuple[int, ...] = (args.width,)
    else:
        fn = transformer_offload(args.heads)
        params = jax_params(args.layers, args.width)
        sample = (args.seq, args.width)
    params = jax.device_put(params, target)
    x = rng.normal(size=(args.batch, *sample)).astype(np.float32)
    runs = {}
    for steps in args.steps:
        xs = jax.device_put(x.reshape(steps, args.batch // steps, *sample), target)
        run, memory = jax_program(fn, params, xs, xs)
        runs[steps] = {"device_bytes": memory["device_bytes"], "seconds": interleaved({"r": run}, 3)["r"]}
    return runs


def parse_args() -> argparse.Namespace:
    """The command line."""
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--model", default="mlp", choices=["mlp", "transformer"], help="the model planned for")
    p.add_argument("--width", type=int, default=256, help="MLP width, or the transformer's hidden size")
    p.add_argument("--layers", type=int, default=2, help="MLP layers, or transformer blocks")
    p.add_argument("--seq", type=int, default=128, help="transformer sequence length")
    p.add_argument("--heads", type=int, default=12, help="transformer attention heads")
    p.add_argument("--batch", type=int, default=1024, help="global batch (of sequences, for the transformer)")
    p.add_argument(
        "--steps", type=lambda s: [int(v) for v in s.split(",")], default=[1, 2, 4, 8], help="step counts to consider"
    )
    p.add_argument(
        "--io-modes", type=lambda s: s.split(","), default=["compute", "io_overlapped"], help="io_modes to consider"
    )
    p.add_argument("--device", default="cpu", choices=["cpu", "gpu"], help="where popxl Sessions and JAX run")
    p.add_argument("--repeats", type=int, default=7, help="timed runs of each compared plan, in alternation")
    add_out_option(p)
    return p.parse_args()


@dataclass
class Setting:
    """The model planned for, its whole batch's input, the command line, and every candidate of the exhaustive
    search (compiled and timed once, reused for each budget) with the inputs among its activations."""

    make: Callable[[], Any]
    spec: popxl.TensorSpec
    args: argparse.Namespace
    candidates: list[dict[str, Any]] = field(default_factory=list)
    inputs: list[str] = field(default_factory=list)

    @classmethod
    def of(cls, args: argparse.Namespace) -> Setting:
        if args.model == "mlp":
            make: Callable[[], Any] = partial(MLP, args.layers)
            spec = popxl.TensorSpec((args.batch, args.width), popxl.float32)
        else:
            make = partial(TransformerStack, args.layers, args.heads)
            spec = popxl.TensorSpec((args.batch, args.seq, args.width), popxl.float32)
        return cls(make, spec, args)

    def measure_candidates(self) -> list[float]:
        """Compile and time every steps x io_mode x per-layer policy; the seconds each took."""
        first = step_program(self.make, micro_batch_spec(self.spec, self.args.steps[0], 0))
        names, self.inputs = list(first.activation_bytes), [n for n in first.input_bytes]
        compile_seconds: list[float] = []
        for steps in self.args.steps:
            for mode in self.args.io_modes:
                if mode == "io_overlapped" and steps < 2:
                    continue
                for policy in per_layer_policies(names, self.inputs):
                    start = time.perf_counter()
                    program = serialised_program(self.make, micro_batch_spec(self.spec, steps, 0), steps, mode, policy)
                    m = measure(program, self.args.device, timed=True)
                    compile_seconds.append(time.perf_counter() - start)
                    self.candidates.append(
                        {
                            "steps": steps,
                            "io_mode": mode,
                            "policy": policy,
                            "device_bytes": int(m["device_bytes"]),
                            "seconds": m["seconds"],
                        }
                    )
        return compile_seconds

    def smallest_steps(self, pick: Callable[[dict[str, Any]], bool], budget: int) -> dict[str, Any] | None:
        """The candidate `pick` chooses that fits `budget` at the fewest steps (the fastest of those)."""
        fitting = [c for c in self.candidates if pick(c) and c["device_bytes"] <= budget]
        return min(fitting, key=lambda c: (c["steps"], c["seconds"]), default=None)


def plan_for(setting: Setting, row: dict[str, Any], one_compile: float) -> Any:
    """The planner's plan for `row`'s budget, timed and measured into `row`; None where it found none."""
    args, budget = setting.args, row["budget"]
    start = time.perf_counter()
    try:
        plan = plan_batch_serialisation(
            setting.make, setting.spec, budget, io_modes=args.io_modes, steps_choices=args.steps, device=args.device
        )
    except ValueError as e:
        row["planner_error"] = str(e)
        plan = None
    row["planning_seconds"] = time.perf_counter() - start
    row["planning_in_compiles"] = row["planning_seconds"] / one_compile
    if plan is not None:
        spec = micro_batch_spec(setting.spec, plan.steps, 0)
        program = serialised_program(setting.make, spec, plan.steps, plan.io_mode, plan.policy)
        m = measure(program, args.device, timed=True)
        row["planner"] = {
            "steps": plan.steps,
            "io_mode": plan.io_mode,
            "policy": plan.policy,
            "predicted_bytes": plan.predicted_device_bytes,
            "device_bytes": plan.measured_device_bytes,
            "seconds": m["seconds"],
        }
        row["prediction_error"] = plan.predicted_device_bytes / plan.measured_device_bytes - 1
    return plan


def rivals_for(setting: Setting, row: dict[str, Any], jax_figures: dict[int, dict[str, float]]) -> None:
    """The exhaustive best, greedy and trivial plans and JAX's offloading that fit `row`'s budget, into `row`."""
    budget, inputs = row["budget"], setting.inputs
    fits = [c for c in setting.candidates if c["device_bytes"] <= budget]
    row["exhaustive"] = min(fits, key=lambda c: c["seconds"], default=None)
    row["greedy"] = setting.smallest_steps(
        lambda c: all(v == "recompute" or (n in inputs and v == "host") for n, v in c["policy"].items()), budget
    )
    row["trivial"] = setting.smallest_steps(lambda c: set(c["policy"].values()) == {"host"}, budget)
    jax_fit = [(s, r) for s, r in jax_figures.items() if r["device_bytes"] <= budget]
    row["jax_offload"] = {"steps": jax_fit[0][0], **jax_fit[0][1]} if jax_fit else None


def compare(setting: Setting, row: dict[str, Any]) -> None:
    """The planner's plan against its rivals: timed again together, in alternation, for the time ratios (timed
    apart, one plan's runs varied by 20% on a shared machine)."""
    rivals = {k: row[k] for k in ("exhaustive", "greedy", "trivial") if row[k] is not None}
    plans = {"planner": row["planner"], **rivals}
    together = time_together(setting.make, setting.spec, plans, setting.args.device, setting.args.repeats)
    row["interleaved_seconds"] = together
    for other in rivals:
        row[f"time_vs_{other}"] = together["planner"] / together[other]
    if row["jax_offload"] is not None:
        row["time_vs_jax_offload"] = row["planner"]["seconds"] / row["jax_offload"]["seconds"]


def print_row(row: dict[str, Any]) -> None:
    """One budget's plan and ratios on a line."""
    summary = {k: round(v, 3) for k, v in row.items() if k.startswith(("time_vs", "prediction", "planning_in"))}
    planned = row.get("planner", {})
    print(
        f"budget {row['share']:.0%} ({row['budget'] / MiB:.2f} MiB): plan steps={planned.get('steps')} "
        f"{planned.get('io_mode')} {planned.get('device_bytes', 0) / MiB:.2f} MiB "
        f"{planned.get('seconds', float('nan')) * 1e3:.1f} ms; {summary} {row.get('planner_error', '')}",
        flush=True,
    )


def main() -> None:
    """Measure every candidate, then plan and compare at each budget; save the figures."""
    args = parse_args()
    setting = Setting.of(args)
    whole = measure(step_program(setting.make, setting.spec), args.device)
    unserialised = int(whole["device_bytes"])
    print(f"un-serialised: {unserialised / MiB:.2f} MiB", flush=True)
    compile_seconds = setting.measure_candidates()
    print(f"{len(setting.candidates)} candidates measured", flush=True)
    jax_figures = jax_runs(args)
    figures: dict[str, Any] = {
        "model": args.model,
        "unserialised_bytes": unserialised,
        "width": args.width,
        "layers": args.layers,
        "seq": args.seq if args.model == "transformer" else None,
        "batch": args.batch,
        "budgets": [],
    }
    one_compile = float(np.median(compile_seconds))
    figures["candidates"] = setting.candidates
    figures["one_candidate_seconds"] = one_compile
    for share in (0.6, 0.3, 0.15):
        row: dict[str, Any] = {"share": share, "budget": int(share * unserialised)}
        plan = plan_for(setting, row, one_compile)
        rivals_for(setting, row, jax_figures)
        if plan is not None:
            compare(setting, row)
        figures["budgets"].append(row)
        print_row(row)
    print(f"figures in {save('planner_' + args.model, figures, args.out)}")


if __name__ == "__main__":
    main()
