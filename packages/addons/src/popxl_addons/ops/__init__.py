# Generated from the table in popxl_addons/_paths.py by `python -m tools.shells`; do not edit.
"""popxl-addons' `popxl_addons.ops`: the ops this project has, under popxl-addons' names. As there, a function imported
from the sub-module of its name is bound over it, and the custom ops' sub-packages import when asked for."""

from popxl_addons.ops import streams
from popxl_addons.ops.cross_entropy import cross_entropy, cross_entropy_with_grad
from popxl_addons.ops.fp8_amax_scale import fp8_amax_scale
from popxl_addons.ops.streams import host_load, host_store

__all__ = ["streams", "cross_entropy", "cross_entropy_with_grad", "fp8_amax_scale", "host_load", "host_store"]
