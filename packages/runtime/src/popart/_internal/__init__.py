"""popart's C++ IR bindings (`popart._internal.ir`), which this runtime does not have.

popxl-xla implements popxl's API directly; there is no popart IR underneath it. Code that
reaches into `popart._internal.ir` (IR ops, tensors, topological constraints) cannot run here.
"""

raise ImportError(
    "popart._internal (popart's C++ IR bindings) does not exist in the popxl-xla runtime: "
    "it implements popxl's public API without a popart IR underneath"
)
