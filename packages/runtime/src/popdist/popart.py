"""PopDist's helpers for popart session options: the global replica layout of this launch."""

from __future__ import annotations

from typing import Any

import popdist


def configureSessionOptions(opts: Any) -> None:
    """Write this instance's place in the launch into `opts` (popart-style session options).

    Sets `replicatedGraphCount` and `enableReplicatedGraphs` (this instance's replicas),
    `globalReplicationFactor` and `globalReplicaOffset` (all replicas, and the global index of this
    instance's first one) and `enableDistributedReplicatedGraphs` (more than one instance). Outside a
    launch they describe one instance with one replica.
    """
    local = popdist.getNumLocalReplicas()
    opts.replicatedGraphCount = local
    opts.enableReplicatedGraphs = local > 1
    opts.enableDistributedReplicatedGraphs = popdist.getNumInstances() > 1
    opts.globalReplicationFactor = popdist.getNumTotalReplicas()
    opts.globalReplicaOffset = popdist.getReplicaIndexOffset()


def getDevice(*args: object, **kwargs: object) -> None:
    """PopDist's IPU device for this instance: there is none here; a Session picks JAX's devices."""
    raise RuntimeError(
        "popdist.popart.getDevice: there are no IPUs here; create a popxl.Session, which runs this instance's "
        "replicas on the devices popdist.init() gave it"
    )


__all__ = ["configureSessionOptions", "getDevice"]
