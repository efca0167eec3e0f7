"""Graph transforms of popxl: autodiff and exchange scheduling."""

from popxl.context import merge_exchange
from popxl.transforms import loop_grad  # noqa: F401  (registers the gradient of repeat)
from popxl.transforms.autodiff import ExpectedConnection, ExpectedConnectionType, GradGraphInfo, autodiff
from popxl.transforms.exchange import io_tile_exchange

__all__ = [
    "ExpectedConnection",
    "ExpectedConnectionType",
    "GradGraphInfo",
    "autodiff",
    "io_tile_exchange",
    "merge_exchange",
]
