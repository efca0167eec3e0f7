"""Planning batch serialisation for a device-memory budget, the training step it plans, and a program's FLOPs.

The FLOP estimates (performance_utils.py) are imported by their path.
"""

from popxl_addons.core.planning.plan import SerialisationPlan, host_bandwidth, plan_batch_serialisation
from popxl_addons.core.planning.programs import planned_serialisation
from popxl_addons.core.planning.step import (
    Serialisation,
    SerialisedStep,
    StepOptions,
    TrainingStep,
    buffer_from_stream,
    build_training_step,
    serialise_step,
)

__all__ = [
    "Serialisation",
    "SerialisationPlan",
    "SerialisedStep",
    "StepOptions",
    "TrainingStep",
    "buffer_from_stream",
    "build_training_step",
    "host_bandwidth",
    "plan_batch_serialisation",
    "planned_serialisation",
    "serialise_step",
]
