"""popxl's Module: a reusable piece of graph-building code."""

from __future__ import annotations

from typing import Any


class Module:
    """Subclass and define `build`; calling the module builds into the current graph."""

    def build(self, *args: Any, **kwargs: Any) -> Any:
        """Create the module's ops in the current graph."""
        raise NotImplementedError(f"{type(self).__name__} must define build")

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.build(*args, **kwargs)
