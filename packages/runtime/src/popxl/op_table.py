"""The supported-ops table of `docs/ops.md`: popxl's public ops against this runtime, and every op kind.

`python -m popxl.op_table > docs/ops.md` writes it; a test checks that the
committed file is current, so an op kind registered without being listed fails.
"""

from __future__ import annotations

import popxl
from popxl.op import REGISTRY, OpDef

# popxl's public names, as its `popxl.ops`, `popxl.ops.collectives` and `popxl.ops.var_updates` export them.
POPXL_OPS: dict[str, list[str]] = {
    "ops": [
        "abs",
        "add",
        "add_",
        "argmax",
        "argmin",
        "average_pool",
        "max_pool",
        "batch_norm_inference",
        "call",
        "call_with_info",
        "CallSiteInfo",
        "cast",
        "pow2scale_cast_to_fp8",
        "pow2scale_cast_from_fp8",
        "concat",
        "concat_",
        "swish",
        "swish_",
        "greater",
        "conv",
        "conv_pow2scaled",
        "conv_transpose",
        "conv_transpose_pow2scaled",
        "PadType",
        "cos",
        "cumsum",
        "roi_align",
        "interpolate",
        "conditional",
        "conditional_with_info",
        "detach",
        "detach_",
        "div",
        "dropout",
        "dynamic_slice",
        "dynamic_update",
        "dynamic_update_",
        "equal",
        "exp",
        "exp_",
        "log",
        "onehot",
        "topk",
        "fmod",
        "gather",
        "groupedgather",
        "tied_gather",
        "gelu",
        "gelu_",
        "geluerf",
        "geluerf_",
        "group_norm",
        "layer_norm",
        "host_load",
        "host_store",
        "increment_mod",
        "increment_mod_",
        "init",
        "io_tile_copy",
        "ipu_copy",
        "l1",
        "l2",
        "lamb_square",
        "logical_and",
        "logical_not",
        "logical_or",
        "logsum",
        "logsumexp",
        "matmul",
        "matmul_pow2scaled",
        "max",
        "maximum",
        "mean",
        "median",
        "min",
        "mul",
        "nll_loss",
        "nll_loss_with_softmax_grad",
        "negate",
        "pow",
        "print_tensor",
        "prod",
        "split_random_seed",
        "random_uniform",
        "random_normal",
        "relu",
        "relu_",
        "reshape",
        "reshape_",
        "flatten",
        "flatten_",
        "remote_load",
        "remote_load_",
        "remote_store",
        "repeat",
        "repeat_with_info",
        "scaled_add",
        "scaled_add_",
        "scatter",
        "scatter_reduce",
        "shaped_dropout",
        "sin",
        "slice",
        "slice_",
        "softmax",
        "split",
        "sqrt",
        "squeeze",
        "sub",
        "subsample",
        "sum",
        "sumsquare",
        "tanh",
        "transpose",
        "transpose_",
        "where",
        "histogram",
        "collectives",
        "var_updates",
        "identity",
        "rename",
        "isnan",
        "isinf",
        "isfinite",
        "ceil",
        "clip",
        "clamp",
        "sign",
    ],
    "ops.collectives": [
        "all_reduce",
        "all_reduce_identical_inputs",
        "all_reduce_identical_grad_inputs",
        "CommGroup",
        "CommGroupType",
        "replicated_all_gather",
        "replicated_all_reduce",
        "replicated_all_reduce_",
        "replicated_reduce_scatter",
        "replica_sharded_slice",
        "replicated_slice",
    ],
    "ops.var_updates": [
        "accumulate_",
        "accumulate_square_",
        "accumulate_mean_",
        "accumulate_moving_average_",
        "accumulate_moving_average_square_",
        "sparse_accumulate_",
        "accumulator_scale_",
        "accumulator_zero_",
        "adam_updater",
        "lamb_updater",
        "adamax_updater",
        "adam_var_update",
        "copy_var_update_",
    ],
}

