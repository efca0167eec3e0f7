"""The small `popart` module that ships with the runtime."""

from __future__ import annotations

import importlib
from importlib import metadata

import pytest

import popart
import popxl
from popxl.ops import collectives


def test_names_popxl_programs_use() -> None:
    assert issubclass(popart.popart_exception, Exception)
    with pytest.raises(popart.popart_exception, match="boom"):
        raise popart.popart_exception("boom")
    assert popart.versionString() == metadata.version("popxl-xla")
    ir = popxl.Ir()
    assert isinstance(ir._pb_ir.getSessionOptions(), popart.SessionOptions)
    assert popart.TileSet is popxl.TileSet and popart.ExecutionContext is popxl.ExecutionContext
    assert popart.TensorStorage is popxl.TensorStorage
    assert popart.ReplicatedTensorSharding is popxl.ReplicatedTensorSharding
    assert popart.CommGroupType is collectives.CommGroupType and popart.CommGroup is collectives.CommGroup
    # popart's enums for asking for IPUs, with popart's member names (popxl's test helpers name them).
    assert [m.name for m in popart.SyncPattern] == ["Full", "SinglePipeline", "ReplicaAndLadder"]
    assert [m.name for m in popart.DeviceConnectionType] == ["Always", "OnDemand", "Never"]
    assert [m.name for m in popart.DeviceSelectionCriterion] == ["First", "Random"]
    assert sorted(popart.__all__) == sorted(n for n in dir(popart) if not n.startswith("_") and n != "annotations")


def test_popart_internals_say_they_are_absent() -> None:
    with pytest.raises(AttributeError, match=r"popart\.PyWeightsIO is not available"):
        popart.PyWeightsIO  # noqa: B018
    with pytest.raises(ImportError, match=r"popart\._internal \(popart's C\+\+ IR bindings\) does not exist"):
        importlib.import_module("popart._internal.ir")


def test_runtime_errors_are_popart_exceptions() -> None:
    import popart
    from popxl.errors import AutodiffError, OutOfRangeError

    assert issubclass(OutOfRangeError, popart.popart_exception) and issubclass(OutOfRangeError, IndexError)
    assert issubclass(AutodiffError, popart.popart_exception) and issubclass(AutodiffError, RuntimeError)
