"""Where this process stands among those that run one program together, as JAX's distributed runtime numbers them."""

from __future__ import annotations

import jax


def process_index() -> int:
    """This process's index among the processes of the program."""
    return int(jax.process_index())


def process_count() -> int:
    """How many processes run the program."""
    return int(jax.process_count())
