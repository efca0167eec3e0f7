# Generated from the table in popxl_addons/_paths.py by `python -m tools.shells`; do not edit.
"""popxl-addons' `popxl_addons.transforms.pipelining`: the stages run one after another on one device
(docs/pipelining.md). Not implemented here: `Pipelining`, `PipelineBoundGraph` (they raise
`NotImplementedHereError`)."""

from popxl_addons._not_implemented import not_implemented
from popxl_addons.core.transforms.pipelining import (
    Restore,
    StageContext,
    Stash,
    get_op_pipeline_stage,
    pipelined_execution,
)

__all__ = ["pipelined_execution", "StageContext", "Stash", "Restore", "get_op_pipeline_stage"]

_MISSING = {
    "Pipelining": "`pipelined_execution(steps)`, which builds the stages from the ops created in its context",
    "PipelineBoundGraph": "`pipelined_execution(steps)`; a stage's graph is not a graph of its own here",
}
__getattr__ = not_implemented(__name__, _MISSING)
