"""The Ir: the main graph, its subgraphs, and program-wide settings."""

from __future__ import annotations

import inspect
import itertools
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from popxl.graph import Graph, trace
from popxl.lowering.cache import cache_dir_from_environment
from popxl.replica_grouping import ReplicaGrouping, grouping_from_assignments


class SessionOptions:
    """Program options that popxl code sets through `ir._pb_ir.getSessionOptions()`."""

    def __init__(self) -> None:
        self.numIOTiles = 0
        # Graphviz checkpoints to write (see popxl.dot) and where.
        self.dotChecks: set[str] = set()
        self.logDir = ""
        # Whether a float8 op's log2 scale outside [-32, 32) fails the run.
        self.throwIfLog2ScaleTensorNotInRange = True
        # Poplar engine options and popart's IPU memory and compilation knobs: recorded, with no effect off an IPU
        # (XLA chooses its own memory layout and aliasing).
        self.engineOptions: dict[str, str] = {}
        self.aliasZeroCopy = False
        self.useHostCopyOps = False
        # Executables cached in cachePath (JAX's persistent compilation cache); set from POPXL_CACHE_DIR as popxl does.
        self.cachePath = cache_dir_from_environment()
        self.enableEngineCaching = bool(self.cachePath)
        # The replica layout of a launch across instances (popdist.popart.configureSessionOptions sets them).
        self.replicatedGraphCount = 1
        self.enableReplicatedGraphs = False
        self.enableDistributedReplicatedGraphs = False
        self.globalReplicationFactor = 1
        self.globalReplicaOffset = 0
        self.enableExplicitMainLoops = False
        self.explicitRecomputation = False


class _PbIr:
    """Stand-in for popxl's internal IR handle: the session options, and the Ir's graphs."""

    def __init__(self, ir: Ir) -> None:
        self._options = SessionOptions()
        self._ir = ir

    def getSessionOptions(self) -> SessionOptions:
        """The mutable session options."""
        return self._options

    def getAllGraphs(self) -> list[Graph]:
        """Every graph of the Ir, the main graph included, ordered by id (the main graph's, "", first), as
        popart's `Ir::getAllGraphs` lists every graph created, called or not. These are popxl Graphs, not
        popart's."""
        return sorted(self._ir.graphs, key=lambda g: g.id)


