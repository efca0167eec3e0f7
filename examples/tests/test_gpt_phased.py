"""The phased GPT (tensor parallel 4 x data parallel 2) trains to the un-phased program's losses."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from gpt_phased import Config, train  # sets jax_num_cpu_devices to 8 when JAX is not initialised yet


def test_float16_phased_losses_match_unphased_fall_and_stay_finite() -> None:
    result = train(Config(training_steps=3))
    phased, unphased = result["curves"]["phased"], result["curves"]["unphased"]
    assert np.isfinite(phased).all() and np.isfinite(unphased).all()
    np.testing.assert_allclose(phased, unphased, rtol=1e-3)
    assert phased[-1] < phased[0] - 0.5  # it learns the pattern
    memory = result["memory"]
    assert memory["phased"]["device_bytes"] < memory["unphased"]["device_bytes"]
    assert memory["phased"]["host_bytes"] > memory["unphased"]["host_bytes"]
    # Tensor-parallel weights are halved over the two data-parallel replicas, shared ones split eight ways.
    state = result["state_bytes"]
    assert state["sharded"] < 0.55 * state["unsharded"]
    # The shards, read back whole, are the un-phased weights: a misplaced shard would differ by the weights'
    # own size (std 0.05). Float16 rounding differs between the programs' gradient sums, and where a
    # gradient is near zero Adam turns that into up to a step of lr, so the bound is half a step.
    config = Config()
    assert max(result["weight_differences"].values()) < config.lr / 2


def test_float32_phased_losses_match_unphased() -> None:
    result = train(Config(training_steps=2, layers=1, float16=False))
    phased, unphased = result["curves"]["phased"], result["curves"]["unphased"]
    np.testing.assert_allclose(phased, unphased, rtol=1e-5)
    assert max(result["weight_differences"].values()) < 1e-5
    assert phased[-1] < phased[0]
