"""The phased GPT (tensor parallel 4 x data parallel 2) trains to the un-phased program's losses."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from gpt_model import (  # sets jax_num_cpu_devices to 8 when JAX is not initialised yet
    Config,
    make_session,
    phased_feeds,
    phased_program,
    synthetic_batches,
    train,
)
from jax.extend.core import jaxprs_in_params


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
    # The stages recompute their activations in the backward: the host holds the state and the activations
    # between stages (and their gradients), not what attention and the feed-forward stored (2.9 times as
    # much host memory here when they were stored). Besides those, 2 % here: a step's tokens and labels,
    # the labels kept for the head's backward, the loss and the loss-scale seeds.
    boundary = 2 * (config.layers + 1) * config.steps * config.micro * config.sequence * config.width * 2
    assert memory["phased"]["host_bytes"] <= 1.05 * (state["sharded"] + boundary)


def test_float32_phased_losses_match_unphased() -> None:
    result = train(Config(training_steps=2, layers=1, float16=False))
    phased, unphased = result["curves"]["phased"], result["curves"]["unphased"]
    np.testing.assert_allclose(phased, unphased, rtol=1e-5)
    assert max(result["weight_differences"].values()) < 1e-5
    assert phased[-1] < phased[0]


def _equations(jaxpr: Any) -> int:
    """Equations of `jaxpr` and of every jaxpr inside it (a loop's body counts once)."""
    return sum(1 + sum(_equations(sub) for sub in jaxprs_in_params(e.params)) for e in jaxpr.eqns)


def _step_size(layers: int) -> int:
    """Equations of the phased training step, as JAX traces it, for a model of `layers` decoder layers."""
    config = Config(layers=layers, training_steps=1)
    ir, streams, _ = phased_program(config)
    with make_session(ir, config) as session:
        traced = session.traced(phased_feeds(config, session, streams, *synthetic_batches(config)[0]))
    return _equations(traced.jaxpr.jaxpr)


@pytest.mark.slow
def test_phased_step_does_not_grow_with_the_layer_count() -> None:
    # The layers run as loops over one layer's phases, so XLA compiles the same program, in the same time,
    # for any number of layers. Unrolled, each layer added thousands of equations (9145 at 1 layer,
    # 27442 at 4); a few dozen of slack allows for bookkeeping, not for a layer.
    one, four = _step_size(1), _step_size(4)
    assert one > 1000, one  # the whole step was counted, loop bodies included
    assert four <= one + 50, (one, four)
