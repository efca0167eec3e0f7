"""popxl-addons' fused op kinds (its C++ custom ops), each module an op kind with its lowering to JAX.

Each registers its kinds through `popxl.extension` when imported; `popxl_addons.ops` offers them under
popxl-addons' paths. The sub-modules are imported by their paths: this package re-exports nothing.
"""
