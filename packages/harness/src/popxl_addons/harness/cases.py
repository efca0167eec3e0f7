"""Describing equivalence cases once and expanding them into variants."""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass, field

from popxl_addons.core import IO_MODES, Module

# Where the serialised graph stores its output: a remote buffer with each row-offset kind, or a host stream.
STORES = ("zero", "int", "none", "callable", "stream")
LOADS = ("stream", "buffer")
# Where remote buffers live while the programs run (`Session(remote_memory=...)`).
REMOTE_MEMORIES = ("host", "device")


@dataclass(frozen=True)
class Layout:
    """Replicas as tensor-parallel x data-parallel (`tp` consecutive replicas per TP group)."""

    tp: int = 1
    dp: int = 1

    @property
    def replication(self) -> int:
        """Total number of replicas."""
        return self.tp * self.dp

    @property
    def label(self) -> str:
        """Short name, as used in case ids."""
        return "single" if self.replication == 1 else f"tp{self.tp}xdp{self.dp}"


@dataclass(frozen=True)
class Case:
    """A module checked serialised against not serialised, over a cross product of settings.

    `module(layout)` builds the module inside the main graph of an Ir with
    `layout.replication` replicas; its graph takes one input of `input_shape`.
    With `grad`, forward and gradient are serialised together and the input
    gradients and accumulated weight gradients are compared. `chain` > 1
    chains that many forward graphs through one buffer. `shard_activation`
    stores the first activation sharded across each tensor-parallel group.
    `remote_memories` lists the placements of remote buffers to check.
    `policy` gives activations' choices ("host", "recompute" or "keep") as
    (name, choice) pairs, with `grad`. With `planner_step`, the programs of
    `grad` are the step the planner measures (the outputs to host and their
    gradients from host, activations in host memory) rather than the
    harness's (the output gradients through a remote buffer, the input
    gradient to host).
    """

    name: str
    module: Callable[[Layout], Module]
    input_shape: tuple[int, ...]
    grad: bool = False
    io_modes: tuple[str, ...] = IO_MODES
    steps: tuple[int, ...] = (1, 2, 4)
    rows: tuple[int, ...] = (1, 2)
    stores: tuple[str, ...] = ("zero",)
    loads: tuple[str, ...] = ("stream",)
    layouts: tuple[Layout, ...] = (Layout(),)
    remote_memories: tuple[str, ...] = REMOTE_MEMORIES
    chain: int = 1
    shard_activation: bool = False
    policy: tuple[tuple[str, str], ...] = ()
    rtol: float = 1e-5
    atol: float = 1e-5
    seed: int = 0
    planner_step: bool = False

    def __post_init__(self) -> None:
        for mode in self.io_modes:
            if mode not in IO_MODES:
                raise ValueError(f"Case {self.name!r}: unknown io_mode {mode!r}, expected one of {IO_MODES}")
        for store in self.stores:
            if store not in STORES:
                raise ValueError(f"Case {self.name!r}: unknown store kind {store!r}, expected one of {STORES}")
        for load in self.loads:
            if load not in LOADS:
                raise ValueError(f"Case {self.name!r}: unknown load kind {load!r}, expected one of {LOADS}")
        for memory in self.remote_memories:
            if memory not in REMOTE_MEMORIES:
                raise ValueError(
                    f"Case {self.name!r}: unknown remote memory {memory!r}, expected one of {REMOTE_MEMORIES}"
                )
        if self.grad and self.chain > 1:
            raise ValueError(f"Case {self.name!r}: chains are forward-only")
        if self.planner_step and not self.grad:
            raise ValueError(f"Case {self.name!r}: the planner's step has a gradient")

    def variants(self) -> list[Variant]:
        """Every combination of the case's settings."""
        settings = (self.io_modes, self.steps, self.rows, self.stores, self.loads, self.layouts, self.remote_memories)
        return [Variant(self, *combo) for combo in itertools.product(*settings)]


@dataclass(frozen=True)
class Variant:
    """One concrete setting of a case."""

    case: Case
    io_mode: str
    steps: int
    rows: int
    store: str
    load: str
    layout: Layout = field(default_factory=Layout)
    remote_memory: str = "host"

    @property
    def skip_reason(self) -> str | None:
        """Why the variant cannot run as asked, or None."""
        if self.io_mode == "io_overlapped" and self.steps < 2:
            # Short: the CLI prints it after "skipped N variant(s): " in at most 80 columns.
            return f"io_overlapped needs at least 2 steps; 'io' covers {self.steps} step"
        return None

    @property
    def label(self) -> str:
        """The settings, such as `io_overlapped-steps4-rows2-tp4xdp2-host`."""
        parts = [self.io_mode, f"steps{self.steps}", f"rows{self.rows}"]
        if len(self.case.stores) > 1:
            parts.append(f"store_{self.store}")
        if len(self.case.loads) > 1:
            parts.append(f"load_{self.load}")
        if self.layout.replication > 1 or len(self.case.layouts) > 1:
            parts.append(self.layout.label)
        if len(self.case.remote_memories) > 1:
            parts.append(self.remote_memory)
        return "-".join(parts)

    @property
    def id(self) -> str:
        """The case name with its settings, such as `ffn_tp[io_overlapped-steps4-rows1-tp4xdp2]`."""
        return f"{self.case.name}[{self.label}]"
