"""popxl-addons, as its programs import it: `import popxl_addons as addons; addons.Module`.

This project splits popxl-addons over several distributions that share the `popxl_addons`
package: popxl-addons-core (`popxl_addons.core`, and this file), popxl-addons-layers
(`popxl_addons.layers`), popxl-addons-collectives (`popxl_addons.collectives`) and
popxl-addons-harness (`popxl_addons.harness`). The modules that carry popxl-addons' own paths
(`popxl_addons.transforms.batch_serialisation`, `popxl_addons.named_tensors`,
`popxl_addons.ops.replicated_all_reduce_TP`, ...) are thin: they re-export names defined in
the sub-package that owns them, and each ships in the distribution of its names.

How the package spans distributions: popxl-addons-core owns this regular package's
`__init__.py`; the other distributions ship only their sub-folders, without an `__init__.py`
at the top. A regular install puts every folder in one `site-packages/popxl_addons/`. An
editable install (hatchling adds each `packages/<name>/src` to `sys.path`) leaves the folders
apart, so `__path__` is extended with `pkgutil.extend_path` to every `popxl_addons` folder on
`sys.path` (and `popxl_addons.ops` does the same for the collectives' ops).

With only some distributions installed, `addons.layers`, `import popxl_addons.layers` and the
like raise `MissingDistributionError` (a `ModuleNotFoundError`) naming the distribution to
install. popxl-addons names that this project does not implement yet raise
`NotImplementedYetError` (an `ImportError`); both are in `popxl_addons._compat`.
"""

from __future__ import annotations

import importlib
from pkgutil import extend_path
from types import ModuleType

__path__ = extend_path(__path__, __name__)

from popxl_addons import _compat

_compat.install_finder()

# The sub-modules that importing popxl-addons binds on the package (its own modules import them).
from popxl_addons import (  # noqa: E402
    array_munging,
    debugging,
    dot_tree,
    graph,
    graph_cache,
    graph_common,
    module,
    named_replica_grouping,
    named_tensors,
    ops,
    optimizers,
    patterns,
    performance_utils,
    remote,
    route_tensor,
    rts,
    streams,
    task_session,
    transforms,
    utils,
    variable_factory,
)

# Imported (so that a later `import popxl_addons.seed_variable` keeps the name below) but not
# bound: `seed_variable` is popxl-addons' function, as there.
importlib.import_module(f"{__name__}.seed_variable")

# popxl-addons' top-level names, each from the sub-package that defines it.
from popxl_addons.core.array_munging import (  # noqa: E402
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
    unshard,
    unshard2D,
    unshard_arrays,
)
from popxl_addons.core.autodiff import autodiff, autodiff_with_accumulation  # noqa: E402
from popxl_addons.core.available_memory import (  # noqa: E402
    set_available_memory_proportion_by_ipu,
    set_graph_available_memory_proportion_by_ipu,
)
from popxl_addons.core.batch_serialisation import (  # noqa: E402
    RemoteHandle,
    batch_serial_buffer,
    batch_serialise,
    batch_serialise_fwd_and_grad,
)
from popxl_addons.core.cross_entropy import cross_entropy, cross_entropy_with_grad  # noqa: E402
from popxl_addons.core.debugging import print_tensor, print_text  # noqa: E402
from popxl_addons.core.fc_pass import disable_fc_pass, enable_fc_pass  # noqa: E402
from popxl_addons.core.fp8_scale import fp8_amax_scale  # noqa: E402
from popxl_addons.core.graph import BoundGraph, GraphWithNamedArgs  # noqa: E402
from popxl_addons.core.graph_cache import (  # noqa: E402
    GraphCache,
    argument_hash,
    bound_arguments,
    function,
    get_function_hash,
    tensor_hash,
)
from popxl_addons.core.graph_common import (  # noqa: E402
    CalledGraphsGradInfo,
    CalledGraphsGradInfoLike,
    GradGraphInfoLike,
    GraphLike,
)
from popxl_addons.core.module import Module, NameScopeMeta, create_grad_graph_info  # noqa: E402
from popxl_addons.core.named_tensors import NamedTensors  # noqa: E402
from popxl_addons.core.performance_utils import (  # noqa: E402
    evaluate_FLOPs,
    evaluate_ir_FLOPs,
    format_flops_scientific,
    print_FLOPs,
    total_FLOPs,
)
from popxl_addons.core.pipelining import pipelined_execution  # noqa: E402
from popxl_addons.core.recomputation import add_recompute_inputs, recompute_graph  # noqa: E402
from popxl_addons.core.remote import (  # noqa: E402
    create_remote_buffer,
    load_remote_graph,
    named_buffers,
    named_variable_buffers,
    store_remote_graph,
)
from popxl_addons.core.route_tensor import is_subgraph, route_tensor_into_graph  # noqa: E402
from popxl_addons.core.seed_variable import seed_variable  # noqa: E402
from popxl_addons.core.streams import InputStreams, OutputStreams, host_load, host_store  # noqa: E402
from popxl_addons.core.task_session import TaskSession, write_variables_pb  # noqa: E402
from popxl_addons.core.utils import OrderedDict, WeightsDict, duplicate_items, suffix_graph_name, timer  # noqa: E402
from popxl_addons.core.variable_factory import (  # noqa: E402
    NamedVariableFactories,
    VariableFactory,
    add_replica_sharded_variable_input,
    add_variable_input,
)

