"""Lowering popxl programs to XLA through JAX: the only place the runtime executes."""

from popxl.lowering.program import Program

__all__ = ["Program"]
