"""Small helpers popxl-addons programs use: a timer, an indexable ordered dict, a checked weights dict."""

from __future__ import annotations

import collections
import logging
import re
import time
from collections.abc import Hashable, Iterable, Iterator, MutableMapping
from contextlib import contextmanager
from typing import Any, Generic, TypeVar

import numpy as np

import popxl

__all__ = ["timer", "OrderedDict", "WeightsDict", "suffix_graph_name", "duplicate_items"]

K = TypeVar("K")
V = TypeVar("V")
H = TypeVar("H", bound=Hashable)

logger = logging.getLogger(__name__)


def suffix_graph_name(name: str, suffix: str) -> str:
    """`name` without any `_subgraph(<k>)` part, then `_<suffix>`: the base name for a graph derived from one."""
    return re.sub(r"_subgraph\(\d+\)", "", name) + f"_{suffix}"


def _wandb_run() -> Any:
    """The active Weights & Biases run, or None (none started, or wandb not installed)."""
    try:
        import wandb  # type: ignore[import-not-found]
    except ImportError:
        return None
    return getattr(wandb, "run", None)


@contextmanager
def timer(title: str | None = None, log_to_wandb: bool = True) -> Iterator[None]:
    """Time the body of the `with` block and log its duration in minutes (at INFO level).

    With `log_to_wandb`, a `title` and an active Weights & Biases run, the duration is also put in the
    run's summary under `<title in lower case, spaces as underscores>_mins`.
    """
    start = time.perf_counter()
    logger.info("Starting %s", title or "")
    yield
    minutes = (time.perf_counter() - start) / 60
    logger.info("%s: %.2f mins", f"{title} duration" if title else "Duration", minutes)
    if log_to_wandb and title:
        run = _wandb_run()
        if run is not None:
            run.summary[title.lower().replace(" ", "_") + "_mins"] = minutes


class OrderedDict(collections.OrderedDict[K, V], Generic[K, V]):
    """An ordered dict whose values can also be reached by position (`idx`), printed one item a line."""

    def idx(self, idx: int) -> V:
        """The value at position `idx` (negative positions count from the end)."""
        return list(self.values())[idx]

    def __repr__(self) -> str:
        if not self:
            return "{}"
        return "{\n" + "".join(f"{k}: {v},\n" for k, v in self.items()) + "}"


class WeightsDict(MutableMapping[popxl.Variable, np.ndarray[Any, Any]]):
    """Host values for variables: a mapping from `popxl.Variable` to a NumPy array that refuses an array
    whose dtype or shape is not the variable's (its host shape, `shape_on_host`)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.dict: dict[popxl.Variable, np.ndarray[Any, Any]] = {}
        if args or kwargs:
            self.update(*args, **kwargs)

    def __getitem__(self, key: popxl.Variable) -> np.ndarray[Any, Any]:
        return self.dict[key]

    def __setitem__(self, key: popxl.Variable, value: np.ndarray[Any, Any]) -> None:
        dtype = popxl.dtype.as_dtype(value.dtype)
        if key.dtype != dtype:
            raise ValueError(f"{key}: tensor and weight dtypes do not equal {key.dtype} != {dtype}")
        if tuple(key.shape_on_host) != tuple(value.shape):
            raise ValueError(f"{key}: tensor and weight shapes do not equal {key.shape_on_host} != {value.shape}")
        self.dict[key] = value

    def __delitem__(self, key: popxl.Variable) -> None:
        del self.dict[key]

    def __len__(self) -> int:
        return len(self.dict)

    def __iter__(self) -> Iterator[popxl.Variable]:
        return iter(self.dict)


def duplicate_items(iterable: Iterable[H]) -> list[H]:
    """The items that occur more than once, each once, in the order they first occur: [7, 5, 5, 1, 7] -> [7, 5]."""
    counts = collections.Counter(iterable)
    return [item for item, n in counts.items() if n > 1]
