"""Where this instance stands in a multi-instance run, as Graphcore's `popdist` tells popxl programs.

Graphcore's PopDist reads the environment that its launcher PopRun sets for each instance (process)
of a program. This module, shipped with the popxl-xla runtime, does the same for this project's
`poprun` (`popdist.launcher`), which starts the instances on one host, or runs on each of several
hosts and starts that host's share: the instance index and count (global, over every host), the
index among this host's instances, the replicas in all and on this instance, and where this
instance's replicas start (see `popdist._env` for the variables). Outside a launch every function answers for a single
instance holding every replica, as PopDist does.

`init()` joins the instances through `jax.distributed` (`popxl.distributed.initialize`, which
lives in `popdist._jax`), with the coordinator the launcher names, so that one popxl program runs
its replicas over all of them; call it before creating a Session.
`popdist.popart.configureSessionOptions(opts)` writes the global replication factor and this
instance's replica offset into session options.
"""

from __future__ import annotations

import importlib
import math
import os
import socket
import time
from collections.abc import Callable, Iterable
from typing import Any, TypeVar

from popdist import _env

_T = TypeVar("_T")
_joined = False


def isPopdistEnvSet() -> bool:
    """Whether this process was started by `poprun` (the launcher's environment is set)."""
    return bool(os.environ.get(_env.NUM_INSTANCES, "").strip())


def getNumInstances() -> int:
    """How many instances run the program (1 outside a launch)."""
    return _env.read_int(_env.NUM_INSTANCES, 1, minimum=1)


def getInstanceIndex() -> int:
    """This instance's index, in [0, getNumInstances()) (0 outside a launch)."""
    index = _env.read_int(_env.INSTANCE_INDEX, 0)
    count = getNumInstances()
    if index >= count:
        raise ValueError(f"popdist: {_env.INSTANCE_INDEX}={index} is not below {_env.NUM_INSTANCES}={count}")
    return index


def getLocalInstanceIndex() -> int:
    """This instance's index among the instances on its host (0 outside a launch)."""
    return _env.read_int(_env.LOCAL_INSTANCE_INDEX, 0)


def getNumTotalReplicas() -> int:
    """The replicas of the program over all instances (the global replication factor; 1 outside a launch)."""
    return _env.read_int(_env.NUM_TOTAL_REPLICAS, 1, minimum=1)


def getNumLocalReplicas() -> int:
    """The replicas this instance runs and feeds (1 outside a launch)."""
    return _env.read_int(_env.NUM_LOCAL_REPLICAS, 1, minimum=1)


def getReplicaIndexOffset() -> int:
    """The global index of this instance's first replica (0 outside a launch)."""
    return _env.read_int(_env.REPLICA_INDEX_OFFSET, 0)


def getNumIpusPerReplica() -> int:
    """The IPUs per replica given to the launcher (1 if not given). Here each replica runs on one device."""
    return _env.read_int(_env.NUM_IPUS_PER_REPLICA, 1, minimum=1)


def checkNumIpusPerReplica(expected: int) -> bool:
    """False if the launcher gave a number of IPUs per replica other than `expected`."""
    if not os.environ.get(_env.NUM_IPUS_PER_REPLICA, "").strip():
        return True
    return getNumIpusPerReplica() == int(expected)


def execute_on_instances(instances: Iterable[int], func: Callable[..., _T], *args: Any, **kwargs: Any) -> _T | None:
    """Call `func(*args, **kwargs)` on the listed instances only; the others get None.

    Unlike PopDist, collectives inside `func` are not restricted to those instances."""
    if getInstanceIndex() in set(instances):
        return func(*args, **kwargs)
    return None


