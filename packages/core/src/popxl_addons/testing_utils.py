"""popxl-addons' `popxl_addons.testing_utils`; this project has none of its names yet."""

from __future__ import annotations

from popxl_addons import _compat

__all__: list[str] = []

# popxl-addons names that this project does not implement yet.
__getattr__ = _compat.not_implemented(__name__, ["ops_of_type", "TensorInput", "run_module"], owner="popxl_addons.core")
