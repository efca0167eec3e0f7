"""popxl's autodiff as popxl-addons runs it: the op-to-identity rewrite follows on every gradient graph made.

The rewrite is defined here, beside the autodiff of graphs with named arguments that needs it;
`popxl_addons.core.transforms.patterns` runs it on a whole program.
"""

from __future__ import annotations

from collections.abc import Iterable

import popxl
from popxl.extension import replace_with_identity
from popxl.transforms import GradGraphInfo
from popxl.transforms import autodiff as popxl_autodiff
from popxl_addons.core.modules.graph_common import CalledGraphsGradInfoLike, normalise_called_graphs_grad_info


def autodiff_with_patterns(
    graph: popxl.Graph,
    grads_provided: Iterable[popxl.Tensor] | None = None,
    grads_required: Iterable[popxl.Tensor] | None = None,
    called_graphs_grad_info: CalledGraphsGradInfoLike | None = None,
) -> GradGraphInfo:
    """The gradient-graph info of `graph` by popxl's autodiff (the gradient graphs of called graphs given or
    made), each gradient graph made then rewritten op-to-identity, as popxl-addons' `_autodiff_with_patterns`
    runs popart's pre-alias patterns on them."""
    infos: dict[popxl.Graph, GradGraphInfo] = popxl_autodiff(
        graph,
        grads_provided,
        grads_required,
        normalise_called_graphs_grad_info(called_graphs_grad_info),
        return_all_grad_graphs=True,
    )
    apply_op_to_identity(info.graph for info in infos.values())
    return infos[graph]


def apply_op_to_identity(graphs: Iterable[popxl.Graph]) -> int:
    """Replace every op of `graphs` that its kind makes an identity (`PopartFacts.identity_when`) by one; returns how
    many."""
    count = 0
    for g in graphs:
        for op in g.ops:
            replaceable = op.opdef.popart.identity_when
            if replaceable is not None and replaceable(op):
                replace_with_identity(op)
                count += 1
    return count
