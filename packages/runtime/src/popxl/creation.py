"""Creating constants and variables."""

from __future__ import annotations

from typing import Any

import numpy as np

from popxl import context, dtypes
from popxl.replica_grouping import ReplicaGrouping
from popxl.tensor import Constant, Variable


def _as_array(data: Any, dtype: Any | None) -> tuple[np.ndarray[Any, Any], dtypes.dtype]:
    arr = np.asarray(data)
    dt = dtypes.as_dtype(dtype) if dtype is not None else dtypes.as_dtype(arr)
    return np.array(arr, dtype=dt.as_numpy(), order="C"), dt


def constant(data: Any, dtype: Any | None = None, name: str | None = None) -> Constant:
    """An immutable tensor of the current graph holding `data` (64-bit data is narrowed)."""
    arr, dt = _as_array(data, dtype)
    return Constant(context.gcg(), context.name_scope_prefix() + (name or "t"), arr, dt)


def variable(
    data: Any,
    dtype: Any | None = None,
    name: str | None = None,
    downcast: bool = True,
    replica_grouping: ReplicaGrouping | None = None,
    retrieval_mode: str | None = None,
) -> Variable:
    """A persistent main-graph tensor initialised from host `data`.

    With a replica grouping of more than one group, `data` has a leading axis of
    `num_groups` and replica r starts from `data[group_of(r)]`.
    """
    g = context.gcg()
    if g is not g.ir.main_graph:
        raise ValueError(f"Variables can only be created in the main graph, not in {g.id!r}")
    arr, dt = _as_array(data, dtype)
    grouping = replica_grouping if replica_grouping is not None else g.ir.replica_grouping()
    if grouping.num_groups > 1 and (arr.ndim == 0 or arr.shape[0] != grouping.num_groups):
        raise ValueError(
            f"Variable {name or 't'!r} has grouping {grouping}: its data needs a leading axis of "
            f"{grouping.num_groups} groups, got shape {arr.shape}"
        )
    mode = retrieval_mode or "one_per_group"
    if mode not in ("one_per_group", "all_replicas"):
        raise ValueError(f"retrieval_mode must be 'one_per_group' or 'all_replicas', got {mode!r}")
    return Variable(g, context.name_scope_prefix() + (name or "t"), arr, dt, grouping, mode)
