"""Errors raised while building and running a popxl program.

Where popart reports misuse as `popart_exception`, the error here derives from it too (it is
`popart.popart_exception`), so programs that catch popart's exception catch these.
"""


class popart_exception(Exception):  # noqa: N818  (popart's name)
    """An error that popart reports as `popart_exception`."""


class OutOfRangeError(IndexError, popart_exception):
    """A remote buffer or host stream was indexed past its bound while running; nothing was changed."""


class OutOfMemoryError(MemoryError, popart_exception):
    """A program that does not fit the memory the machine has, refused before it ran: nothing was changed.

    popart raises `popart.OutOfMemoryException` when a program does not fit the IPU's memory; this is that
    error here (popart's name is an alias), and `getSummaryReport()` returns its message.
    """

    def getSummaryReport(self) -> str:
        """The error's message: the bytes needed and available, the largest buffers and what to change."""
        return str(self)


class AutodiffError(RuntimeError, popart_exception):
    """A gradient that cannot be built."""
