"""Running programs on host data: `TaskSession`, host streams, host-side layouts of data for replicas, and
running a module in a test.

The sub-modules are imported by their paths: this package re-exports nothing.
"""
