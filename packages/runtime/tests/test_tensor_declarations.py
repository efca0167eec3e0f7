"""What `popxl.tensor` declares for type checkers is what is set on it from above: `Tensor`'s operators and
op-building methods (by `popxl.ops`) and popxl's tensor-creating functions."""

from __future__ import annotations

import ast
from pathlib import Path

import popxl
import popxl.tensor
from popxl.ops._tensor_methods import METHODS


def test_tensor_declares_what_is_set_on_it_from_above() -> None:
    tree = ast.parse(Path(popxl.tensor.__file__).read_text())
    tensor = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Tensor")
    declared = {f.name for n in tensor.body if isinstance(n, ast.If) for f in n.body if isinstance(f, ast.FunctionDef)}
    assert declared == set(METHODS)
    assert all(getattr(popxl.Tensor, name) is method for name, method in METHODS.items())
    # popxl's tensor-creating functions, declared as re-exports under `if TYPE_CHECKING:`.
    creators = {
        a.name
        for n in tree.body
        if isinstance(n, ast.If)
        for i in n.body
        if isinstance(i, ast.ImportFrom)
        for a in i.names
        if a.asname == a.name
    }
    assert "variable" in creators and "graph_input" in creators
    assert all(getattr(popxl.tensor, name) is getattr(popxl, name) for name in creators)
