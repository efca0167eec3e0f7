"""popxl-addons' graph transforms under one name, as `popxl_addons.transforms` offers them."""

from popxl_addons.core.autodiff import autodiff, autodiff_with_accumulation
from popxl_addons.core.batch_serialisation import batch_serialise, batch_serialise_fwd_and_grad
from popxl_addons.core.recomputation import recompute_graph

__all__ = [
    "autodiff",
    "autodiff_with_accumulation",
    "batch_serialise",
    "batch_serialise_fwd_and_grad",
    "recompute_graph",
]
