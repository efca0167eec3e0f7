"""Names a module path imports on first use rather than with the module.

A popxl-addons path whose names come from a distribution that may be absent (or is heavy to
import) gets a module `__getattr__` from `on_first_use`: each name is imported from its source
when first asked for, so importing the path needs nothing more, and a missing distribution is
named only when the name is used (`popxl_addons._distributions`).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from types import ModuleType


def on_first_use(module: str, sources: Mapping[str, str]) -> Callable[[str], object]:
    """A module-level `__getattr__` for `module` that imports each of `sources`' names (name: the
    module it comes from) when first asked for, as `from source import name` would."""

    def __getattr__(name: str) -> object:  # noqa: N807  (a module-level __getattr__)
        if name not in sources:
            raise AttributeError(f"module {module!r} has no attribute {name!r}", name=name)
        source: ModuleType = importlib.import_module(sources[name])
        if name in vars(source):
            return vars(source)[name]
        # Not an attribute (yet): a sub-module, as `from package import name` finds it.
        return importlib.import_module(f"{sources[name]}.{name}")

    return __getattr__
