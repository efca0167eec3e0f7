"""Planning batch serialisation for a device-memory budget."""

from popxl_addons.core.planning.plan import SerialisationPlan, host_bandwidth, plan_batch_serialisation

__all__ = ["SerialisationPlan", "host_bandwidth", "plan_batch_serialisation"]
