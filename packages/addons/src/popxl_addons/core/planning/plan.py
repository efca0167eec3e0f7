"""plan_batch_serialisation: choose steps, io_mode and each activation's place for a device-memory budget."""

from __future__ import annotations

import functools
import time
from collections import Counter
from collections.abc import Callable, Mapping, MutableMapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

import popxl
from popxl import ops
from popxl.units import format_bytes as _size
from popxl_addons.core.modules.graph import GraphWithNamedArgs
from popxl_addons.core.modules.module import Module
from popxl_addons.core.modules.named_tensors import NamedTensors
from popxl_addons.core.planning.model import HELD, Estimate, StepFigures, estimate, max_held, search
from popxl_addons.core.planning.programs import (
    flops,
    measure,
    micro_batch_spec,
    planned_serialisation,
    serialised_program,
    step_program,
)
from popxl_addons.core.transforms.batch_serialisation import IO_MODES, BatchSerialResult
from popxl_addons.core.transforms.batch_serialisation.fwd_and_grad import Serialisation
from popxl_addons.core.transforms.batch_serialisation.handles import Handles

# Plans compiled at most, fastest predicted first, before the planner gives up on the budget.
MAX_COMPILES = 4
# Besides the held recomputation (an upper bound), the model's device bytes are off by up to about this share of
# the compiled figure. A plan predicted over the budget by no more than that slack is a near miss: it may fit.
MODEL_ERROR = 0.05
# One program timed twice (best of three runs each) on a loaded 2-core CPU differed by up to about this share.
TIMING_NOISE = 0.05


