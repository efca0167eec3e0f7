"""The few `popart` names that popxl programs use outside popart's internals.

Graphcore's `popart` is a C++ library with Python bindings; popxl is built on it, and popxl
programs reach for a handful of its names directly: the exception class they catch, the
version string, the session options and some enums. This module, shipped with the popxl-xla
runtime, offers exactly those, as the runtime's own objects:

- `popart_exception`: the base class of the runtime's errors where popart raises
  `popart_exception` (run-time index checks, autodiff, popxl-addons' pattern checks), and
  `OutOfMemoryException`, raised for a program that does not fit the machine's memory.
- `versionString()`: the version of the popxl-xla runtime (not a popart version).
- `SessionOptions`: the options `ir._pb_ir.getSessionOptions()` returns (`popxl.Ir.session_options`).
- `CommGroup`, `CommGroupType`, `TileSet`, `ExecutionContext`, `TensorStorage`,
  `ReplicatedTensorSharding`: the runtime's versions of popart's enums of those names.
- `VariableSettings`, `VariableRetrievalMode`: a replica grouping as popxl describes it to popart
  (`ReplicaGrouping._to_variable_settings`).
- `SyncPattern`, `DeviceConnectionType`, `DeviceSelectionCriterion`, `VirtualGraphMode`: popart's
  enums for asking for IPUs and placing ops on them, which popxl's test helpers name; nothing here
  reads them.

There is no popart IR here: `popart._internal.ir` and popart's sessions, device managers and
builders do not exist, and asking for them raises an error that says so.
"""

from __future__ import annotations

import enum as _enum
import importlib.metadata as _metadata

from popxl.errors import OutOfMemoryError as OutOfMemoryException
from popxl.errors import popart_exception
from popxl.ir import SessionOptions
from popxl.ops.collectives import CommGroup, CommGroupType
from popxl.tensorlocation import ExecutionContext, ReplicatedTensorSharding, TensorStorage, TileSet
from popxl.variable_settings import VariableRetrievalMode, VariableSettings


class SyncPattern(_enum.Enum):
    """How IPUs synchronise (popart's names)."""

    Full = 0
    SinglePipeline = 1
    ReplicaAndLadder = 2


class DeviceConnectionType(_enum.Enum):
    """When popart attaches to IPUs (popart's names)."""

    Always = 0
    OnDemand = 1
    Never = 2


class VirtualGraphMode(_enum.Enum):
    """How popart assigns ops to IPUs (popart's names); session options may be set to one, and nothing
    here reads it: popxl programs place ops with `popxl.ipu`."""

    Off = 0
    Manual = 1
    Auto = 2
    ExecutionPhases = 3


class DeviceSelectionCriterion(_enum.Enum):
    """Which free IPUs popart takes (popart's names)."""

    First = 0
    Random = 1


def versionString() -> str:
    """The version of the runtime that provides this module (the popxl-xla distribution)."""
    try:
        return _metadata.version("popxl-xla")
    except _metadata.PackageNotFoundError:  # running from a source tree that is not installed
        return "unknown"


def __getattr__(name: str) -> object:
    """popart's other names: not part of this runtime."""
    if name.startswith("__"):
        raise AttributeError(name)
    raise AttributeError(
        f"popart.{name} is not available: this `popart` module is the popxl-xla runtime's small stand-in "
        "(popart_exception, OutOfMemoryException, versionString, SessionOptions, VariableSettings and some enums), "
        "not Graphcore's popart"
    )


__all__ = [
    "CommGroup",
    "CommGroupType",
    "DeviceConnectionType",
    "DeviceSelectionCriterion",
    "ExecutionContext",
    "OutOfMemoryException",
    "ReplicatedTensorSharding",
    "SessionOptions",
    "SyncPattern",
    "TensorStorage",
    "TileSet",
    "VariableRetrievalMode",
    "VariableSettings",
    "VirtualGraphMode",
    "popart_exception",
    "versionString",
]