# Where an op kind computes or differentiates differently from popxl, or where popxl has no such op.
DEPARTURES: dict[str, str] = {
    "replicated_all_reduce": "gradient: the exact one for add/mean/local (popxl has none)",
    "replicated_reduce_scatter": "gradient: popxl's all-gather for 'local'; the same, exact, for 'add' (popxl: none)",
    "replicated_all_gather": "gradient: popxl's rule, each replica's own part (not the sum over replicas)",
    "print_tensor": "printed with NumPy's formatting",
    "random_uniform": "JAX's threefry generator: deterministic per seed, not bit-equal to the IPU",
    "random_normal": "JAX's threefry generator: deterministic per seed, not bit-equal to the IPU",
    "dropout": "JAX's threefry generator: deterministic per seed, not bit-equal to the IPU",
    "shaped_dropout": "JAX's threefry generator: deterministic per seed, not bit-equal to the IPU",
    "roi_align": "no gradient for the regions (as popart); sampling_ratio must be positive (a static grid)",
    "interpolate": "'tf_crop_and_resize' uses the whole input as its region (popxl passes none)",
    "all_reduce": "within a replica all IPUs are one device: each output is the reduction of the inputs",
    "split_random_seed": "JAX's threefry split",
    "io_tile_copy": "a copy: there are no IO tiles",
    "vjp": "the gradient of a forward op kind through JAX's VJP of its lowering (no popxl op)",
    "floor": "not exported by popxl.ops",
    "sigmoid": "not exported by popxl.ops",
    "square": "not exported by popxl.ops",
    "reciprocal": "not exported by popxl.ops",
    "minimum": "not exported by popxl.ops",
    "less": "not exported by popxl.ops",
    "expand": "not exported by popxl.ops",
}


# In-place op kinds whose updated inputs depend on their attrs.
IN_PLACE_BY_ATTRS: dict[str, str] = {
    "call": "the called graph's by-reference inputs, and those marked by `set_parent_input_modified`",
    "repeat": "the called graph's by-reference inputs",
    "adam_updater": "its step counter, when given",
}


def _in_place(opdef: OpDef) -> str:
    if opdef.view_update is not None:
        return "a view: shares its inputs' storage"
    if opdef.name in IN_PLACE_BY_ATTRS:
        return "updates " + IN_PLACE_BY_ATTRS[opdef.name]
    updated = opdef.modifies({})
    return ", ".join(f"updates input {i}" for i in sorted(updated))


def _namespace(path: str) -> object:
    module: object = popxl
    for part in path.split("."):
        module = getattr(module, part)
    return module


def runtime_op_kinds() -> list[str]:
    """The op kinds this runtime registers (extensions registered by other packages aside), sorted."""
    return sorted(name for name, opdef in REGISTRY.items() if opdef.lower.__module__.startswith("popxl."))


def _gradient(opdef: OpDef) -> str:
    return "yes" if opdef.grad is not None else "no"


def markdown() -> str:
    """The table as Markdown."""
    lines = [
        "# Supported ops",
        "",
        "Generated by `python -m popxl.op_table` from the op registry; do not edit by hand.",
        "",
        "## popxl's public ops",
        "",
        "| namespace | name | here |",
        "| --- | --- | --- |",
    ]
    for path, names in POPXL_OPS.items():
        namespace = _namespace(path)
        for name in sorted(names, key=str.lower):
            lines.append(f"| `{path}` | `{name}` | {'yes' if hasattr(namespace, name) else 'missing'} |")
    lines += [
        "",
        "## Op kinds in the registry",
        "",
        "Gradient: whether autodiff can differentiate it (through its own rule or JAX's VJP of its lowering).",
        "In place: the inputs it updates in place (its output, if it has one, aliases the updated value) or",
        "whether it is a view, from its registry declaration.",
        "",
        "| op kind | gradient | in place | departure from popxl |",
        "| --- | --- | --- | --- |",
    ]
    for name in runtime_op_kinds():
        opdef = REGISTRY[name]
        lines.append(f"| `{name}` | {_gradient(opdef)} | {_in_place(opdef)} | {DEPARTURES.get(name, '')} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    print(markdown(), end="")
