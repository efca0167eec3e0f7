"""Printing tensors and text at run time, switched by the `MODEL_LOG_LEVEL` environment variable.

As popxl-addons' `popxl_addons.debugging`: a print of level `level` is added to
the program only when `MODEL_LOG_LEVEL` (TRACE < DEBUG < INFO < WARN; INFO when
unset) is at or below it, so the DEBUG prints are off by default. The variable is
read when the print is added (popxl-addons reads it once, when imported).
"""

from __future__ import annotations

import os
from typing import Any, Literal

import popxl
from popxl import ops

__all__ = ["print_tensor", "print_text"]

Level = Literal["TRACE", "DEBUG", "INFO", "WARN"]
LEVELS: dict[str, int] = {"TRACE": 0, "DEBUG": 1, "INFO": 2, "WARN": 3}


def _level(value: str, what: str) -> int:
    if value not in LEVELS:
        raise ValueError(f"{what} must be one of {list(LEVELS)}, got {value!r}")
    return LEVELS[value]


def printing(level: Level) -> bool:
    """Whether prints of `level` are on under the current `MODEL_LOG_LEVEL`."""
    model = _level(os.environ.get("MODEL_LOG_LEVEL", "INFO"), "The MODEL_LOG_LEVEL environment variable")
    return model <= _level(level, "level")


def print_tensor(t: popxl.Tensor, *args: Any, level: Level = "DEBUG", **kwargs: Any) -> popxl.Tensor:
    """`popxl.ops.print_tensor(t, *args, **kwargs)` when prints of `level` are on, else `t` itself."""
    if printing(level):
        return ops.print_tensor(t, *args, **kwargs)
    return t


def print_text(text: str, num: popxl.Tensor | None = None, level: Level = "DEBUG") -> None:
    """Print `text` when the program runs (with the values of `num`, if given) when prints of `level` are on.

    The print is ordered among other ops only inside `popxl.in_sequence(True)`, as in popxl-addons.
    """
    if printing(level):
        ops.print_tensor(num if num is not None else popxl.constant((), popxl.float32), text)
