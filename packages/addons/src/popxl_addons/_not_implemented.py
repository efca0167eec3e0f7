"""The error for a popxl-addons name that this project does not implement.

A module path that lacks some of popxl-addons' names (`popxl_addons._paths` lists them) gets a
module `__getattr__` from `not_implemented`: each such name raises `NotImplementedHereError`,
saying what to use instead. The error is an `ImportError` too, so that `from path import name`
shows the message and code that guards an optional import with `except ImportError` still works.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import NoReturn


class NotImplementedHereError(NotImplementedError, ImportError):
    """A popxl-addons name that this project does not implement."""


def not_implemented(module: str, names: Mapping[str, str]) -> Callable[[str], NoReturn]:
    """A module-level `__getattr__` for `module`: each of `names` (a popxl-addons name, with what to
    use instead or "") raises `NotImplementedHereError`; any other name the usual AttributeError."""

    def __getattr__(name: str) -> NoReturn:  # noqa: N807  (a module-level __getattr__)
        if name not in names:
            raise AttributeError(f"module {module!r} has no attribute {name!r}", name=name)
        instead = f"; instead use {names[name]}" if names[name] else ""
        raise NotImplementedHereError(
            f"{module}.{name} is a popxl-addons name that this project does not implement{instead}"
        )

    return __getattr__
