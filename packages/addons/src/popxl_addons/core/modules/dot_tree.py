"""DotTree: an insertion-ordered tree addressed by dotted keys, as popxl-addons defines it.

Keys are Python identifiers or non-negative integers (stored as strings).
`tree.a.b`, `tree["a.b"]` and `tree.get("a.b")` reach the same leaf; a
negative numeric key counts back from the largest numeric key plus one.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any, Generic, TypeVar

__all__ = ["DotTree", "sanitise", "to_mapping"]

V = TypeVar("V")
K = TypeVar("K")
T = TypeVar("T", bound="DotTree[Any]")


def sanitise(name: str) -> str:
    """`name` with every character that cannot be in a Python identifier replaced by '_'."""
    return re.sub(r"\W|^(?=\d)", "_", name)


def to_mapping(key: DotTree[K], value: DotTree[Any]) -> dict[K, Any]:
    """`{key[k]: value[k]}` for every dotted key the two trees share (popxl-addons' module-level form of
    `DotTree.to_mapping`)."""
    return key.to_mapping(value)


class DotTree(Generic[V]):
    """A tree of values whose keys are identifiers or numbers, reachable as `t.a.b`, `t["a.b"]` or `t[0]`."""

    _map: dict[str, Any]

    def __init__(self, **entries: Any) -> None:
        object.__setattr__(self, "_map", {})
        for k, v in entries.items():
            self.insert(k, v)

    def _check(self, key: str, overwrite: bool) -> None:
        if not overwrite and key in self._map:
            raise ValueError(f"'{key}' already exists")
        if not (key.isdigit() or key.isidentifier()):
            raise ValueError(f"'{key}' is not a valid key: use a Python identifier or a non-negative integer")

    def insert(self, key: str | int, value: V | DotTree[V], overwrite: bool = False) -> None:
        """Add `value` under the dotted `key`; with `overwrite`, replace leaves and merge into existing subtrees."""
        if isinstance(key, int):
            if key < 0:
                raise ValueError(f"Numeric key {key} must not be negative")
            key = str(key)
        head, _, rest = key.partition(".")
        self._check(head, overwrite)
        if not rest:
            self._map[head] = value
            return
        existing = self._map.get(head)
        sub = existing.copy() if isinstance(existing, DotTree) else type(self)()
        sub.insert(rest, value, overwrite)
        self._map[head] = sub

    def update(self, other: DotTree[V], overwrite: bool = False) -> None:
        """Insert every top-level entry of `other` (a copy of it)."""
        for k, v in other.copy()._map.items():
            self.insert(k, v, overwrite)

    def _numeric(self, index: int) -> str:
        numbers = [int(k) for k in self._map if k.isdigit()]
        key = index if index >= 0 else max(numbers, default=-1) + 1 + index
        if key < 0 or str(key) not in self._map:
            raise KeyError(f"Numeric key {index} does not exist. Keys: {list(self._map)}")
        return str(key)

    def get(self, key: str | int) -> Any:
        """The leaf or subtree at `key` (dotted, numeric or negative numeric)."""
        if isinstance(key, int) or key.lstrip("-").isdigit():
            return self._map[self._numeric(int(key))]
        head, _, rest = key.partition(".")
        if head not in self._map:
            raise KeyError(f"Key {head!r} does not exist. Keys: {list(self._map)}")
        value = self._map[head]
        if not rest:
            return value
        if not isinstance(value, DotTree):
            raise KeyError(f"{head!r} is a leaf, so it has no key {rest!r}")
        return value.get(rest)

    def __getitem__(self, key: str | int) -> Any:
        return self.get(key)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        try:
            return self.get(name)
        except KeyError:
            raise AttributeError(f"{type(self).__name__} has no key {name!r}. Keys: {list(self._map)}") from None

    def __contains__(self, key: object) -> bool:
        try:
            self.get(key)  # type: ignore[arg-type]
        except (KeyError, AttributeError, TypeError):
            return False
        return True

    def __iter__(self) -> Iterator[str]:
        return iter(self._map)

    def len(self) -> int:
        """Number of top-level entries."""
        return len(self._map)

    def len_flat(self) -> int:
        """Number of leaves."""
        return len(self.to_dict())

    def keys(self) -> list[str]:
        """Top-level keys in insertion order."""
        return list(self._map)

    def values(self) -> list[Any]:
        """Top-level values in insertion order."""
        return list(self._map.values())

    def items(self) -> list[tuple[str, Any]]:
        """Top-level entries in insertion order."""
        return list(self._map.items())

    def to_dict(self) -> dict[str, V]:
        """Every leaf under its dotted key, in insertion order."""
        out: dict[str, V] = {}
        for k, v in self._map.items():
            if isinstance(v, DotTree):
                out.update({f"{k}.{sk}": sv for sk, sv in v.to_dict().items()})
            else:
                out[k] = v
        return out

    def keys_flat(self) -> list[str]:
        """Dotted keys of every leaf, in insertion order."""
        return list(self.to_dict())

    def values_flat(self) -> list[V]:
        """Every leaf, in insertion order."""
        return list(self.to_dict().values())

    @classmethod
    def from_dict(cls: type[T], d: Mapping[str, Any] | Mapping[int, Any]) -> T:
        """A tree with each (dotted) key of `d`."""
        tree = cls()
        for k, v in d.items():
            tree.insert(str(k), v, overwrite=True)
        return tree

    def copy(self: T) -> T:
        """A shallow copy: new subtrees, the same leaves."""
        new = type(self)()
        for k, v in self._map.items():
            new.insert(k, v.copy() if isinstance(v, DotTree) else v)
        return new

    def unpack(self) -> tuple[list[str], list[V]]:
        """Dotted keys and leaves, sorted by key."""
        items = sorted(self.to_dict().items(), key=lambda kv: kv[0])
        return [k for k, _ in items], [v for _, v in items]

    @classmethod
    def pack(cls: type[T], keys: Iterable[str | int], values: Iterable[Any]) -> T:
        """A tree from parallel (dotted) keys and values."""
        return cls.from_dict({str(k): v for k, v in zip(keys, values)})

    def filter_keys(self: T, keys: Iterable[str | int]) -> T:
        """A tree with only the given keys, each a leaf or a whole subtree."""
        wanted = list(keys)
        if len(wanted) != len(set(wanted)):
            raise ValueError(f"filter_keys got repeated keys: {wanted}")
        new = type(self)()
        for key in wanted:
            new.insert(key, self.get(key), overwrite=True)
        return new

    def map(self: T, fn: Callable[[Any], Any]) -> T:
        """A tree of the same kind with `fn` applied to every leaf."""
        return type(self).from_dict({k: fn(v) for k, v in self.to_dict().items()})

    def pop(self, key: str) -> Any:
        """Remove and return the entry at the dotted `key`."""
        head, _, rest = key.partition(".")
        if rest:
            sub = self.get(head)
            if not isinstance(sub, DotTree):
                raise KeyError(key)
            return sub.pop(rest)
        return self._map.pop(head)

    def to_mapping(self, other: DotTree[Any]) -> dict[V, Any]:
        """`{self[k]: other[k]}` for every dotted key the two trees share."""
        theirs = other.to_dict()
        return {v: theirs[k] for k, v in self.to_dict().items() if k in theirs}

    def clear(self) -> None:
        """Remove every leaf, keeping the (now empty) subtrees: a tree sharing one of them sees it emptied."""
        for k, v in list(self._map.items()):
            if isinstance(v, DotTree):
                v.clear()
            else:
                del self._map[k]

    # popxl-addons' spelling, which its programs call.
    _clear = clear

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.to_dict()!r})"
