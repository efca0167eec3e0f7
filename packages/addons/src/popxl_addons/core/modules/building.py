"""What a Module's build is doing: which module's `build` or `build_grad` runs, and the `aux` and `var_grad`
its `build_grad` reads and writes.

`build_grad` may read `aux` and set `var_grad` only while it runs (inside
`Module.create_grad_graph` or `GraphWithNamedArgs.autodiff`), as popxl-addons
enforces; the stacks here say which module that is.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from types import MappingProxyType
from typing import Any, Protocol

import popxl


class GradBuilding(Protocol):
    """A module while its `build_grad` runs: what it reads (`aux`) and writes (`var_grad`)."""

    aux: Aux
    var_grad: VarGrads


# The modules whose build (or build_grad) is running, innermost last.
_BUILD: list[object] = []
_BUILD_GRAD: list[GradBuilding] = []


@contextmanager
def build_context(module: object) -> Iterator[None]:
    """Within: `module`'s build is the one running."""
    _BUILD.append(module)
    try:
        yield
    finally:
        _BUILD.pop()


@contextmanager
def build_grad_context(module: GradBuilding) -> Iterator[None]:
    """Within: `module`'s build_grad is the one running."""
    _BUILD_GRAD.append(module)
    try:
        yield
    finally:
        _BUILD_GRAD.pop()


def current_build_context() -> object | None:
    """The module whose build runs innermost, if any."""
    return _BUILD[-1] if _BUILD else None


def current_build_grad_context() -> GradBuilding | None:
    """The module whose build_grad runs innermost, if any."""
    return _BUILD_GRAD[-1] if _BUILD_GRAD else None


class Aux:
    """Forward tensors a module's `build_grad` needs, by key; reading one there makes it a gradient-graph input."""

    def __init__(self) -> None:
        self._values: dict[str, Any] = {}
        self._grad_inputs: dict[str, popxl.Tensor] = {}
        self._grad_to_fwd: dict[popxl.Tensor, popxl.Tensor] = {}

    def __setitem__(self, key: str, value: Any) -> None:
        self._values[key] = value

    def __getitem__(self, key: str) -> Any:
        grad = current_build_grad_context()
        if grad is None or grad.aux is not self:
            raise RuntimeError(
                "You can only get items within the `build_graph` method (`build_grad`), which runs through "
                "`create_grad_graph` or `autodiff`"
            )
        value = self._values[key]
        if not isinstance(value, popxl.Tensor):
            return value
        if key not in self._grad_inputs:
            t = popxl.graph_input(value.shape, value.dtype, key, meta_shape=value.meta_shape)
            self._grad_inputs[key] = t
            self._grad_to_fwd[t] = value
        return self._grad_inputs[key]

    def __contains__(self, key: object) -> bool:
        return key in self._values

    @property
    def grad_to_fwd(self) -> Mapping[popxl.Tensor, popxl.Tensor]:
        """The gradient-graph input made for each aux tensor read so far, to that forward tensor, in read order."""
        return MappingProxyType(self._grad_to_fwd)

    def copy(self) -> Aux:
        """A shallow copy."""
        new = Aux()
        new._values = dict(self._values)
        new._grad_inputs = dict(self._grad_inputs)
        new._grad_to_fwd = dict(self._grad_to_fwd)
        return new

    def __repr__(self) -> str:
        return repr(self._values)


class VarGrads:
    """The gradients of the forward graph's variables, set by name within `build_grad`."""

    def __init__(self, variables: Mapping[str, popxl.Tensor] | None = None) -> None:
        self._values: dict[str, popxl.Tensor] = {}
        self._variables = dict(variables or {})

    def _require_grad_context(self) -> None:
        grad = current_build_grad_context()
        if grad is None or grad.var_grad is not self:
            raise RuntimeError(
                "You can only use `var_grad` within the `build_graph` method (`build_grad`), which runs through "
                "`create_grad_graph` or `autodiff`"
            )

    def __getitem__(self, key: str) -> popxl.Tensor:
        self._require_grad_context()
        return self._values[key]

    def __setitem__(self, key: str, t: popxl.Tensor) -> None:
        self._require_grad_context()
        if not isinstance(t, popxl.Tensor):
            raise TypeError(f"Not a tensor: {t!r}")
        if key not in self._variables:
            raise KeyError(f"Not a variable: {key}. Possible inputs: {list(self._variables)}")
        var = self._variables[key]
        if (var.shape, var.meta_shape) != (t.shape, t.meta_shape):
            raise ValueError(
                f"Shape or meta-shape of Tensor does not match variable. The gradient of {key} has shape {t.shape} "
                f"(meta shape {t.meta_shape}), the variable shape {var.shape} (meta shape {var.meta_shape})"
            )
        self._values[key] = t

    def __contains__(self, key: object) -> bool:
        return key in self._values

    @property
    def gradients(self) -> Mapping[str, popxl.Tensor]:
        """Each variable's gradient set so far, by the variable's name (readable outside `build_grad` too)."""
        return MappingProxyType(self._values)

    def __repr__(self) -> str:
        return repr(self._values)
