"""What the runtime's memory check sees, for the tools around popxl (benchmarks, reports): the bytes the host and a
device have available to a program, and the memory figures of a compiled program. Not part of popxl's API."""

from __future__ import annotations

from popxl.lowering.fit import device_available, host_available
from popxl.lowering.memory import memory_figures

__all__ = ["device_available", "host_available", "memory_figures"]
