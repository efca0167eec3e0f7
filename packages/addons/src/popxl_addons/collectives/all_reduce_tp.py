"""Tensor-parallel all-reduces whose forward and gradient differ (Megatron-LM's f and g).

One op kind, `replicated_all_reduce_TP`, with two flags: with
`identical_inputs` the inputs are known to be equal across the group, so the
forward is an identity; with `identical_grad_inputs` the incoming gradients
are, so the gradient is an identity. An op flagged `identical_inputs` must be
rewritten into an identity by `apply_pre_alias_patterns` before a Session is
created, exactly as popxl-addons requires; a Session refuses it otherwise.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import popart
import popxl
from popxl.extension import (
    Attrs,
    Effects,
    GradBuilder,
    LoweringContext,
    Op,
    OpDef,
    PopartFacts,
    all_reduce_values,
    create_op,
    group_of,
    register,
)

__all__ = [
    "PatternNotAppliedError",
    "replicated_all_reduce_identical_inputs",
    "replicated_all_reduce_identical_grad_inputs",
    "replicated_all_reduce",
]

SUPPORTED_OPS = ("add", "mean", "mul", "min", "max", "and", "or", "square_add", "local")


class PatternNotAppliedError(RuntimeError, popart.popart_exception):
    """A program still holds an op that only the op-to-identity rewrite can lower."""


def _infer(specs: Sequence[popxl.TensorSpec], attrs: Attrs) -> list[popxl.TensorSpec]:
    return [specs[0]]


def _lower(ctx: LoweringContext, attrs: Attrs, x: Any) -> list[Any]:
    return [all_reduce_values(ctx, x, attrs["op"], attrs["group"])]


def _grad(gb: GradBuilder, op: Op, out_grads: Sequence[popxl.Tensor | None]) -> list[popxl.Tensor | None]:
    (dy,) = out_grads
    if dy is None:
        return [None]
    attrs = dict(op.attrs)
    attrs["identical_inputs"], attrs["identical_grad_inputs"] = (
        op.attrs["identical_grad_inputs"],
        op.attrs["identical_inputs"],
    )
    return [create_op(ALL_REDUCE_TP, [dy], attrs)[0]]


def _check(op: Op) -> None:
    if op.attrs["identical_inputs"]:
        raise PatternNotAppliedError(
            f"{op} is flagged identical_inputs: you need to run the `OpToIdentityPattern` pattern "
            "(call popxl_addons.core.apply_pre_alias_patterns(ir)) before creating the Session"
        )


ALL_REDUCE_TP = register(
    OpDef(
        "replicated_all_reduce_TP",
        _infer,
        _lower,
        grad=_grad,
        check=_check,
        effects=Effects(groupings=group_of),
        # An all-reduce of inputs known to be identical on every replica is an identity.
        popart=PopartFacts(identity_when=lambda op: bool(op.attrs["identical_inputs"])),
    )
)


def create_all_reduce(
    t: popxl.Tensor,
    op: str,
    group: popxl.ReplicaGrouping | None,
    identical_inputs: bool,
    identical_grad_inputs: bool,
    kind: str = "replicated_all_reduce_TP",
    allowed: tuple[str, ...] = ("add",),
) -> popxl.Tensor:
    """An all-reduce over `group` whose forward or gradient may be an identity; `allowed` names its ops.

    The output is named `<kind>_out`, as popxl-addons names its ops' outputs
    (`replicated_all_reduce_TP_out`, `replicated_all_reduce_strided_out`).
    """
    if op not in SUPPORTED_OPS:
        raise ValueError(f"Unknown collective op {op!r}: expected one of {SUPPORTED_OPS}")
    if op not in allowed:
        raise ValueError(f"{kind} supports only op in {allowed}, got {op!r}")
    group = group if group is not None else popxl.gir().replica_grouping()
    attrs = {
        "op": op,
        "group": group,
        "identical_inputs": identical_inputs,
        "identical_grad_inputs": identical_grad_inputs,
    }
    return create_op(ALL_REDUCE_TP, [t], attrs, names=[f"{kind}_out"])[0]


def replicated_all_reduce_identical_inputs(
    t: popxl.Tensor, op: str = "add", group: popxl.ReplicaGrouping | None = None
) -> popxl.Tensor:
    """Forward: identity (inputs are equal across `group`). Gradient: all-reduce sum over `group`."""
    return create_all_reduce(t, op, group, True, False)


def replicated_all_reduce_identical_grad_inputs(
    t: popxl.Tensor, op: str = "add", group: popxl.ReplicaGrouping | None = None
) -> popxl.Tensor:
    """Forward: all-reduce sum over `group`. Gradient: identity (gradients are equal across `group`)."""
    return create_all_reduce(t, op, group, False, True)


def replicated_all_reduce(t: popxl.Tensor, op: str = "add", group: popxl.ReplicaGrouping | None = None) -> popxl.Tensor:
    """All-reduce sum over `group`, forward and gradient."""
    return create_all_reduce(t, op, group, False, False)
