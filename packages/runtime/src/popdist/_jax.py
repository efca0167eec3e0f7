"""Joining the processes that run one program together, through JAX's distributed runtime.

`popdist.init()` joins the instances of a launch through it and popxl offers it as
`popxl.distributed.initialize`. It lives here, below popxl, because popxl calls popdist
(`popxl.Ir(replication="popdist")`), so popdist cannot call back into popxl without an import circle.
"""

from __future__ import annotations

import jax


def initialize(
    coordinator_address: str,
    num_processes: int,
    process_id: int,
    cpu_devices: int | None = None,
    timeout: int = 300,
    coordinator_bind_address: str | None = None,
) -> None:
    """Join the processes that together run the replicas; call before creating any Session.

    `cpu_devices` sets how many CPU devices this process offers (one replica each);
    CPU collectives between processes go through gloo. `timeout` bounds, in seconds, the wait
    for every process to join (JAX then ends the process). `coordinator_bind_address` (host:port) is where
    process 0 runs the coordinator; unset, JAX listens on every interface at the coordinator's port.
    """
    if cpu_devices is not None:
        jax.config.update("jax_num_cpu_devices", cpu_devices)
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    jax.distributed.initialize(
        coordinator_address=coordinator_address,
        num_processes=num_processes,
        process_id=process_id,
        initialization_timeout=timeout,
        coordinator_bind_address=coordinator_bind_address,
    )
