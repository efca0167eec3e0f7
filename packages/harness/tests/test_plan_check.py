"""`plan --check` runs the program the planner measured for the plan, not one of its own."""

from __future__ import annotations

import argparse
from typing import Any

import numpy as np
import pytest

import popxl
from popxl_addons.core import SerialisationPlan
from popxl_addons.core.planning.model import StepFigures
from popxl_addons.core.planning.programs import serialised_program as planner_program
from popxl_addons.harness import plan_cli
from popxl_addons.harness.cases import Case, Variant
from popxl_addons.harness.equivalence import Outcome
from popxl_addons.harness.models import NormLinear
from popxl_addons.harness.programs import feed, host_data
from popxl_addons.harness.programs import serialised_program as harness_program

MICRO_SHAPE = (4, 8)


def _checked_variant(plan: SerialisationPlan, monkeypatch: pytest.MonkeyPatch) -> Variant:
    """The variant `plan --check` checks for `plan`."""
    seen: list[Variant] = []

    def capture(variant: Variant, measure: bool = False) -> Outcome:
        seen.append(variant)
        return Outcome(variant, skipped="captured")

    monkeypatch.setattr(plan_cli, "check", capture)
    args = argparse.Namespace(target="popxl_addons.harness.models:NormLinear", kwargs={"out_features": 8})
    plan_cli._check(plan, args, MICRO_SHAPE)
    (variant,) = seen
    return variant


def _ops(ir: popxl.Ir) -> list[list[tuple[Any, ...]]]:
    """Every graph's ops: kind, tile set, and the shapes and dtypes in and out."""
    return [
        [
            (
                op.name,
                op.placement.tile_set,
                [(t.shape, t.dtype) for t in op.inputs],
                [(t.shape, t.dtype) for t in op.outputs],
            )
            for op in graph.ops
        ]
        for graph in ir.graphs
    ]


def _jaxpr(ir: popxl.Ir, feeds: dict[popxl.HostToDeviceStream, Any]) -> str:
    with popxl.Session(ir, "cpu", remote_memory="host") as session:
        return str(session.traced(feeds).jaxpr)


@pytest.mark.parametrize(
    "io_mode, policy",
    [("io", {}), ("io_overlapped", {"x": "keep", "norm/group_norm_out": "recompute"})],
)
def test_plan_check_builds_the_program_the_planner_measured(
    io_mode: str, policy: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    figures = StepFigures(
        steps=2, device_bytes=0, seconds=0.0, forward_share=0.5, activation_bytes={}, input_bytes={}, variable_bytes=0
    )
    plan = SerialisationPlan(
        steps=2,
        io_mode=io_mode,
        policy=policy,
        predicted_device_bytes=0,
        predicted_seconds=0.0,
        measured_device_bytes=0,
        budget_bytes=1,
        figures=figures,
        bandwidth=1.0,
    )
    variant = _checked_variant(plan, monkeypatch)
    checked = harness_program(variant)
    measured = planner_program(lambda: NormLinear(8), popxl.TensorSpec(MICRO_SHAPE, popxl.float32), 2, io_mode, policy)
    assert _ops(checked.ir) == _ops(measured.ir)
    data = host_data(variant, checked, np.random.default_rng(0))
    assert _jaxpr(checked.ir, feed(checked, data)) == _jaxpr(measured.ir, measured.feeds)


def test_the_planner_step_is_a_training_step() -> None:
    with pytest.raises(ValueError, match="the planner's step has a gradient"):
        Case("forward", lambda layout: NormLinear(8), MICRO_SHAPE, planner_step=True)
