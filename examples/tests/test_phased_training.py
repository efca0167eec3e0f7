"""The phased example trains to the same losses as the same model trained un-phased, and holds less on the device."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from phased_training import Config, train


@pytest.mark.slow
def test_phased_loss_curve_matches_unphased_and_frees_device_memory() -> None:
    result = train(Config(training_steps=4, layers=2, steps=4), show_progress=False)
    phased, unphased = result["curves"]["phased"], result["curves"]["unphased"]
    np.testing.assert_allclose(phased, unphased, rtol=1e-4)
    assert phased[-1] < phased[0]  # it learns
    memory = result["memory"]
    assert memory["phased"]["device_bytes"] < memory["unphased"]["device_bytes"] / 2
    assert memory["phased"]["host_bytes"] > memory["unphased"]["host_bytes"]


@pytest.mark.slow
def test_float16_training_is_finite_and_tracks_float32() -> None:
    # Matrices start at std 0.02, as GPT-style models do: the layer norms see rows of std ~0.03.
    config = Config(training_steps=4, layers=2, steps=4, init_std=0.02)
    half = train(Config(**{**config.__dict__, "float16": True}), show_progress=False)["curves"]
    full = train(config, show_progress=False)["curves"]
    assert np.isfinite(half["phased"]).all() and np.isfinite(half["unphased"]).all()
    np.testing.assert_allclose(half["phased"], full["phased"], rtol=2e-3)
    np.testing.assert_allclose(half["phased"], half["unphased"], rtol=2e-3)
    assert half["phased"][-1] < half["phased"][0]
