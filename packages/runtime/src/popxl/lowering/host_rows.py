"""Host-side NumPy layouts of variables: a variable's host value and each replica's row of it.

A variable's host value holds one value per replica group (or one value when
there is a single group); the device state holds one row per replica. An
"all_replicas" variable whose replicas within a group came to hold different
values (each updated its own copy, as on IPUs) is read back with one row per
replica, as popxl returns it, and placed again from those rows. A remote
variable's row is its buffer entry: flattened and padded, and cut into shards
when the variable is sharded over its shard domain.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from popxl.tensor import RemoteVariable, Variable

Array = np.ndarray[Any, Any]


def _per_replica(var: Variable, host: Array, replicas: int) -> bool:
    """Whether `host` holds a row per replica (see `host_values`): with groups of more than one replica,
    that shape differs from the host layout's, by its rows or, for one group, by its rank."""
    return var.replica_grouping.group_size > 1 and host.shape == (replicas, *var.shape)


def replica_values(var: Variable, host: Array, replicas: int) -> Array:
    """Per-replica values `(replicas, *shape)` of `var` from its host layout: a new array."""
    if _per_replica(var, host, replicas):
        return np.array(host)
    g = var.replica_grouping
    if g.num_groups > 1:
        return np.stack([host[g.group_of(r)] for r in range(replicas)])
    return np.broadcast_to(host, (replicas, *host.shape)).copy()


def replica_view(var: Variable, host: Array, replicas: int) -> Array:
    """`replica_values` to be read once and copied elsewhere: a read-only view where there is one group,
    so that a value on its way to the device is not copied on the host first."""
    if _per_replica(var, host, replicas):
        return host
    if var.replica_grouping.num_groups > 1:
        return replica_values(var, host, replicas)
    return np.broadcast_to(host, (replicas, *host.shape))


def host_values(var: Variable, rows: Array) -> Array:
    """Host layout of `var` from per-replica values: the first replica of each group, or, for an
    "all_replicas" variable (not memory-mapped) whose replicas of a group differ, every replica's row."""
    g = var.replica_grouping
    first = [g.members(k)[0] for k in range(g.num_groups)]
    # Compared (a pass over the rows) only where every replica's value is what popxl gives back.
    per_replica = var.retrieval_mode == "all_replicas" and g.group_size > 1 and not var.is_memmap
    if per_replica and any(not np.array_equal(rows[r], rows[first[g.group_of(r)]]) for r in range(len(rows))):
        return np.asarray(rows)
    if g.num_groups > 1:
        return np.stack([rows[r] for r in first])
    return np.asarray(rows[0])


def stored_rows(var: RemoteVariable, host: Array, replicas: int) -> Array:
    """Each replica's buffer entry for `var` from its host value."""
    rows = replica_view(var, host, replicas)
    if not var.sharded:
        return rows.reshape(replicas, *var.buffer.tensor_shape)
    c = var.buffer.tensor_shape[0]
    flat = rows.reshape(replicas, -1)
    padded = np.pad(flat, ((0, 0), (0, c * var.shard_over - flat.shape[1])))
    ranks = [var.shard_domain(r).index(r) for r in range(replicas)]
    return np.stack([padded[r, k * c : (k + 1) * c] for r, k in enumerate(ranks)])


def entry_values(var: RemoteVariable, entries: Array) -> Array:
    """Each replica's value of `var`, `(replicas, *group shape)`, from every replica's buffer entry."""
    replicas = entries.shape[0]
    if not var.sharded:
        return entries.reshape(replicas, *var.group_shape)
    size = math.prod(var.meta_shape)
    full = [np.concatenate([entries[m] for m in var.shard_domain(r)])[:size] for r in range(replicas)]
    return np.stack(full).reshape(replicas, *var.meta_shape)
