"""Planning batch serialisation for a device-memory budget (the training step it plans is `core.training`'s)."""

from popxl_addons.core.planning.plan import SerialisationPlan, host_bandwidth, plan_batch_serialisation
from popxl_addons.core.planning.programs import planned_serialisation

__all__ = ["SerialisationPlan", "host_bandwidth", "plan_batch_serialisation", "planned_serialisation"]