@functools.cache
def host_bandwidth(device: str = "cpu", nbytes: int = 1 << 22, entries: int = 8) -> float:
    """Bytes per second a remote store and load move inside a program on `device` (measured once).

    Measured as the serialised programs move them: a loop storing then
    loading each entry of a remote buffer in host memory.
    """
    ir = popxl.Ir()
    with ir.main_graph:
        buffer = popxl.remote_buffer((nbytes // 4,), popxl.float32, entries, memory="host")
        value = popxl.variable(np.ones(nbytes // 4, np.float32), name="value")

        def body(i: popxl.Tensor, v: popxl.Tensor) -> tuple[popxl.Tensor, popxl.Tensor]:
            # The loaded value is carried into the next store, so that neither transfer is dead code.
            ops.remote_store(buffer, i, v)
            return i + 1, ops.remote_load(buffer, i)

        graph = ir.create_graph(body, popxl.TensorSpec((), popxl.int32), value.spec)
        ops.repeat(graph, entries, popxl.constant(np.int32(0)), value)
    with popxl.Session(ir, device, checks=False) as session:
        session.run()
        best = float("inf")
        for _ in range(3):
            start = time.perf_counter()
            session.run()
            best = min(best, time.perf_counter() - start)
    return 2 * entries * (nbytes // 4) * 4 / best


def _policy(policy: Mapping[str, str]) -> str:
    """A policy as written, or, for many activations, how many get each choice."""
    if len(policy) <= 6:
        return str(dict(policy))
    counts = Counter(policy.values())
    return "{" + ", ".join(f"{counts[c]} {c}" for c in ("host", "recompute", "keep") if counts[c]) + "}"


@dataclass(kw_only=True)
class SerialisationPlan:
    """A batch-serialisation plan within a device-memory budget, with the evidence for it.

    `policy` maps each activation's name to "host", "recompute" or "keep";
    `measured_device_bytes` is from compiling the plan's whole program.
    """

    steps: int
    io_mode: str
    policy: dict[str, str]
    predicted_device_bytes: int
    predicted_seconds: float
    measured_device_bytes: int
    budget_bytes: int
    figures: StepFigures
    bandwidth: float
    runner_up: Estimate | None = None
    rejected: list[tuple[Estimate, int]] = field(default_factory=list)

    def _alternatives(self, name: str) -> list[str]:
        lines = []
        base = estimate(self.figures, self.io_mode, self.policy, self.bandwidth)
        for choice in ("keep", "host", "recompute"):
            if choice == self.policy.get(name, "host"):
                continue
            if name in self.figures.input_bytes and choice == "recompute":
                continue
            other = estimate(self.figures, self.io_mode, {**self.policy, name: choice}, self.bandwidth)
            over = other.device_bytes > self.budget_bytes
            lines.append(
                f"{choice + ':':<10} {_size(other.device_bytes - base.device_bytes):>10} device, "
                f"{other.seconds - base.seconds:+.3g} s" + (" (over budget)" if over else "")
            )
        return lines

    def explain(self) -> str:
        """Why each activation got its choice, and what the next plan would have cost."""
        # Short lines, one figure each where they would run long, so that the explanation reads in a log.
        lines = [
            f"steps={self.steps}, io_mode={self.io_mode}, for a budget of {_size(self.budget_bytes)}:",
            f"  predicted {_size(self.predicted_device_bytes)} and {self.predicted_seconds:.3g} s; "
            f"compiled {_size(self.measured_device_bytes)}",
            f"host bandwidth {self.bandwidth / 1e9:.3g} GB/s; one micro-batch step {self.figures.seconds:.3g} s",
        ]
        sizes = {**self.figures.input_bytes, **self.figures.activation_bytes}
        for name, choice in sorted(self.policy.items()):
            lines.append(f"  {name} ({_size(sizes[name])} a step): {choice}; instead")
            lines.extend(f"    {other}" for other in self._alternatives(name))
        for e, measured in self.rejected:
            lines.append(
                f"rejected steps={e.steps}, {e.io_mode}, {_policy(e.policy)}: predicted {_size(e.device_bytes)}, "
                f"compiled {_size(measured)} (over budget)"
            )
        if self.runner_up is not None:
            e = self.runner_up
            lines.append(
                f"next plan: steps={e.steps}, {e.io_mode}, {_policy(e.policy)}: predicted {_size(e.device_bytes)}, "
                f"{e.seconds:.3g} s"
            )
        return "\n".join(lines)

    def apply(
        self,
        forward_graph: GraphWithNamedArgs,
        gradient_graph: GraphWithNamedArgs,
        named_inputs_for_grad_graph: NamedTensors,
        load_handles: MutableMapping[popxl.Tensor, Any],
        store_streams: MutableMapping[popxl.Tensor, popxl.DeviceToHostStream],
        store_buffers: MutableMapping[popxl.Tensor, Any],
        seed_input: popxl.Tensor | None = None,
        rows: int = 1,
    ) -> tuple[BatchSerialResult, BatchSerialResult]:
        """`batch_serialise_fwd_and_grad` with this plan's steps, io_mode and policy, its "host" activations
        in host memory whatever the Session's `remote_memory` (the plan's figures count them there)."""
        handles = Handles(load_handles, store_streams, store_buffers, seed_input)
        return self.serialisation(rows).serialise(forward_graph, gradient_graph, named_inputs_for_grad_graph, handles)

    def serialisation(self, rows: int = 1) -> Serialisation:
        """This plan's serialisation over `rows` rows, as the planner measured it (over one)."""
        return planned_serialisation(self.steps, self.io_mode, self.policy, rows)


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def _kind(e: Estimate) -> tuple[int, bool, bool]:
    """Plans the model errs on alike: the same steps, io_overlapped or not ("compute" and "io" differ only in
    the IPU's IO tiles), and recomputing or not (the held recomputation is an upper bound)."""
    return e.steps, e.io_mode == "io_overlapped", "recompute" in e.policy.values()


def _slack(e: Estimate) -> float:
    """How far the compiled program may come below the prediction: the held recomputation, and the model's error."""
    return e.parts.get(HELD, 0) + MODEL_ERROR * e.device_bytes


def _may_fit(e: Estimate, scale: Mapping[tuple[int, bool, bool], float], budget: int) -> bool:
    """Whether `e` may fit, given the compiled-over-predicted `scale` seen for its kind of plan (if any)."""
    if _kind(e) in scale:
        return e.device_bytes * scale[_kind(e)] <= budget
    return e.device_bytes - budget <= _slack(e)


def _nothing_fits(smallest: Estimate, budget: int, measured: int | None = None) -> ValueError:
    top = max(smallest.parts.items(), key=lambda kv: kv[1])
    reached = f"compiled {_size(measured)}" if measured is not None else f"predicted {_size(smallest.device_bytes)}"
    return ValueError(
        f"No plan fits a device budget of {_size(budget)}: the smallest footprint reached is {reached} "
        f"(steps={smallest.steps}, {smallest.io_mode}, {_policy(smallest.policy)}), dominated by {top[0]} "
        f"({_size(top[1])})"
    )


def _run_calibration(
    make_module: Callable[[], Module], spec: popxl.TensorSpec, steps: int, io_mode: str, device: str
) -> tuple[int, float]:
    """Device bytes and seconds per step of the all-host serialised program of `steps` micro-batches of `spec`.

    All `steps` run: fewer would time a shorter loop and leave out what grows with them (where host_store
    output waits on the device: with simulated replicas, or remote memory on the device)."""
    m = measure(serialised_program(make_module, spec, steps, io_mode, {}), device, timed=True)
    return int(m["device_bytes"]), m["seconds"] / steps


def _between(x: float, x0: float, x1: float, y0: float, y1: float) -> float:
    return y0 if x1 == x0 else y0 + (y1 - y0) * (x - x0) / (x1 - x0)


def calibrate(
    make_module: Callable[[], Module],
    input_spec: popxl.TensorSpec,
    batch_axis: int,
    steps_choices: Sequence[int],
    io_modes: Sequence[str],
    device: str,
    say: Callable[[str], None],
) -> list[StepFigures]:
    """StepFigures for every `steps_choices`, from all-host programs compiled at the fewest (above one) and
    most steps.

    Elsewhere, bytes and seconds per step are interpolated linearly in the
    micro-batch size; io_overlapped is calibrated at the most steps and
    scaled (its time gain taken as none where within TIMING_NOISE). The
    forward's share of a step's flops is XLA's `cost_analysis`.
    """
    # One step is the un-serialised program, whose figures lie off the line through the serialised ones:
    # it is extrapolated (and a plan for it compiled, as every plan is).
    few, most = min(s for s in steps_choices if s > 1 or s == max(steps_choices)), max(steps_choices)
    points = {}
    for steps in sorted({few, most}):
        spec = micro_batch_spec(input_spec, steps, batch_axis)
        points[steps] = _run_calibration(make_module, spec, steps, "compute", device)
        say(f"compiled the all-host program for steps={steps}")
    overlapped: tuple[int, float] | None = None
    if "io_overlapped" in io_modes and most > 1:
        spec = micro_batch_spec(input_spec, most, batch_axis)
        ov_bytes, ov_seconds = _run_calibration(make_module, spec, most, "io_overlapped", device)
        ratio = ov_seconds / points[most][1]
        # A gain within the timing noise is no gain: io_overlapped then costs its memory for nothing.
        overlapped = (ov_bytes - points[most][0], ratio if ratio < 1 - TIMING_NOISE else max(ratio, 1.0))
        say(f"compiled the all-host io_overlapped program for steps={most}")
    # Built, not compiled: each steps' activation bytes, and the flops of one micro-batch at the most steps.
    described = {s: step_program(make_module, micro_batch_spec(input_spec, s, batch_axis)) for s in steps_choices}
    forward = step_program(make_module, micro_batch_spec(input_spec, most, batch_axis), gradient=False)
    share = min(flops(forward, device) / max(flops(described[most], device), 1.0), 1.0)
    rows = input_spec.shape[batch_axis]
    figures = []
    for steps, program in described.items():
        mb, mb0, mb1 = rows / steps, rows / few, rows / most
        device_bytes = _between(mb, mb0, mb1, points[few][0], points[most][0])
        seconds = _between(mb, mb0, mb1, points[few][1], points[most][1])
        figures.append(
            StepFigures(
                steps=steps,
                device_bytes=int(device_bytes),
                seconds=seconds,
                forward_share=share,
                activation_bytes=program.activation_bytes,
                input_bytes=program.input_bytes,
                variable_bytes=program.variable_bytes,
                overlapped_bytes=None if overlapped is None else int(overlapped[0] * most / steps),
                overlapped_ratio=None if overlapped is None else overlapped[1],
            )
        )
    return figures


def _checked_choices(
    input_spec: popxl.TensorSpec,
    device_budget_bytes: int,
    batch_axis: int,
    io_modes: Sequence[str],
    steps_choices: Sequence[int] | None,
) -> tuple[int, list[int]]:
    """The budget and the steps to try, once the planner's arguments are checked."""
    unknown = [m for m in io_modes if m not in IO_MODES]
    if unknown or not io_modes:
        raise ValueError(f"io_modes must be a non-empty subset of {IO_MODES}, got {tuple(io_modes)}")
    if not isinstance(device_budget_bytes, int | np.integer) or device_budget_bytes <= 0:
        raise ValueError(f"device_budget_bytes must be a positive int, got {device_budget_bytes!r}")
    batch = input_spec.shape[batch_axis]
    choices = sorted(set(steps_choices)) if steps_choices else _divisors(batch)
    bad = [s for s in choices if not isinstance(s, int) or s < 1 or batch % s]
    if bad:
        raise ValueError(f"steps_choices {bad} do not divide the global batch of {batch} (axis {batch_axis})")
    return int(device_budget_bytes), choices


def _candidates(figures: list[StepFigures], io_modes: Sequence[str], rate: float, budget: int) -> list[Estimate]:
    """The plans worth compiling, in the order to compile them; raises when none may fit."""
    window = int((budget + max_held(figures)) / (1 - MODEL_ERROR))
    near, smallest = search(figures, io_modes, rate, budget, window)
    near = [e for e in near if _may_fit(e, {}, budget)]
    if not near:
        raise _nothing_fits(smallest, budget)
    # Fastest first; near misses only while predicted faster than every plan predicted to fit.
    remaining = sorted(near, key=lambda e: (e.seconds, e.device_bytes))
    fastest_fit = next((i for i, e in enumerate(remaining) if e.device_bytes <= budget), len(remaining))
    return remaining[:fastest_fit] + [e for e in remaining if e.device_bytes <= budget]


def _compiled_bytes(
    make_module: Callable[[], Module], input_spec: popxl.TensorSpec, batch_axis: int, device: str, plan: Estimate
) -> int:
    """The device bytes of `plan`'s whole program, compiled."""
    spec = micro_batch_spec(input_spec, plan.steps, batch_axis)
    program = serialised_program(make_module, spec, plan.steps, plan.io_mode, plan.policy)
    return int(measure(program, device)["device_bytes"])


def _first_fit(
    remaining: list[Estimate],
    compiled_bytes: Callable[[Estimate], int],
    figures: list[StepFigures],
    rate: float,
    budget: int,
    say: Callable[[str], None],
) -> SerialisationPlan:
    """The first of the `remaining` plans whose compiled program fits `budget`, compiling at most MAX_COMPILES;
    raises when none does."""
    rejected: list[tuple[Estimate, int]] = []
    scale: dict[tuple[int, bool, bool], float] = {}  # compiled bytes over predicted, from the plans rejected
    # Near misses are never the last compile, which is the fastest plan predicted to fit.
    near_tries = 0
    # Plans this machine's memory cannot run at all (popxl refuses them before they run), with the last refusal.
    too_large: list[Estimate] = []
    refusal: popxl.OutOfMemoryError | None = None
    while remaining and len(rejected) + len(too_large) < MAX_COMPILES:
        candidate = remaining.pop(0)
        if candidate.device_bytes > budget:
            if near_tries == MAX_COMPILES - 1:
                continue
            near_tries += 1
        try:
            measured = compiled_bytes(candidate)
        except popxl.OutOfMemoryError as e:
            too_large.append(candidate)
            refusal = e
            say(f"plan steps={candidate.steps} {candidate.io_mode} does not fit this machine's memory")
            continue
        say(f"compiled plan {len(rejected) + 1}: steps={candidate.steps} {candidate.io_mode}: {_size(measured)}")
        if measured <= budget:
            return SerialisationPlan(
                steps=candidate.steps,
                io_mode=candidate.io_mode,
                policy=dict(candidate.policy),
                predicted_device_bytes=candidate.device_bytes,
                predicted_seconds=candidate.seconds,
                measured_device_bytes=measured,
                budget_bytes=budget,
                figures=next(f for f in figures if f.steps == candidate.steps),
                bandwidth=rate,
                runner_up=remaining[0] if remaining else None,
                rejected=rejected,
            )
        rejected.append((candidate, measured))
        # The model under-predicted: for plans of the same kind, what it predicts next is taken as that much
        # larger; for others, nothing is known beyond the model's usual error.
        key = _kind(candidate)
        scale[key] = max(scale.get(key, 0.0), measured / candidate.device_bytes)
        remaining = [e for e in remaining if _may_fit(e, scale, budget)]
    if not rejected:
        raise popxl.OutOfMemoryError(
            f"No plan fits this machine: the {len(too_large)} plan(s) compiled fit the device budget, but the "
            f"machine's memory cannot run them. The last:\n{refusal}"
        )
    best_rejected = min(rejected, key=lambda r: r[1])
    raise _nothing_fits(best_rejected[0], budget, best_rejected[1])


def plan_batch_serialisation(
    make_module: Callable[[], Module],
    input_spec: popxl.TensorSpec,
    device_budget_bytes: int,
    *,
    batch_axis: int = 0,
    io_modes: Sequence[str] = IO_MODES,
    steps_choices: Sequence[int] | None = None,
    device: str = "cpu",
    bandwidth: float | None = None,
    progress: Callable[[str], None] | None = None,
) -> SerialisationPlan:
    """The fastest predicted plan whose compiled program fits `device_budget_bytes`.

    `make_module()` returns a fresh Module of one input; `input_spec` is the
    whole global batch, split along `batch_axis` into `steps` micro-batches
    (`steps_choices`, default every divisor of the batch). `bandwidth` (bytes
    per second to host and back) is measured once when not given. `progress`
    receives one line per stage. Raises ValueError when no plan fits the budget, and `popxl.OutOfMemoryError`
    when this machine's memory cannot run the planner's programs or the plans that fit.
    """
    budget, choices = _checked_choices(input_spec, device_budget_bytes, batch_axis, io_modes, steps_choices)
    say = progress or (lambda line: None)
    rate = bandwidth if bandwidth is not None else host_bandwidth(device)
    try:
        figures = calibrate(make_module, input_spec, batch_axis, choices, io_modes, device, say)
    except popxl.OutOfMemoryError as e:
        raise popxl.OutOfMemoryError(
            f"No plan can be measured: the planner's all-host program does not fit this machine.\n{e}"
        ) from e
    remaining = _candidates(figures, io_modes, rate, budget)
    compiled_bytes = functools.partial(_compiled_bytes, make_module, input_spec, batch_axis, device)
    return _first_fit(remaining, compiled_bytes, figures, rate, budget, say)
