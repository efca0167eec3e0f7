"""popart's C++ IR bindings (`popart._internal.ir`), which this runtime does not have.

popxl-xla implements popxl's API directly; there is no popart IR underneath it. Code that
reaches into `popart._internal.ir` (IR ops, tensors, topological constraints) cannot run here.
"""

from popxl.errors import NO_POPART_IR

raise ImportError(f"popart._internal (popart's C++ IR bindings) does not exist here: {NO_POPART_IR}")
