"""Errors raised while running a popxl program."""


class OutOfRangeError(IndexError):
    """A remote buffer or host stream was indexed past its bound while running; nothing was changed."""


class AutodiffError(RuntimeError):
    """A gradient that cannot be built."""