# The commit of popxl-addons' own git checkout there; this project is not popxl-addons' repository.
GIT_COMMIT: str | None = None

# Sub-packages of other distributions, imported when first used.
_LAZY_SUBPACKAGES = ("layers", "collectives", "harness")

_NOT_IMPLEMENTED: tuple[str, ...] = ()

_missing = _compat.not_implemented(__name__, _NOT_IMPLEMENTED, owner="popxl_addons.core")


def __getattr__(name: str) -> object:
    """`layers`, `collectives` and `harness` on first use; popxl-addons names not implemented yet."""
    if name in _LAZY_SUBPACKAGES:
        sub: ModuleType = importlib.import_module(f"{__name__}.{name}")
        return sub
    return _missing(name)


__all__ = [
    "print_tensor",
    "print_text",
    "disable_fc_pass",
    "enable_fc_pass",
    "argument_hash",
    "bound_arguments",
    "function",
    "get_function_hash",
    "tensor_hash",
    "CalledGraphsGradInfo",
    "CalledGraphsGradInfoLike",
    "GradGraphInfoLike",
    "GraphLike",
    "NameScopeMeta",
    "create_grad_graph_info",
    "add_recompute_inputs",
    "cross_entropy",
    "cross_entropy_with_grad",
    "fp8_amax_scale",
    "set_available_memory_proportion_by_ipu",
    "set_graph_available_memory_proportion_by_ipu",
    "timer",
    "OrderedDict",
    "WeightsDict",
    "suffix_graph_name",
    "duplicate_items",
    "total_FLOPs",
    "evaluate_ir_FLOPs",
    "evaluate_FLOPs",
    "print_FLOPs",
    "format_flops_scientific",
    "variable_factory",
    "rts",
    "patterns",
    "optimizers",
    "named_tensors",
    "named_replica_grouping",
    "graph_common",
    "graph",
    "dot_tree",
    "BoundGraph",
    "GIT_COMMIT",
    "GraphCache",
    "GraphWithNamedArgs",
    "InputStreams",
    "Module",
    "NamedTensors",
    "NamedVariableFactories",
    "OutputStreams",
    "RemoteHandle",
    "TaskSession",
    "VariableFactory",
    "add_replica_sharded_variable_input",
    "add_variable_input",
    "array_munging",
    "autodiff",
    "autodiff_with_accumulation",
    "batch_serial_buffer",
    "batch_serialise",
    "batch_serialise_fwd_and_grad",
    "create_remote_buffer",
    "debugging",
    "graph_cache",
    "handle_negative_axis",
    "host_load",
    "host_store",
    "is_subgraph",
    "load_remote_graph",
    "module",
    "named_buffers",
    "named_variable_buffers",
    "ops",
    "pad_axis",
    "performance_utils",
    "pipelined_execution",
    "recompute_graph",
    "remote",
    "repeat",
    "repeat_axis",
    "repeat_shard",
    "route_tensor",
    "route_tensor_into_graph",
    "seed_variable",
    "shard",
    "shard2D",
    "split2D",
    "squeeze_safe",
    "store_remote_graph",
    "streams",
    "task_session",
    "tensor_parallel_input",
    "transforms",
    "unshard",
    "unshard2D",
    "unshard_arrays",
    "utils",
    "write_variables_pb",
]
