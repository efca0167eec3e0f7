"""The planner counts this machine's memory too: programs it cannot run are refused, and it says so."""

from __future__ import annotations

from collections.abc import Iterator
from functools import partial
from typing import Any

import numpy as np
import pytest

import popxl
from popxl import ops
from popxl.lowering import fit
from popxl_addons.core import Module, plan_batch_serialisation
from popxl_addons.core.planning import plan as planning

pytestmark = pytest.mark.placement

SPEC = popxl.TensorSpec((64, 16), popxl.float32)


class Perceptron(Module):
    def build(self, x: popxl.Tensor) -> popxl.Tensor:
        w = self.add_variable_input("w", partial(np.full, (16, 16), 0.1), x.dtype)
        return ops.tanh(x @ w)


@pytest.fixture(autouse=True)
def fresh_reading() -> Iterator[None]:
    """Each test reads the machine's memory (or its stand-in) anew."""
    fit.forget_reading()
    yield
    fit.forget_reading()


def test_calibration_that_cannot_run_here_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    # Room for the input data (64 x 16 float32, and the output gradient alike) and nothing more: the
    # planner's first Session is refused by popxl's own check, before it runs.
    monkeypatch.setattr(fit, "host_available", lambda: 2 * 64 * 16 * 4 + 1)
    with pytest.raises(popxl.OutOfMemoryError, match="No plan can be measured") as caught:
        plan_batch_serialisation(Perceptron, SPEC, 1 << 30, steps_choices=[2, 4], bandwidth=1e9)
    assert "Largest buffers:" in str(caught.value)


def test_plans_this_machine_cannot_run_are_reported(monkeypatch: pytest.MonkeyPatch) -> None:
    measure = planning.measure

    def refusing(program: Any, device: str, timed: bool = False) -> dict[str, float]:
        # The calibrations run; every plan compiled after them is refused as the Session refuses it.
        if not timed:
            raise popxl.OutOfMemoryError("Session.run would allocate 9 GiB of host memory")
        return measure(program, device, timed)

    monkeypatch.setattr(planning, "measure", refusing)
    with pytest.raises(popxl.OutOfMemoryError, match=r"No plan fits this machine: the \d plan\(s\) compiled") as e:
        plan_batch_serialisation(Perceptron, SPEC, 1 << 30, steps_choices=[2, 4], bandwidth=1e9)
    assert "9 GiB of host memory" in str(e.value)
