"""What the popxl-addons module paths of this project share: the errors for names it lacks.

The modules named as popxl-addons names them (`popxl_addons.transforms.batch_serialisation`,
`popxl_addons.ops.replicated_all_reduce_TP`, ...) re-export what this project has. For a
popxl-addons name the project does not have yet they raise `NotImplementedYetError`; for a name
whose distribution is not installed they raise `MissingDistributionError`, naming the
distribution to install. Both are `ImportError`s, so that `from popxl_addons.x import name`
shows the message rather than Python's plain "cannot import name".
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
from collections.abc import Callable, Iterable, Sequence
from types import ModuleType

# The module paths whose code lives in a distribution that popxl-addons-core does not pull in.
DISTRIBUTIONS: dict[str, str] = {
    "popxl_addons.layers": "popxl-addons-layers",
    "popxl_addons.collectives": "popxl-addons-collectives",
    "popxl_addons.harness": "popxl-addons-harness",
    "popxl_addons.ops.replicated_all_reduce_TP": "popxl-addons-collectives",
    "popxl_addons.ops.replicated_strided_collectives": "popxl-addons-collectives",
}


# For each module with a `not_implemented` __getattr__, the popxl-addons names it lacks.
PENDING: dict[str, frozenset[str]] = {}


class NotImplementedYetError(ImportError):
    """A popxl-addons name that this project does not implement yet."""


class MissingDistributionError(ModuleNotFoundError):
    """A popxl-addons module path whose distribution is not installed."""


def missing_distribution(module: str) -> MissingDistributionError:
    """The error for importing `module` when the distribution that ships it is not installed."""
    dist = DISTRIBUTIONS[module]
    return MissingDistributionError(
        f"{module} is shipped by the {dist} distribution, which is not installed: "
        f"`pip install {dist}` (or `pip install -e packages/{dist.removeprefix('popxl-addons-')}` from a clone)",
        name=module,
    )


class MissingDistributionFinder(importlib.abc.MetaPathFinder):
    """Last on `sys.meta_path`: turns "No module named ..." for the paths in `DISTRIBUTIONS` into
    an error naming the distribution to install.

    It is asked only after every other finder found nothing, so it never hides an installed
    module. `importlib.util.find_spec` of such a path raises this error instead of returning None.
    """

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname in DISTRIBUTIONS:
            raise missing_distribution(fullname)
        return None


def install_finder() -> None:
    """Put one `MissingDistributionFinder` at the end of `sys.meta_path` (once)."""
    if not any(isinstance(f, MissingDistributionFinder) for f in sys.meta_path):
        sys.meta_path.append(MissingDistributionFinder())


def not_implemented(module: str, names: Iterable[str], owner: str | None = None) -> Callable[[str], object]:
    """A module-level `__getattr__` for `module`: each of `names` (popxl-addons names this project
    lacks) raises `NotImplementedYetError`; any other name raises the usual AttributeError.

    When `owner` (the module of this project that the name would belong to) has gained the name
    since, it is returned instead, so an implementation shows up here without an edit.
    """
    pending = frozenset(names)
    PENDING[module] = pending
    # popxl-addons binds some functions over the sub-module of the same name (the package
    # `popxl_addons.ops.rotary_pos_embed` and its function `rotary_pos_embed`). Such a sub-module
    # is imported now and unbound, so that the name reaches this __getattr__ even after an
    # `import package.name` (Python binds a sub-module on its parent only when first imported).
    package = sys.modules.get(module)
    for name in sorted(pending):
        if package is not None and hasattr(package, "__path__") and importlib.util.find_spec(f"{module}.{name}"):
            importlib.import_module(f"{module}.{name}")
            delattr(package, name)

    def __getattr__(name: str) -> object:  # noqa: N807  (a module-level __getattr__)
        if name not in pending:
            raise AttributeError(f"module {module!r} has no attribute {name!r}", name=name)
        if owner is not None:
            try:
                found = getattr(importlib.import_module(owner), name, None)
            except NotImplementedYetError:  # the owner lacks it too
                found = None
            if found is not None:
                return found
        raise NotImplementedYetError(
            f"{module}.{name} is a popxl-addons name that this project does not implement yet", name=module
        )

    return __getattr__
