"""Both programs trained side by side from the same weights on the same data."""

from __future__ import annotations

import time
from typing import Any

import jax
import numpy as np

import popxl
from gpt_model.config import Array, Config
from gpt_model.data import initial_weights, per_replica, phased_feeds, synthetic_batches
from gpt_model.phased import phased_program, phased_variable
from gpt_model.unphased import unphased_program


def make_session(ir: popxl.Ir, config: Config) -> popxl.Session:
    """A CPU Session of `ir`: a JAX device per replica where there are enough, else replicas simulated on one."""
    mode = "devices" if jax.device_count() >= config.replicas else "simulate"
    return popxl.Session(ir, "cpu", replica_mode=mode)


def train(config: Config) -> dict[str, Any]:
    """Train both programs on the same data from the same weights; their losses, memory figures and run times."""
    data = synthetic_batches(config)
    start = initial_weights(config)
    phased_ir, phased_streams, stages = phased_program(config)
    plain_ir, plain_streams, plain_weights = unphased_program(config)
    phased, plain = make_session(phased_ir, config), make_session(plain_ir, config)
    phased.write_variables_data({phased_variable(stages, n): v for n, v in start.items()})
    plain.write_variables_data({plain_weights.get(n): v for n, v in start.items()})

    def feeds_phased(tokens: Array, labels: Array) -> dict[Any, Array]:
        return phased_feeds(config, phased, phased_streams, tokens, labels)

    def feeds_plain(tokens: Array, labels: Array) -> dict[Any, Array]:
        t, y = per_replica(config, tokens, labels)
        return {plain_streams["tokens"]: t, plain_streams["labels"]: y.reshape(config.replicas, -1)}

    curves: dict[str, list[float]] = {"phased": [], "unphased": []}
    seconds = {"phased": 0.0, "unphased": 0.0}
    with phased, plain:
        for tokens, labels in data:
            begin = time.perf_counter()
            out = phased.run(feeds_phased(tokens, labels))
            seconds["phased"] += time.perf_counter() - begin
            curves["phased"].append(float(np.mean(out[phased_streams["loss"]])))
            begin = time.perf_counter()
            out = plain.run(feeds_plain(tokens, labels))
            seconds["unphased"] += time.perf_counter() - begin
            curves["unphased"].append(float(np.mean(out[plain_streams["loss"]])))
        memory = {
            "phased": phased.memory_analysis(feeds_phased(*data[0])),
            "unphased": plain.memory_analysis(feeds_plain(*data[0])),
        }
        # The trained weights, read back whole from the phased program's shards, against the un-phased ones.
        weights = {n: (phased_variable(stages, n), plain_weights.get(n)) for n in start}
        got = phased.get_tensors_data([a for a, _ in weights.values()])
        want = plain.get_tensors_data([b for _, b in weights.values()])
    differences = {n: float(np.max(np.abs(got[a].astype(np.float32) - want[b]))) for n, (a, b) in weights.items()}
    state = {"sharded": sum(s.state_bytes() for s in stages), "unsharded": sum(s.state_bytes(False) for s in stages)}
    return {
        "curves": curves,
        "memory": memory,
        "seconds": seconds,
        "state_bytes": state,
        "weight_differences": differences,
    }
