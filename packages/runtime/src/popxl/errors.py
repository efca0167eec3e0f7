"""Errors raised while building and running a popxl program.

Where popart reports misuse as `popart_exception`, the error here derives from it too (it is
`popart.popart_exception`), so programs that catch popart's exception catch these.
"""


class popart_exception(Exception):  # noqa: N818  (popart's name)
    """An error that popart reports as `popart_exception`."""


class OutOfRangeError(IndexError, popart_exception):
    """A remote buffer or host stream was indexed past its bound while running; nothing was changed."""


class AutodiffError(RuntimeError, popart_exception):
    """A gradient that cannot be built."""
