"""Errors raised while building and running a popxl program.

Where popart reports misuse as `popart_exception`, the error here derives from it too (it is
`popart.popart_exception`), so programs that catch popart's exception catch these.
"""


class popart_exception(Exception):  # noqa: N818  (popart's name)
    """An error that popart reports as `popart_exception`."""


class OutOfRangeError(IndexError, popart_exception):
    """A remote buffer, host stream or index op (gather, scatter, dynamic slice...) was given an index past its
    bound while running with checks; nothing was changed."""


class OutOfMemoryError(MemoryError, popart_exception):
    """A program that does not fit the memory the machine has, refused before it ran: nothing was changed.

    popart raises `popart.OutOfMemoryException` when a program does not fit the IPU's memory; this is that
    error here (popart's name is an alias), and `getSummaryReport()` returns its message.
    """

    def getSummaryReport(self) -> str:
        """The error's message: the bytes needed and available, the largest buffers and what to change."""
        return str(self)


class RemoteFileError(OSError):
    """A remote buffer's file (`Session(remote_dir=...)`) cannot be made, read or written as asked: the message
    names the file."""


class AutodiffError(RuntimeError, popart_exception):
    """A gradient that cannot be built."""


# Why code that builds popart's own ops cannot run here, said the same way wherever such code fails:
# `Graph._pb_graph`, the `popart._internal` stand-in and a C++ custom op's `import cppimport`.
NO_POPART_IR = (
    "popxl-xla runs popxl programs on XLA, with no popart IR or Poplar underneath, so code that builds popart ops "
    "itself (through popart._internal.ir, or as a C++ custom op compiled against popart with cppimport) cannot run "
    "here; write the op with popxl ops, or define it with popxl.extension"
)


class NoPopartIRError(AttributeError):
    """popart's C++ IR was reached for (a popart graph, a C++ custom op): this runtime has none.

    It is an AttributeError, so `hasattr(graph, "_pb_graph")` stays False.
    """
