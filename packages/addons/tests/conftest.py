"""Eight CPU devices for the replicated cases (set before JAX initialises)."""

import jax

jax.config.update("jax_num_cpu_devices", 8)
