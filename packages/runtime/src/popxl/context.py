"""The current-graph stack and the scheduling annotations recorded on new ops."""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from popxl.graph import Graph
    from popxl.ir import Ir
    from popxl.op import Op

F = TypeVar("F", bound=Callable[..., Any])


@dataclass
class _State:
    graphs: list[Graph] = field(default_factory=list)
    name_scopes: list[str] = field(default_factory=list)
    in_sequence: list[bool | str] = field(default_factory=list)
    # Per graph: the last op added under in_sequence(True), cleared when the outermost context closes.
    last_sequenced: dict[int, Op] = field(default_factory=dict)
    io_tiles: int = 0
    ipu: int = 0
    exchange_group: int | None = None
    exchange_counter: int = 0


_state = _State()


def gcg() -> Graph:
    """The current graph."""
    if not _state.graphs:
        raise RuntimeError("No current graph: enter a graph context with `with graph:` first.")
    return _state.graphs[-1]


def gmg() -> Graph:
    """The main graph of the current graph's Ir."""
    return gcg().ir.main_graph


def gir() -> Ir:
    """The Ir of the current graph."""
    return gcg().ir


def push_graph(graph: Graph) -> None:
    """Make `graph` the current graph."""
    if _state.graphs and _state.graphs[-1].ir is not graph.ir:
        raise RuntimeError("Cannot enter a graph of one Ir while a graph of another Ir is current.")
    _state.graphs.append(graph)


def pop_graph() -> None:
    """Return to the previous current graph."""
    _state.graphs.pop()


def name_scope_prefix() -> str:
    """The current name scopes joined with '/', ending in '/' when any are open."""
    return "".join(s + "/" for s in _state.name_scopes)


@contextmanager
def name_scope(name: str) -> Iterator[None]:
    """Prefix the names of tensors created inside with `name/`."""
    _state.name_scopes.append(name)
    try:
        yield
    finally:
        _state.name_scopes.pop()


@contextmanager
def _swap_name_scopes(scopes: list[str]) -> Iterator[None]:
    saved = _state.name_scopes
    _state.name_scopes = scopes
    try:
        yield
    finally:
        _state.name_scopes = saved


def fresh_name_scopes() -> Any:
    """A context with no name scopes open (for tracing a new graph)."""
    return _swap_name_scopes([])


class in_sequence:
    """Order the ops created inside one after another (usable as a decorator too)."""

    def __init__(self, mode: bool | str = True) -> None:
        if mode is None or not isinstance(mode, bool | str):
            raise TypeError(f"in_sequence takes True, False or 'pass', got {mode!r}")
        if isinstance(mode, str) and mode != "pass":
            raise TypeError(f"in_sequence takes True, False or 'pass', got {mode!r}")
        self.mode = mode

    def __enter__(self) -> None:
        _state.in_sequence.append(self.mode)

    def __exit__(self, *exc: object) -> None:
        _state.in_sequence.pop()
        if not _state.in_sequence:
            _state.last_sequenced.clear()

    def __call__(self, fn: F) -> F:
        @functools.wraps(fn)
        def wrapped(*args: Any, **kwargs: Any) -> Any:
            with in_sequence(self.mode):
                return fn(*args, **kwargs)

        return wrapped  # type: ignore[return-value]


@contextmanager
def io_tiles() -> Iterator[None]:
    """Place the ops created inside on the IO tiles (an annotation here)."""
    _state.io_tiles += 1
    try:
        yield
    finally:
        _state.io_tiles -= 1


@contextmanager
def ipu(ipu: int) -> Iterator[None]:
    """Place the ops created inside on virtual IPU `ipu` (an annotation here; popxl's parameter name)."""
    saved = _state.ipu
    _state.ipu = ipu
    try:
        yield
    finally:
        _state.ipu = saved


@contextmanager
def merge_exchange() -> Iterator[None]:
    """Group the host and remote transfers created inside into one exchange (an annotation)."""
    saved = _state.exchange_group
    _state.exchange_counter += 1
    _state.exchange_group = _state.exchange_counter
    try:
        yield
    finally:
        _state.exchange_group = saved


@dataclass(frozen=True)
class Placement:
    """Where and in which exchange an op was placed when it was created."""

    tile_set: str
    ipu: int
    exchange_group: int | None
    after: int | None  # creation index of the op this one is sequenced after


def current_placement(graph: Graph) -> Placement:
    """The annotations for an op about to be added to `graph`."""
    mode = _state.in_sequence[-1] if _state.in_sequence else "pass"
    last = _state.last_sequenced.get(id(graph))
    after = last.index if (mode is True and last is not None) else None
    return Placement("io" if _state.io_tiles else "compute", _state.ipu, _state.exchange_group, after)


def record_sequenced(graph: Graph, op: Op) -> None:
    """Remember `op` as the latest op of `graph` for in_sequence ordering."""
    if _state.in_sequence and _state.in_sequence[-1] is True:
        _state.last_sequenced[id(graph)] = op


class Context:
    """popxl's building context: the current graph, name scopes, placement and scheduling mode.

    One exists per process (`get_current_context()`); it reads and changes the
    same state as `gcg`, `name_scope`, `ipu`, `io_tiles` and `in_sequence`.
    """

    @property
    def graph(self) -> Graph:
        """The current graph."""
        return gcg()

    @property
    def main_graph(self) -> Graph:
        """The main graph of the current graph's Ir."""
        return gmg()

    @property
    def ir(self) -> Ir:
        """The Ir of the current graph."""
        return gir()

    @property
    def ipu_id(self) -> int:
        """The virtual IPU new ops are placed on."""
        return _state.ipu

    @property
    def io_tile_set(self) -> bool:
        """Whether new ops are placed on the IO tiles."""
        return _state.io_tiles > 0

    @property
    def name_scopes(self) -> list[str]:
        """The open name scopes, outermost first (a copy)."""
        return list(_state.name_scopes)

    @property
    def in_sequence(self) -> bool | str | None:
        """The innermost `in_sequence` mode, None outside every `in_sequence` context."""
        return _state.in_sequence[-1] if _state.in_sequence else None

    def push_graph(self, graph: Graph) -> None:
        """Make `graph` the current graph."""
        push_graph(graph)

    def pop_graph(self) -> Graph:
        """Return to the previous current graph, giving the one left."""
        left = gcg()
        pop_graph()
        return left

    def push_name_scope(self, name: str) -> None:
        """Open name scope `name`."""
        _state.name_scopes.append(name)

    def pop_name_scope(self) -> str:
        """Close the innermost name scope, giving its name."""
        return _state.name_scopes.pop()


_CONTEXT = Context()


def get_current_context() -> Context:
    """The building context (popxl's `popxl.context.get_current_context`)."""
    return _CONTEXT


# popxl's long names for the three above.
get_current_graph = gcg
get_main_graph = gmg
get_ir = gir
