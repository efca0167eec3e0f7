"""Graph transforms of popxl: autodiff, exchange scheduling and decompose_sum."""

from popxl.context import merge_exchange
from popxl.transforms import loop_grad  # noqa: F401  (registers the gradient of repeat)
from popxl.transforms.autodiff import ExpectedConnection, ExpectedConnectionType, GradGraphInfo, autodiff
from popxl.transforms.decompose_sum import decompose_sum
from popxl.transforms.exchange import io_tile_exchange

__all__ = [
    "ExpectedConnection",
    "ExpectedConnectionType",
    "GradGraphInfo",
    "autodiff",
    "decompose_sum",
    "io_tile_exchange",
    "merge_exchange",
]
