"""C++ custom ops, which popxl applications compile against popart with cppimport: this runtime cannot run them.

A popxl application's custom op is C++ (a popart op and its Poplar lowering) that its Python
wrapper compiles when imported, through cppimport's import hook (`import cppimport.import_hook`,
then the op's module). Where cppimport is not installed, that first import fails with an error
that says why installing it would not help. The finder raising it sits last on `sys.meta_path`,
so an installed cppimport is found first and left alone (its build then fails on popart's absent
headers). One consequence: `importlib.util.find_spec("cppimport")` raises that error too, where it
would return None.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from importlib.abc import MetaPathFinder
from importlib.machinery import ModuleSpec
from types import ModuleType

from popxl.errors import NO_POPART_IR

CPPIMPORT_ABSENT = f"No module named 'cppimport', and installing it would not help: {NO_POPART_IR}"


class CppimportAbsent(MetaPathFinder):
    """The finder of last resort for `cppimport`: an import error that says why the op cannot run here."""

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> ModuleSpec | None:
        """Raise ModuleNotFoundError for the top-level `cppimport`; None for every other module."""
        if fullname != "cppimport":
            return None
        raise ModuleNotFoundError(CPPIMPORT_ABSENT, name=fullname)


def install() -> None:
    """Put a CppimportAbsent last on `sys.meta_path`, unless one is there already."""
    if not any(isinstance(f, CppimportAbsent) for f in sys.meta_path):
        sys.meta_path.append(CppimportAbsent())
