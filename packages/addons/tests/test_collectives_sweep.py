"""This package's op kinds held to their registry declarations, as the runtime's own are."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np

import popxl
from popxl.op import REGISTRY
from popxl.op_contract import OpExample, check_op
from popxl_addons.collectives.all_reduce_tp import ALL_REDUCE_TP


def plain_all_reduce(ir: popxl.Ir) -> OpExample:
    """The all-reduce with neither flag: a sum over both replicas, forward and gradient."""
    x = np.random.default_rng(3).normal(size=(2, 4)).astype(np.float32)
    attrs = {"op": "add", "group": ir.replica_grouping(), "identical_inputs": False, "identical_grad_inputs": False}
    return OpExample([x], attrs, reference=lambda v: [jnp.broadcast_to(v.sum(0), v.shape)], replicas=2)


EXAMPLES = {"replicated_all_reduce_TP": plain_all_reduce}


def test_every_op_kind_of_this_package_has_an_example() -> None:
    ours = {name for name, opdef in REGISTRY.items() if opdef.lower.__module__ == ALL_REDUCE_TP.lower.__module__}
    assert ours == set(EXAMPLES)


def test_declarations_values_gradient_and_identity_rewrite() -> None:
    for name, factory in EXAMPLES.items():
        check_op(REGISTRY[name], factory)
