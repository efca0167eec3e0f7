# Generated from the table in popxl_addons/_paths.py by `python -m tools.shells`; do not edit.
"""popxl-addons' `popxl_addons.array_munging`, re-exporting the names of `popxl_addons.core.session.array_munging`."""

from popxl_addons.core.session.array_munging import (
    handle_negative_axis,
    pad_axis,
    repeat,
    repeat_axis,
    repeat_shard,
    shard,
    shard2D,
    split2D,
    squeeze_safe,
    tensor_parallel_input,
    tensor_parallel_output,
    unshard,
    unshard2D,
    unshard_arrays,
)

__all__ = [
    "shard",
    "unshard_arrays",
    "unshard",
    "repeat",
    "repeat_axis",
    "split2D",
    "shard2D",
    "unshard2D",
    "repeat_shard",
    "tensor_parallel_input",
    "pad_axis",
    "squeeze_safe",
    "handle_negative_axis",
    "tensor_parallel_output",
]
