"""Running one popxl program across several processes (one replica per device, all processes together).

Every process builds the same Ir and creates a Session with `replica_mode="devices"`.
Replicas are numbered across the processes' devices in order; each process feeds and
receives host data for its own replicas only (the host arrays' replica axis has the
local replica count), while variables read back are those of the whole program.
"""

from popdist._jax import initialize

from popxl.lowering.distributed import process_count, process_index

__all__ = ["initialize", "process_count", "process_index"]
