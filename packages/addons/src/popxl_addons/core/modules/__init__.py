"""Modules and what they build: named tensors, variable factories, graphs with named arguments and their autodiff.

`Module` (module.py) builds a graph (graph.py), cached when asked (graph_cache.py), and records the
variables it needs (variable_factory.py) under dotted names (dot_tree.py, named_tensors.py,
named_replica_grouping.py). The sub-modules are imported by their paths: this package re-exports nothing,
so that importing one of them never runs another.
"""
