"""Remote memory and replica sharding: remote buffers with the graphs that load and store them, replicated
tensor sharding, and the remote seed variable.

The sub-modules are imported by their paths: this package re-exports nothing.
"""
