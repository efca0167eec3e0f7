"""Ir.dot_checkpoint: which checkpoints are written, where, and what a picture holds."""

from __future__ import annotations

import pathlib
import re

import numpy as np
import pytest

import popxl
from popxl import ops


def _build(ir: popxl.Ir, save_dir: pathlib.Path | None = None) -> None:
    with ir.main_graph:
        x = popxl.variable(np.ones(3, np.float32), name="x")
        y = ops.add(x, x)
        ir.dot_checkpoint("Foo", save_dir)
        sub = ir.create_graph(lambda t: ops.gelu(t), y)
        ops.call(sub, y)
        ir.dot_checkpoint("Bar", save_dir)


@pytest.mark.parametrize(("checks", "written"), [("", []), ("FINAL", ["FINAL"]), ("foo:BAR", ["Foo", "Bar"])])
def test_active_checks_from_the_environment(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch, checks: str, written: list[str]
) -> None:
    monkeypatch.setenv("POPART_DOT_CHECKS", checks)
    ir = popxl.Ir()
    ir.session_options.logDir = str(tmp_path)
    _build(ir)
    popxl.Session(ir, "cpu")
    names = [re.sub(r"^\d+_", "", p.stem) for p in sorted(tmp_path.glob("*.dot"))]
    assert names == written


def test_no_checks_set_means_all_and_pictures_show_every_graph(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("POPART_DOT_CHECKS", raising=False)
    ir = popxl.Ir()
    _build(ir, tmp_path / "dots")
    popxl.Session(ir, "cpu")
    files = sorted((tmp_path / "dots").glob("*.dot"))
    assert [p.stem.split("_", 1)[1] for p in files] == ["Foo", "Bar", "FINAL"]
    final = files[-1].read_text()
    assert final.startswith("digraph ir {") and final.count("subgraph cluster_") == 2
    for graph in (ir.main_graph, *ir.graphs):
        for op in graph.ops:
            assert f'label="{op.name}"' in final
    first = files[0].read_text()
    assert 'label="gelu"' not in first and 'label="add"' in first
