"""DotTree: an insertion-ordered tree addressed by dotted keys."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any, Generic, TypeVar

V = TypeVar("V")
T = TypeVar("T", bound="DotTree[Any]")


def _check_key(key: str) -> str:
    if not (key.isidentifier() or key.isdigit()):
        raise ValueError(f"{key!r} is not a valid key: use identifiers or non-negative integers")
    return key


class DotTree(Generic[V]):
    """A tree of values whose keys are identifiers or numbers, reachable as `t.a.b` or `t["a.b"]`."""

    def __init__(self) -> None:
        object.__setattr__(self, "_map", {})

    _map: dict[str, V | DotTree[V]]

    def insert(self, key: str | int, value: V | DotTree[V], overwrite: bool = False) -> None:
        """Add `value` under the dotted `key` (an existing key needs `overwrite`)."""
        if isinstance(key, int):
            if key < 0:
                raise ValueError(f"Numeric key {key} must be non-negative")
            key = str(key)
        head, _, rest = key.partition(".")
        _check_key(head)
        if rest:
            sub = self._map.get(head)
            if not isinstance(sub, DotTree):
                if sub is not None and not overwrite:
                    raise ValueError(f"'{head}' already exists")
                sub = type(self)()
                self._map[head] = sub
            sub.insert(rest, value, overwrite)
            return
        if head in self._map and not overwrite:
            raise ValueError(f"'{head}' already exists")
        self._map[head] = value

    def update(self, other: DotTree[V], overwrite: bool = False) -> None:
        """Insert every top-level entry of `other`."""
        for k, v in other._map.items():
            self.insert(k, v, overwrite)

    def __getitem__(self, key: str | int) -> Any:
        head, _, rest = str(key).partition(".")
        if head not in self._map:
            raise KeyError(key)
        value = self._map[head]
        if rest:
            if not isinstance(value, DotTree):
                raise KeyError(key)
            return value[rest]
        return value

    def __getattr__(self, name: str) -> Any:
        try:
            return self._map[name]
        except KeyError:
            raise AttributeError(f"{type(self).__name__} has no key {name!r}") from None

    def __setattr__(self, name: str, value: Any) -> None:
        self.insert(name, value, overwrite=True)

    def __contains__(self, key: object) -> bool:
        try:
            self[str(key)]
        except KeyError:
            return False
        return True

    def __len__(self) -> int:
        return len(self._map)

    def __iter__(self) -> Iterator[str]:
        return iter(self._map)

    def keys(self) -> list[str]:
        """Top-level keys in insertion order."""
        return list(self._map)

    def values(self) -> list[V | DotTree[V]]:
        """Top-level values in insertion order."""
        return list(self._map.values())

    def items(self) -> list[tuple[str, V | DotTree[V]]]:
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
        """Dotted keys of every leaf."""
        return list(self.to_dict())

    def values_flat(self) -> list[V]:
        """Every leaf in insertion order."""
        return list(self.to_dict().values())

    @classmethod
    def from_dict(cls: type[T], d: Mapping[str, Any]) -> T:
        """A tree with each dotted key of `d`."""
        tree = cls()
        for k, v in d.items():
            tree.insert(k, v)
        return tree

    def copy(self: T) -> T:
        """A copy whose nested trees are copies too."""
        new = type(self)()
        for k, v in self._map.items():
            new._map[k] = v.copy() if isinstance(v, DotTree) else v
        return new

    def unpack(self) -> tuple[list[str], list[V]]:
        """Dotted keys and leaves, sorted by key."""
        items = sorted(self.to_dict().items())
        return [k for k, _ in items], [v for _, v in items]

    @classmethod
    def pack(cls: type[T], keys: Iterable[str], values: Iterable[Any]) -> T:
        """A tree from parallel dotted keys and values."""
        return cls.from_dict(dict(zip(keys, values)))

    def filter_keys(self: T, keys: Iterable[str]) -> T:
        """A tree with only the given dotted keys."""
        flat = self.to_dict()
        return type(self).from_dict({k: flat[k] for k in keys})

    def map(self, fn: Callable[[V], Any]) -> Any:
        """A tree of the same kind with `fn` applied to every leaf."""
        return type(self).from_dict({k: fn(v) for k, v in self.to_dict().items()})

    def pop(self, key: str) -> Any:
        """Remove and return the entry at the dotted `key`."""
        head, _, rest = key.partition(".")
        if rest:
            sub = self._map[head]
            if not isinstance(sub, DotTree):
                raise KeyError(key)
            return sub.pop(rest)
        return self._map.pop(head)

    def to_mapping(self, other: DotTree[Any]) -> dict[V, Any]:
        """`{self[k]: other[k]}` for every dotted key the two trees share."""
        theirs = other.to_dict()
        return {v: theirs[k] for k, v in self.to_dict().items() if k in theirs}

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.to_dict()!r})"
