"""Reduce-scattered gradients of replica-sharded variables pair with their variables by name order.

`NamedTensors.tensors` orders tensors by name, so a program that zips the
variables' `tensors` with their gradients' pairs them correctly only when each
reduce-scattered gradient's name sorts as its variable's does. popxl names a
reduce-scatter's output after its input (`<input>_reduce_scattered`,
python/popxl/ops/collectives/replicated_reduce_scatter.py); a generic name
made unique by a counter (`..._out`, `..._out__t10`, `..._out__t2`, ...) sorts
by counter digits instead and pairs them wrongly.
"""

from __future__ import annotations

import numpy as np

import popxl
from popxl import ops
from popxl_addons.core import NamedTensors

N = 2
SHAPE = (3, 2)
KEYS = [f"w{i:02d}" for i in range(12)]


def test_reduce_scattered_gradients_pair_with_their_replica_sharded_variables() -> None:
    rng = np.random.default_rng(5)
    init = {k: rng.normal(size=SHAPE).astype(np.float32) for k in KEYS}
    grads_in = {k: rng.normal(size=(N, *SHAPE)).astype(np.float32) for k in KEYS}

    ir = popxl.Ir(replication=N)
    with ir.main_graph:
        whole = {}
        shards = {}
        for k in KEYS:
            whole[k], shards[k] = popxl.replica_sharded_variable(init[k], popxl.float32, name=k)
        variables = NamedTensors.from_dict(shards)
        streams = {k: popxl.h2d_stream(SHAPE, popxl.float32, name=f"{k}_grad") for k in KEYS}
        grads = NamedTensors.from_dict(
            {
                k: ops.collectives.replicated_reduce_scatter(
                    ops.host_load(streams[k]), configure_output_for_replicated_tensor_sharding=True
                )
                for k in KEYS
            }
        )
        # Each gradient is named after its input (the host-loaded gradient), as in popxl.
        assert grads.to_dict()["w03"].name == "w03_grad_hostload_reduce_scattered"
        pairs = list(zip(variables.tensors, grads.tensors, strict=True))
        by_key = variables.to_mapping(grads)
        assert [g for _, g in pairs] == [by_key[v] for v, _ in pairs]
        for v, g in pairs:
            ops.var_updates.accumulate_(v, g)

    with popxl.Session(ir, "cpu") as session:
        session.run({streams[k]: grads_in[k] for k in KEYS})
        for k in KEYS:
            np.testing.assert_allclose(
                session.get_tensor_data(whole[k]), init[k] + grads_in[k].sum(0), rtol=1e-6, atol=1e-6
            )
