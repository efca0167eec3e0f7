"""The environment variables through which `poprun` tells each instance where it stands.

The launcher (`popdist.launcher`) writes them; the `popdist` functions read them. Outside a
launch none is set and `popdist` answers for a single instance holding every replica.
"""

from __future__ import annotations

import os

NUM_INSTANCES = "POPDIST_NUM_INSTANCES"
INSTANCE_INDEX = "POPDIST_INSTANCE_INDEX"
LOCAL_INSTANCE_INDEX = "POPDIST_LOCAL_INSTANCE_INDEX"
NUM_TOTAL_REPLICAS = "POPDIST_NUM_TOTAL_REPLICAS"
NUM_LOCAL_REPLICAS = "POPDIST_NUM_LOCAL_REPLICAS"
REPLICA_INDEX_OFFSET = "POPDIST_REPLICA_INDEX_OFFSET"
NUM_IPUS_PER_REPLICA = "POPDIST_NUM_IPUS_PER_REPLICA"
# host:port of the jax.distributed coordinator, which instance 0 runs.
COORDINATOR_ADDRESS = "POPDIST_COORDINATOR_ADDRESS"
# Seconds `popdist.init` waits for the coordinator and the other instances before it fails.
INIT_TIMEOUT = "POPDIST_INIT_TIMEOUT"
# "cpu" (each instance offers its local replicas as CPU devices) or "gpu" (CUDA_VISIBLE_DEVICES names its GPUs).
DEVICES = "POPDIST_DEVICES"

DEFAULT_INIT_TIMEOUT = 300.0

ALL = (
    NUM_INSTANCES,
    INSTANCE_INDEX,
    LOCAL_INSTANCE_INDEX,
    NUM_TOTAL_REPLICAS,
    NUM_LOCAL_REPLICAS,
    REPLICA_INDEX_OFFSET,
    NUM_IPUS_PER_REPLICA,
    COORDINATOR_ADDRESS,
    INIT_TIMEOUT,
    DEVICES,
)


def read_int(name: str, default: int, minimum: int = 0) -> int:
    """The integer in environment variable `name`, or `default` when it is unset or empty."""
    text = os.environ.get(name, "").strip()
    if not text:
        return default
    try:
        value = int(text)
    except ValueError:
        raise ValueError(f"popdist: environment variable {name}={text!r} is not an integer") from None
    if value < minimum:
        raise ValueError(f"popdist: environment variable {name}={value} must be at least {minimum}")
    return value


def read_timeout() -> float:
    """The seconds in POPDIST_INIT_TIMEOUT, or the default."""
    text = os.environ.get(INIT_TIMEOUT, "").strip()
    if not text:
        return DEFAULT_INIT_TIMEOUT
    try:
        value = float(text)
    except ValueError:
        raise ValueError(f"popdist: environment variable {INIT_TIMEOUT}={text!r} is not a number of seconds") from None
    if value <= 0:
        raise ValueError(f"popdist: environment variable {INIT_TIMEOUT}={value} must be positive")
    return value
