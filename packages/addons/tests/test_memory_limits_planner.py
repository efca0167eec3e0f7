"""One switch, POPXL_MEMORY_CHECK=0, turns the planner's own memory check off with popxl's."""

from __future__ import annotations

import numpy as np
import pytest

import popxl
from popxl.lowering import fit
from popxl_addons.core.planning import programs


def test_the_planners_input_data_check_honours_the_switch(monkeypatch: pytest.MonkeyPatch) -> None:
    ir = popxl.Ir()
    with ir.main_graph:
        stream = popxl.h2d_stream((64, 16), popxl.float32, name="x")
    monkeypatch.setattr(fit, "host_available", lambda: 100)
    with pytest.raises(popxl.OutOfMemoryError, match=r"The planner.s input data would take 4\.00 KiB"):
        programs._feeds([stream], 1)
    monkeypatch.setenv(fit.CHECK_VARIABLE, "0")
    (data,) = programs._feeds([stream], 1).values()
    assert data.shape == (64, 16) and data.dtype == np.float32
