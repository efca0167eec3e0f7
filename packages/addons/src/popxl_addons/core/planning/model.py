"""The planner's cost model and search: device bytes and seconds of a plan, from measured calibration programs.

A calibration is the serialised program itself with every activation stored
to host memory, compiled and run (see `plan.calibrate`). Its device bytes and
seconds per step are the base of every plan of that `steps` and io_mode; a
plan's choices move it:

- "keep" adds the activation's stack (`steps` entries) and saves its
  transfers;
- "recompute" saves the transfers and costs the forward again for the
  recomputed share of the activations (the forward's share of a step's flops
  is XLA's `cost_analysis`). The recomputed activations come back together at
  the start of the gradient, not one at a time as loads do: all but the one
  used first may be held at once. That is an upper bound: where the program's
  peak lies elsewhere, they add nothing (measured: +0 to +2 activations of the
  MLP benchmark, as bounded; +0 of the tests' perceptron, bounded at +1.25);
- in io_overlapped, the next step's loads are in flight while a step
  computes: an activation that is not stored to host is one fewer (its bytes
  come off the calibration's in-flight figure).

Transfers cost their bytes over the host bandwidth measured on the machine.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field

from popxl_addons.core.transforms.batch_serialisation.policy import CHOICES

# Above this many policies per (steps, io_mode), the search is greedy rather than exhaustive.
EXHAUSTIVE_LIMIT = 3**8
# The part of a plan's device bytes that is an upper bound: recomputed activations that may be held together.
HELD = "recomputed activations held together"


@dataclass(frozen=True, kw_only=True)
class StepFigures:
    """What the planner knows of one micro-batch for a given `steps`.

    `device_bytes` and `seconds` (per step) are those of the serialised program
    with every activation stored to host, in compute mode; `overlapped_bytes`
    and `overlapped_ratio` are what io_overlapped adds to them (bytes) and
    multiplies them by (time), None where io_overlapped was not calibrated.
    """

    steps: int
    device_bytes: int
    seconds: float
    forward_share: float
    activation_bytes: Mapping[str, int]
    input_bytes: Mapping[str, int]
    variable_bytes: int
    overlapped_bytes: int | None = None
    overlapped_ratio: float | None = None


@dataclass(frozen=True)
class Estimate:
    """A candidate plan and what the model says it costs, with the parts of its device bytes."""

    steps: int
    io_mode: str
    policy: Mapping[str, str]
    device_bytes: int
    seconds: float
    parts: Mapping[str, int] = field(default_factory=dict)


def stored(figures: StepFigures, policy: Mapping[str, str]) -> dict[str, str]:
    """The choice of every tensor the forward loop hands on: forward inputs join once anything is recomputed."""
    choices = {name: policy.get(name, "host") for name in figures.activation_bytes}
    if "recompute" in choices.values():
        for name in figures.input_bytes:
            choices.setdefault(name, policy.get(name, "host"))
    return choices


def estimate(figures: StepFigures, io_mode: str, policy: Mapping[str, str], bandwidth: float) -> Estimate:
    """Predicted device bytes and seconds of running the batch as `steps` micro-batches with `policy`."""
    choices = stored(figures, policy)
    sizes = {**figures.input_bytes, **figures.activation_bytes}
    computed = [n for n in figures.activation_bytes if n not in figures.input_bytes]
    kept = figures.steps * sum(sizes[n] for n, c in choices.items() if c == "keep")
    host = sum(sizes[n] for n, c in choices.items() if c == "host")
    recomputed = [sizes[n] for n, c in choices.items() if c == "recompute"]
    held = sum(recomputed) - max(recomputed, default=0)
    overlapped = io_mode == "io_overlapped" and figures.steps > 1
    in_flight, ratio = 0, 1.0
    if overlapped:
        if figures.overlapped_bytes is None or figures.overlapped_ratio is None:
            raise ValueError(f"io_overlapped was not calibrated for steps={figures.steps}")
        not_loaded = sum(sizes[n] for n in computed if choices[n] != "host")
        in_flight, ratio = max(figures.overlapped_bytes - not_loaded, 0), figures.overlapped_ratio
    # The calibration stores everything: its transfers come off its time (but not below half of it,
    # should the bandwidth measured be low for this program's transfers).
    calibration_io = 2 * sum(figures.activation_bytes.values()) / bandwidth
    compute = max(figures.seconds - calibration_io, figures.seconds / 2)
    computed_bytes = sum(sizes[n] for n in computed) or 1
    compute *= 1 + figures.forward_share * sum(recomputed) / computed_bytes
    seconds = figures.steps * (compute + 2 * host / bandwidth) * ratio
    parts = {
        "variables and their gradients": figures.variable_bytes,
        "one step's temporaries": figures.device_bytes - figures.variable_bytes,
        "kept activations": kept,
        HELD: held,
        "transfers in flight": in_flight,
    }
    return Estimate(figures.steps, io_mode, dict(policy), sum(parts.values()), seconds, parts)


def max_held(figures: Sequence[StepFigures]) -> int:
    """The most any plan of `figures` may hold of recomputed activations (all but the largest, recomputed)."""
    return max(sum(f.activation_bytes.values()) - max(f.activation_bytes.values(), default=0) for f in figures)


def _options(figures: StepFigures) -> dict[str, tuple[str, ...]]:
    inputs = set(figures.input_bytes)
    return {n: ("host", "keep") if n in inputs else CHOICES for n in figures.activation_bytes}


def _exhaustive(figures: StepFigures) -> Iterator[dict[str, str]]:
    options = _options(figures)
    names = list(options)
    recomputable_inputs = [n for n in figures.input_bytes if n not in options]
    for combo in itertools.product(*(options[n] for n in names)):
        policy = dict(zip(names, combo))
        if "recompute" in combo and recomputable_inputs:
            # Forward inputs that only recomputation needs: stored to host or kept.
            for extra in itertools.product(("host", "keep"), repeat=len(recomputable_inputs)):
                yield {**policy, **dict(zip(recomputable_inputs, extra))}
        else:
            yield policy


def _greedy(figures: StepFigures, io_mode: str, bandwidth: float, budget: int) -> Iterator[dict[str, str]]:
    """Everything kept, then, while over budget, the change freeing most bytes per second it adds."""
    options = _options(figures)
    policy = {n: "keep" for n in options}
    yield dict(policy)
    while estimate(figures, io_mode, policy, bandwidth).device_bytes > budget:
        base = estimate(figures, io_mode, policy, bandwidth)
        best: tuple[float, str, str] | None = None
        for name, choices in options.items():
            for choice in choices:
                if choice == policy[name] or (policy[name] != "keep"):
                    continue
                trial = estimate(figures, io_mode, {**policy, name: choice}, bandwidth)
                freed = base.device_bytes - trial.device_bytes
                if freed > 0:
                    score = freed / max(trial.seconds - base.seconds, 1e-12)
                    if best is None or score > best[0]:
                        best = (score, name, choice)
        if best is None:
            return
        policy[best[1]] = best[2]
        yield dict(policy)


def search(
    figures: Sequence[StepFigures], io_modes: Sequence[str], bandwidth: float, budget: int, window: int | None = None
) -> tuple[list[Estimate], Estimate]:
    """Candidates predicted within `window` (default `budget`), fastest first, and the smallest footprint of all.

    A greedy search (many activations) goes on until a plan is predicted within `budget`."""
    window = budget if window is None else window
    fits: list[Estimate] = []
    smallest: Estimate | None = None
    for fig in figures:
        for mode in io_modes:
            if mode == "io_overlapped" and (fig.steps < 2 or fig.overlapped_bytes is None):
                continue
            exhaustive = len(CHOICES) ** len(fig.activation_bytes) <= EXHAUSTIVE_LIMIT
            policies = _exhaustive(fig) if exhaustive else _greedy(fig, mode, bandwidth, budget)
            for policy in policies:
                e = estimate(fig, mode, policy, bandwidth)
                if smallest is None or e.device_bytes < smallest.device_bytes:
                    smallest = e
                if e.device_bytes <= window:
                    fits.append(e)
    if smallest is None:
        raise ValueError("No candidate plans: no steps choice, or only io_overlapped with 1 step")
    fits.sort(key=lambda e: (e.seconds, e.device_bytes))
    return fits, smallest
