"""The training step: a module's forward and gradient over micro-batches, serialised or not (`step.py`)."""

from popxl_addons.core.training.step import (
    SerialisedStep,
    StepOptions,
    TrainingStep,
    buffer_from_stream,
    build_training_step,
    serialise_step,
)
from popxl_addons.core.transforms.batch_serialisation.fwd_and_grad import Serialisation

__all__ = [
    "Serialisation",
    "SerialisedStep",
    "StepOptions",
    "TrainingStep",
    "buffer_from_stream",
    "build_training_step",
    "serialise_step",
]
