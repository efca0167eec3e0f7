"""What Dolly's and Llama's popxl applications reach for beyond their feed-forward layers: their rotary
embedding is a C++ custom op compiled against popart with cppimport, which cannot run here, and the error
says why."""

from __future__ import annotations

import importlib
import importlib.machinery
import importlib.util
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

import popxl
from popxl import cpp_custom_ops
from popxl.errors import NoPopartIRError

# The wrapper of a C++ custom op as Graphcore's applications lay it out: the package re-exports the
# wrapper, which starts cppimport's import hook and then imports the op's C++ source as a module.
_OP_PACKAGE = {
    "__init__.py": "from .rope import *\n",
    "rope.py": "import cppimport.import_hook\nfrom . import rope_binding\n",
    "rope_binding.cpp": "// cppimport\n#include <popart/op.hpp>\n",
}


@pytest.fixture
def on_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """`tmp_path` first on sys.path; the modules imported from it are forgotten afterwards."""
    monkeypatch.syspath_prepend(str(tmp_path))
    before = set(sys.modules)
    yield tmp_path
    for name in set(sys.modules) - before:
        del sys.modules[name]


def _cppimport_installed() -> bool:
    return importlib.machinery.PathFinder.find_spec("cppimport") is not None


@pytest.mark.skipif(_cppimport_installed(), reason="cppimport is installed: its own build fails on popart's headers")
def test_a_cpp_custom_op_import_says_why_it_cannot_run(on_path: Path) -> None:
    pkg = on_path / "op_pkg"
    pkg.mkdir()
    for name, text in _OP_PACKAGE.items():
        (pkg / name).write_text(text)
    with pytest.raises(ModuleNotFoundError) as info:
        importlib.import_module("op_pkg")
    message = str(info.value)
    assert message.startswith("No module named 'cppimport', and installing it would not help")
    assert "no popart IR" in message and "popxl.extension" in message
    assert info.value.name == "cppimport"
    # Code that guards the import keeps working: the error is still an ImportError.
    try:
        importlib.import_module("cppimport")
    except ImportError:
        pass
    else:
        pytest.fail("cppimport imported")
    # The documented departure: probing for it raises the same error rather than returning None.
    with pytest.raises(ModuleNotFoundError, match="installing it would not help"):
        importlib.util.find_spec("cppimport")


def test_other_missing_modules_fail_as_python_says(on_path: Path) -> None:
    with pytest.raises(ModuleNotFoundError, match=r"^No module named 'no_such_module_for_popxl'$"):
        importlib.import_module("no_such_module_for_popxl")
    assert importlib.util.find_spec("no_such_module_for_popxl") is None
    # A submodule called `cppimport` elsewhere is not the top-level tool.
    (on_path / "holder").mkdir()
    (on_path / "holder" / "__init__.py").write_text("")
    with pytest.raises(ModuleNotFoundError, match=r"^No module named 'holder.cppimport'$"):
        importlib.import_module("holder.cppimport")


def test_an_installed_cppimport_is_found_first(on_path: Path) -> None:
    cpp_custom_ops.install()
    finders = [f for f in sys.meta_path if isinstance(f, cpp_custom_ops.CppimportAbsent)]
    assert len(finders) == 1
    assert sys.meta_path.index(finders[0]) > sys.meta_path.index(importlib.machinery.PathFinder)
    (on_path / "cppimport").mkdir()
    (on_path / "cppimport" / "__init__.py").write_text("WHERE = 'tmp'\n")
    # A cppimport on sys.path (here, one first on it) is what `import cppimport` gives.
    assert importlib.import_module("cppimport").WHERE == "tmp"


def test_pb_graph_says_there_is_no_popart_graph() -> None:
    ir = popxl.Ir()
    sub = ir.create_graph(lambda x: x + 1, popxl.TensorSpec((2,), popxl.float32))
    for graph, name in ((ir.main_graph, "the main graph"), (sub, sub.id)):
        with pytest.raises(NoPopartIRError, match=r"^Graph\._pb_graph is popart's C\+\+ graph") as info:
            graph._pb_graph  # noqa: B018
        assert f"({name})" in str(info.value) and "popxl.extension" in str(info.value)
        # An AttributeError, so probing for popart's graph finds none rather than failing.
        assert isinstance(info.value, AttributeError) and not hasattr(graph, "_pb_graph")


def test_popart_internal_says_the_same() -> None:
    with pytest.raises(ImportError, match=r"does not exist here: popxl-xla runs popxl programs on XLA"):
        importlib.import_module("popart._internal.ir")
