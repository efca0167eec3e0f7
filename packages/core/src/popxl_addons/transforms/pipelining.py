"""popxl-addons' `popxl_addons.transforms.pipelining`.

Re-exports what this project has (`popxl_addons.core.pipelining`). popxl-addons' `Pipelining` and
`PipelineBoundGraph`, its machinery for moving popart IR ops into stage graphs, have no counterpart
here: the transform is built differently (see `popxl_addons.core.pipelining`).
"""

from __future__ import annotations

from popxl_addons import _compat
from popxl_addons.core.pipelining import Restore, StageContext, Stash, get_op_pipeline_stage, pipelined_execution

__all__ = ["pipelined_execution", "StageContext", "Stash", "Restore", "get_op_pipeline_stage"]

# popxl-addons names that this project does not implement.
__getattr__ = _compat.not_implemented(__name__, ["Pipelining", "PipelineBoundGraph"])
