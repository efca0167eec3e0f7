"""Where each activation the gradient graph needs lives between the forward and gradient loops.

"host": stored each step to a remote buffer (host memory, or device memory
with `Session(remote_memory="device")` unless the transform's
`activation_memory` places it) and loaded back; "keep": held on the
device in a stack of one entry per step, written by the forward loop and read
by the gradient loop; "recompute": not stored at all, the gradient graph runs
the forward graph again on the forward inputs (which are then stored).
"""

from __future__ import annotations

import re
from collections.abc import Mapping

import popxl
from popxl.transforms import ExpectedConnectionType, GradGraphInfo
from popxl_addons.core.modules.named_tensors import NamedTensors

CHOICES = ("host", "recompute", "keep")
Policy = Mapping[str, str] | Mapping[popxl.Tensor, str] | Mapping[str | popxl.Tensor, str]


def serialisable_activations(gradient_graph_info: GradGraphInfo, named_inputs: NamedTensors) -> dict[str, popxl.Tensor]:
    """The forward tensors the gradient graph needs that are not given by name, under their policy names.

    A policy name is the tensor's name, or its id where names repeat.
    """
    named = set(named_inputs.tensors)
    tensors = [
        ec.fwd_tensor
        for ec in gradient_graph_info.expected_inputs
        if ec.connection_type is ExpectedConnectionType.Fwd and ec.fwd_tensor not in named
    ]
    counts: dict[str, int] = {}
    for t in tensors:
        counts[t.name] = counts.get(t.name, 0) + 1
    return {(t.name if counts[t.name] == 1 else t.id): t for t in tensors}


def resolve_policy(
    activations: Mapping[str, popxl.Tensor], forward_inputs: Mapping[str, popxl.Tensor], policy: Policy | None
) -> dict[popxl.Tensor, str]:
    """The choice for each activation and forward input ("host" unless `policy` says otherwise), checked.

    Forward inputs are activations once another activation is recomputed.
    """
    known = {**forward_inputs, **activations}
    choices = dict.fromkeys(known.values(), "host")
    inputs = set(forward_inputs.values())
    for key, choice in (policy or {}).items():
        if isinstance(key, popxl.Tensor):
            if key not in choices:
                raise ValueError(f"Policy tensor {key.id} is not an activation the gradient graph needs")
            t, name = key, key.name
        elif key in known:
            t, name = known[key], key
        else:
            raise ValueError(
                f"Policy names {key!r}, not an activation of the gradient graph: expected one of {list(known)}"
            )
        if choice not in CHOICES:
            raise ValueError(f"Unknown choice {choice!r} for activation {name!r}: expected one of {CHOICES}")
        if choice == "recompute" and t in inputs:
            raise ValueError(f"Activation {name!r} is an input of the forward graph: it can't be recomputed")
        choices[t] = choice
    return choices


def kept_arg_name(name: str) -> str:
    """The arg name of an activation's device stack (dots and slashes would nest names)."""
    return "kept." + re.sub(r"[^0-9A-Za-z_]", "_", name)
