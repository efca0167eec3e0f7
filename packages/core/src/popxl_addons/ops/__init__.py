"""popxl-addons' `popxl_addons.ops`: the ops this project has, under popxl-addons' names.

As in popxl-addons, the custom ops' sub-packages (`popxl_addons.ops.replicated_all_reduce_TP`,
...) are imported only when asked for. The collectives' ones ship in popxl-addons-collectives:
`__path__` is extended with `pkgutil.extend_path` so that an editable install, which keeps
each distribution's folder apart, finds them too.
"""

from __future__ import annotations

from pkgutil import extend_path

__path__ = extend_path(__path__, __name__)

from popxl_addons import _compat
from popxl_addons.ops import streams

# As in popxl-addons, the function is bound over its sub-module of the same name.
from popxl_addons.ops.fp8_amax_scale import fp8_amax_scale
from popxl_addons.ops.streams import host_load, host_store

__all__ = ["fp8_amax_scale", "host_load", "host_store", "streams"]

# popxl-addons names that this project does not implement yet.
__getattr__ = _compat.not_implemented(__name__, ["cross_entropy", "cross_entropy_with_grad"], owner="popxl_addons.core")