def init(timeout: float | None = None) -> None:
    """Join the other instances of this launch, so that a Session runs the replicas of all of them.

    Call it once, before any Session (or anything else that starts JAX's devices); later calls and calls
    outside a launch do nothing. With CPU devices this instance offers `getNumLocalReplicas()` of them.
    Instances other than 0 first wait for the coordinator (which instance 0 runs) to accept connections;
    `timeout` (default: POPDIST_INIT_TIMEOUT, else 300 s) bounds that wait and JAX's own joining, and a
    coordinator that cannot be reached in time raises TimeoutError. (Should an instance never join,
    instance 0's JAX ends its process with a DEADLINE_EXCEEDED error after the same time.)
    """
    global _joined
    if _joined or not isPopdistEnvSet():
        return
    count, index, local = getNumInstances(), getInstanceIndex(), getNumLocalReplicas()
    devices = os.environ.get(_env.DEVICES, "cpu").strip() or "cpu"
    if devices not in ("cpu", "gpu"):
        raise ValueError(f"popdist: {_env.DEVICES}={devices!r} is neither 'cpu' nor 'gpu'")
    cpu_devices = local if devices == "cpu" else None
    wait = _env.read_timeout() if timeout is None else float(timeout)
    if wait <= 0:
        raise ValueError(f"popdist.init: timeout must be positive, got {wait}")
    if count == 1:  # nothing to join; poprun's JAX_NUM_CPU_DEVICES already gives the CPU devices
        _joined = True
        return
    address = os.environ.get(_env.COORDINATOR_ADDRESS, "").strip()
    if not address:
        raise RuntimeError(f"popdist.init: {_env.COORDINATOR_ADDRESS} is not set; start the program with poprun")
    deadline = time.monotonic() + wait
    if index != 0:
        _wait_for_coordinator(address, deadline, wait, index, count)
    # JAX only for a launch that joins: `import popdist`, and poprun, stay light.
    from popdist import _jax

    timeout_left = max(1, math.ceil(deadline - time.monotonic()))
    # JAX's coordinator (unauthenticated gRPC) listens only at the address poprun named, loopback on one
    # host, rather than on every interface as JAX would.
    _jax.initialize(
        address, count, index, cpu_devices=cpu_devices, timeout=timeout_left, coordinator_bind_address=address
    )
    _joined = True


def _wait_for_coordinator(address: str, deadline: float, wait: float, index: int, count: int) -> None:
    """Return once something accepts connections at `address`; TimeoutError at `deadline`."""
    host, _, port_text = address.rpartition(":")
    try:
        port = int(port_text)
    except ValueError:
        raise ValueError(f"popdist: {_env.COORDINATOR_ADDRESS}={address!r} is not host:port") from None
    host = host.strip("[]") or "127.0.0.1"
    while True:
        left = deadline - time.monotonic()
        try:
            with socket.create_connection((host, port), timeout=max(0.1, min(1.0, left))):
                return
        except OSError:
            pass
        if deadline - time.monotonic() <= 0:
            raise TimeoutError(
                f"popdist.init: instance {index} of {count} could not reach the coordinator at {address} "
                f"within {wait:g} s ({_env.INIT_TIMEOUT}); instance 0 runs it: did it start, and is the address "
                "right?"
            )
        time.sleep(0.2)


def __getattr__(name: str) -> object:
    """PopDist's other names (device ids, MPI backends): not part of this stand-in."""
    if name.startswith("__"):
        raise AttributeError(name)
    if name in ("popart", "launcher"):  # submodules, as `popdist.popart.configureSessionOptions` without an import
        return importlib.import_module(f"popdist.{name}")
    raise AttributeError(
        f"popdist.{name} is not available: this `popdist` is the popxl-xla runtime's stand-in for Graphcore's "
        "PopDist (instance and replica queries, init, popdist.popart.configureSessionOptions)"
    )


__all__ = [
    "checkNumIpusPerReplica",
    "execute_on_instances",
    "getInstanceIndex",
    "getLocalInstanceIndex",
    "getNumInstances",
    "getNumIpusPerReplica",
    "getNumLocalReplicas",
    "getNumTotalReplicas",
    "getReplicaIndexOffset",
    "init",
    "isPopdistEnvSet",
]
