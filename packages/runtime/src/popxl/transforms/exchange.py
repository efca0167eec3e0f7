"""io_tile_exchange: IO-tile placement, merged exchange and no ordering, in one context."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack, contextmanager

from popxl.context import in_sequence, io_tiles, merge_exchange


@contextmanager
def io_tile_exchange(verify_overlap: bool = True) -> Iterator[None]:
    """Place the transfers created inside on IO tiles as one unordered, merged exchange.

    Off-IPU this only annotates the ops; `verify_overlap` is accepted for
    compatibility and checks nothing, since there are no tiles to overlap on.
    """
    with ExitStack() as stack:
        stack.enter_context(io_tiles())
        stack.enter_context(merge_exchange())
        stack.enter_context(in_sequence(False))
        yield
