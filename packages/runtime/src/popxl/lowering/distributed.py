"""Joining a program that spans several processes, through JAX's distributed runtime."""

from __future__ import annotations

import jax


def initialize(
    coordinator_address: str,
    num_processes: int,
    process_id: int,
    cpu_devices: int | None = None,
    timeout: int = 300,
) -> None:
    """Join the processes that together run the replicas; call before creating any Session.

    `cpu_devices` sets how many CPU devices this process offers (one replica each);
    CPU collectives between processes go through gloo. `timeout` bounds, in seconds, the wait
    for every process to join (JAX then ends the process).
    """
    if cpu_devices is not None:
        jax.config.update("jax_num_cpu_devices", cpu_devices)
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    jax.distributed.initialize(
        coordinator_address=coordinator_address,
        num_processes=num_processes,
        process_id=process_id,
        initialization_timeout=timeout,
    )


def process_index() -> int:
    """This process's index among the processes of the program."""
    return int(jax.process_index())


def process_count() -> int:
    """How many processes run the program."""
    return int(jax.process_count())
