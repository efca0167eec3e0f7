"""The error for a popxl-addons module path whose distribution is not installed.

This project splits popxl-addons over several distributions (`popxl_addons._paths` says which
ships each path). Importing a path whose distribution is absent raises `MissingDistributionError`,
a `ModuleNotFoundError` naming the distribution to install, rather than Python's plain "No module
named ...".
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
from collections.abc import Sequence
from types import ModuleType


class MissingDistributionError(ModuleNotFoundError):
    """A popxl-addons module path whose distribution is not installed."""


class MissingDistributionFinder(importlib.abc.MetaPathFinder):
    """Last on `sys.meta_path`: turns "No module named ..." for a path another distribution ships
    into an error naming the distribution to install.

    It is asked only after every other finder found nothing, so it never hides an installed
    module. `importlib.util.find_spec` of such a path raises this error instead of returning None.
    """

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if not fullname.startswith("popxl_addons."):
            return None
        # Imported here: only an import that already failed pays for reading the table.
        from popxl_addons import _paths

        if _paths.shipped_apart(fullname):
            dist, folder = _paths.distribution(fullname), _paths.folder_of(fullname)
            raise MissingDistributionError(
                f"{fullname} is shipped by the {dist} distribution, which is not installed: "
                f"`pip install {dist}` (or `pip install -e packages/{folder}` from a clone)",
                name=fullname,
            )
        return None


def install_finder() -> None:
    """Put one `MissingDistributionFinder` at the end of `sys.meta_path` (once)."""
    if not any(isinstance(f, MissingDistributionFinder) for f in sys.meta_path):
        sys.meta_path.append(MissingDistributionFinder())