class Ir:
    """A popxl program: a main graph, subgraphs, replication and host-transfer settings."""

    def __init__(self, replication: int | str = 1) -> None:
        """`replication` is the number of replicas, or "popdist": the replicas of every instance of a poprun
        launch (this process joins the others through `popdist.init()`)."""
        self._graph_counter = itertools.count()
        self._dedup_counter = itertools.count()
        self._buffer_counter = itertools.count(1)
        # popart numbers the ops of an Ir from 100 (`Ir::opsCounter`), over all its graphs.
        self._op_counter = itertools.count(100)
        self._replication_factor = 1
        self._num_host_transfers = 1
        self._pb_ir = _PbIr(self)
        self._dot_ordinal = itertools.count(1)
        self._replication_locked = False
        self._graphs: list[Graph] = []
        self.main_graph = Graph(self, "", "main_graph")
        if replication == "popdist":
            self._join_popdist()
        elif isinstance(replication, str):
            raise ValueError(f"replication must be a number of replicas or 'popdist', got {replication!r}")
        else:
            self.replication_factor = int(replication)

    def _join_popdist(self) -> None:
        import popdist
        import popdist.popart

        popdist.init()
        popdist.popart.configureSessionOptions(self.session_options)
        self.replication_factor = popdist.getNumTotalReplicas()

    @property
    def session_options(self) -> SessionOptions:
        """The program options popxl code reaches through `ir._pb_ir.getSessionOptions()`."""
        return self._pb_ir.getSessionOptions()

    @property
    def replication_factor(self) -> int:
        """Number of replicas of the program."""
        return self._replication_factor

    @replication_factor.setter
    def replication_factor(self, value: int) -> None:
        if self._replication_locked:
            raise RuntimeError("The replication factor cannot change after a Session was created")
        if int(value) < 1:
            raise ValueError(f"replication_factor must be >= 1, got {value}")
        self._replication_factor = int(value)

    @property
    def instance_replication_factor(self) -> int:
        """Replicas run by this process (all of them unless several processes share the program)."""
        from popxl.lowering.distributed import process_count

        return self._replication_factor // process_count()

    @property
    def num_host_transfers(self) -> int:
        """Executions of each host load/store per `Session.run`."""
        return self._num_host_transfers

    @num_host_transfers.setter
    def num_host_transfers(self, value: int) -> None:
        if int(value) < 1:
            raise ValueError(f"num_host_transfers must be >= 1, got {value}")
        self._num_host_transfers = int(value)

    @property
    def graphs(self) -> tuple[Graph, ...]:
        """The main graph followed by every subgraph."""
        return (self.main_graph, *self._graphs)

    def next_dedup(self) -> int:
        """The next value of the counter that makes repeated tensor names unique (popxl's `__t<c>`)."""
        return next(self._dedup_counter)

    def next_buffer_id(self) -> int:
        """A fresh remote buffer id (popxl numbers them from 1)."""
        return next(self._buffer_counter)

    def next_op_id(self) -> int:
        """A fresh op id: popart's, for ops created in the same order."""
        return next(self._op_counter)

    def lock_replication(self) -> None:
        """Refuse later changes of the replication factor: a Session was created for this Ir."""
        self._replication_locked = True

    def create_empty_graph(self, name: str | None = None) -> Graph:
        """A new subgraph with no inputs, ops or outputs."""
        base = name or "graph"
        g = Graph(self, f"{base}_subgraph({next(self._graph_counter)})")
        self._graphs.append(g)
        return g

    def create_graph(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Graph:
        """A new subgraph traced from `fn` (or a Module's `build`) with the given arguments."""
        if not callable(fn):
            raise TypeError(f"create_graph takes a callable or a Module, got {fn!r}")
        build = getattr(fn, "build", None)
        if build is not None and not (inspect.isfunction(fn) or inspect.ismethod(fn)):
            base = type(fn).__qualname__
            target: Callable[..., Any] = build
        else:
            base = getattr(fn, "__qualname__", type(fn).__qualname__)
            target = fn
        graph = self.create_empty_graph(base.replace(".<locals>", ""))
        trace(graph, target, args, kwargs)
        return graph

    def replica_grouping(self, stride: int = 1, group_size: int | None = None) -> ReplicaGrouping:
        """A grouping of this Ir's replicas."""
        return ReplicaGrouping(self, stride, group_size)

    def dot_checkpoint(self, check: str, save_dir: str | os.PathLike[str] | None = None) -> None:
        """Write this Ir as a Graphviz DOT file now if checkpoint `check` is active (see `popxl.dot`); with no
        checks set at all, every checkpoint becomes active, as in popxl. `save_dir` sets where they are written."""
        from popxl.dot import CHECKS_VARIABLE, write_checkpoint  # the picture needs the op registry, built later

        opts = self.session_options
        if save_dir is not None:
            Path(save_dir).mkdir(parents=True, exist_ok=True)
            opts.logDir = str(save_dir)
        if CHECKS_VARIABLE not in os.environ and not opts.dotChecks:
            opts.dotChecks = {"ALL"}
        write_checkpoint(self, check, next(self._dot_ordinal))

    def write_final_dot(self) -> None:
        """Write the 'FINAL' checkpoint if it is active (a Session does, when it is created)."""
        from popxl.dot import write_checkpoint

        write_checkpoint(self, "FINAL", next(self._dot_ordinal))

    def replica_grouping_from_assignments(self, assignment: list[int]) -> ReplicaGrouping:
        """A grouping of this Ir's replicas where replica r is in group `assignment[r]`.

        Groups are numbered from 0 and all of one size. An assignment whose groups' members are a
        constant stride apart is the same grouping as `replica_grouping(stride, group_size)`, usable
        by collectives; any other serves variables only, as in popxl.
        """
        return grouping_from_assignments(self, assignment)

    def __repr__(self) -> str:
        return f"Ir(replication_factor={self._replication_factor}, graphs={len(self.graphs)})"
