"""The built-in cases: every scenario of popxl-addons' batch-serialisation tests, and more, as data."""

from __future__ import annotations

from popxl_addons.harness.cases import LOADS, STORES, Case, Layout
from popxl_addons.harness.models import FeedForwardTP, NormLinear, TransformerBlock
from popxl_addons.layers import Linear, Scale

BUILTIN_CASES: tuple[Case, ...] = (
    # A Scale graph over streamed or buffered input, its output stored with every row-offset kind.
    Case("scale", lambda layout: Scale(), (2, 2), steps=(1, 4), stores=STORES, loads=LOADS),
    # Three serialised graphs chained through one buffer that grows with each.
    Case("scale_sequence", lambda layout: Scale(), (2, 2), steps=(2, 4), chain=3),
    # Forward and gradient of a Linear, the input streamed or (all inputs) in remote buffers.
    Case("linear_grad", lambda layout: Linear(2), (2, 2), grad=True, loads=LOADS),
    # The 8-replica tensor-parallel feed-forward block with an activation sharded over each TP group.
    Case(
        "ffn_tp",
        lambda layout: FeedForwardTP(layout.tp, layout.dp, layout.tp * 16),
        (3, 8),
        grad=True,
        steps=(2, 4),
        rows=(1,),
        layouts=(Layout(4, 2), Layout(2, 4)),
        shard_activation=True,
        rtol=1e-4,
        atol=1e-5,
    ),
    Case("norm_linear", lambda layout: NormLinear(8), (4, 8), grad=True, steps=(1, 3), rtol=1e-4, atol=1e-5),
    Case("transformer", lambda layout: TransformerBlock(8), (4, 8), grad=True, steps=(2,), rtol=1e-4, atol=1e-5),
)
