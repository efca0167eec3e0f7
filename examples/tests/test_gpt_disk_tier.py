"""The phased GPT with its state on local disk trains as with its state in memory.

The entries a run moves are the same bits either way (`packages/runtime/tests/test_disk_tier.py` holds that
exactly, on arithmetic that is exact); but XLA fuses the arithmetic around a host callback otherwise than
around a slice of host memory, so the two programs round some sums differently. The bounds are those the
phased program keeps to the un-phased one (`test_gpt_phased.py`), which differs from it the same way."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from gpt_model import (  # sets jax_num_cpu_devices to 8 when JAX is not initialised yet
    Config,
    initial_weights,
    phased_feeds,
    phased_program,
    phased_variable,
    synthetic_batches,
)

import popxl


def _train(config: Config, remote_dir: Path | None) -> tuple[list[float], dict[str, Any]]:
    """Losses of a few steps from the same weights and data, and every variable's value after them."""
    ir, streams, stages = phased_program(config)
    session = popxl.Session(ir, "cpu", remote_dir=remote_dir)
    start = initial_weights(config)
    session.write_variables_data({phased_variable(stages, n): v for n, v in start.items()})
    losses = []
    with session:
        for tokens, labels in synthetic_batches(config):
            out = session.run(phased_feeds(config, session, streams, tokens, labels))
            losses.append(float(np.mean(out[streams["loss"]])))
    held = [v for v in ir.main_graph.variables if not isinstance(v, popxl.tensor.LoadedVariable)]
    return losses, {v.name: np.array(session.get_tensor_data(v)) for v in held}


@pytest.mark.parametrize("float16", [False, True], ids=["float32", "float16"])
def test_state_on_disk_trains_as_state_in_memory(tmp_path: Path, float16: bool) -> None:
    config = Config(tp=1, dp=1, layers=2, training_steps=3, float16=float16)
    in_memory = _train(config, None)
    on_disk = _train(config, tmp_path)
    assert np.isfinite(in_memory[0]).all() and np.isfinite(on_disk[0]).all()
    np.testing.assert_allclose(on_disk[0], in_memory[0], rtol=1e-3 if float16 else 1e-5)
    assert on_disk[1].keys() == in_memory[1].keys() and len(in_memory[1]) > 10
    # Where a gradient is near zero, Adam turns a rounding difference into up to a step of lr: half a step.
    weights = [n for n in in_memory[1] if ".adam." not in n]
    worst = max(float(np.max(np.abs(on_disk[1][n].astype(np.float64) - in_memory[1][n]))) for n in weights)
    assert worst < (config.lr / 2 if float16 else 1e-5), worst
