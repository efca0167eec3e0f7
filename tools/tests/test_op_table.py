"""docs/ops.md is the table the registry generates now: an op kind registered but not listed fails here."""

from __future__ import annotations

from pathlib import Path

from popxl.op_contract import runtime_op_kinds
from tools.op_table import markdown

DOCS = Path(__file__).resolve().parents[2] / "docs" / "ops.md"


def test_the_committed_table_is_current() -> None:
    assert DOCS.read_text() == markdown(), "regenerate it: nox -s op_table"


def test_every_registered_op_kind_is_listed() -> None:
    text = DOCS.read_text()
    assert [name for name in runtime_op_kinds() if f"| `{name}` |" not in text] == []
