"""Default output names that user code sees are popxl's.

Each expected string is read off popxl's source (python/popxl/ops/...), where
each op makes its output id with `g._create_tensor_id(<name>)`: the name under
the open name scopes, made unique by the Ir's `__t<c>` counter when taken.
Names derived from an input use the input's `Tensor.name` (its id without the
graph prefix, name scopes included). Every case builds in a fresh Ir, so no
name is taken twice unless the case says so.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import popxl
from popxl import ops

C = ops.collectives


def _ir(replication: int = 2) -> popxl.Ir:
    return popxl.Ir(replication=replication)


def _names(out: Any) -> list[str]:
    return [t.name for t in out] if isinstance(out, tuple | list) else [out.name]


def _var(name: str, shape: tuple[int, ...] = (4, 4), dtype: Any = np.float32) -> popxl.Tensor:
    return popxl.variable(np.ones(shape, dtype), name=name)


# --- collectives (python/popxl/ops/collectives/*.py) -------------------------------------------

COLLECTIVES: list[tuple[str, Callable[[popxl.Tensor], Any], list[str]]] = [
    # replicated_all_reduce.py: `t.name + "_all_reduce"`, for the in-place form too.
    ("replicated_all_reduce", lambda x: C.replicated_all_reduce(x), ["x_all_reduce"]),
    ("replicated_all_reduce_", lambda x: C.replicated_all_reduce_(x), ["x_all_reduce"]),
    ("replicated_all_reduce mean", lambda x: C.replicated_all_reduce(x, "mean"), ["x_all_reduce"]),
    # replicated_reduce_scatter.py: suffix "_reduce_scattered".
    ("replicated_reduce_scatter", lambda x: C.replicated_reduce_scatter(x), ["x_reduce_scattered"]),
    (
        "replicated_reduce_scatter rts",
        lambda x: C.replicated_reduce_scatter(x, configure_output_for_replicated_tensor_sharding=True),
        ["x_reduce_scattered"],
    ),
    # replicated_reduce_scatter.py: replica_sharded_slice, suffix "_sharded_slice".
    ("replica_sharded_slice", lambda x: C.replica_sharded_slice(x), ["x_sharded_slice"]),
    # replicated_all_gather.py: `_rearrange_input` flattens (ops.reshape: `<t>_reshaped`), the gather
    # is `<input>_all_gathered`, `_rearrange_output` reshapes back (`_reshaped`).
    ("replicated_all_gather", lambda x: C.replicated_all_gather(x), ["x_reshaped_all_gathered_reshaped"]),
    (
        "replicated_all_gather new_axis",
        lambda x: C.replicated_all_gather(x, output_shape="new_axis"),
        ["x_reshaped_all_gathered_reshaped"],
    ),
    # ... with axis > 0 the axis is first transposed to the front and back (ops.transpose: `<t>_T`).
    (
        "replicated_all_gather axis=1",
        lambda x: C.replicated_all_gather(x, axis=1),
        ["x_T_reshaped_all_gathered_reshaped_T"],
    ),
    # ... a replica-sharded input (output_shape "auto" -> "meta_shape") is gathered as it is.
    (
        "replicated_all_gather meta_shape",
        lambda x: C.replicated_all_gather(C.replica_sharded_slice(x)),
        ["x_sharded_slice_all_gathered"],
    ),
    # replicated_reduce_scatter.py: replicated_slice, rearranged as the gather, suffix "_replicated_slice".
    ("replicated_slice", lambda x: C.replicated_slice(x), ["x_reshaped_replicated_slice_reshaped"]),
    ("replicated_slice axis=1", lambda x: C.replicated_slice(x, axis=1), ["x_T_reshaped_replicated_slice_reshaped_T"]),
]


@pytest.mark.parametrize(("label", "fn", "expected"), COLLECTIVES, ids=[c[0] for c in COLLECTIVES])
def test_replicated_collectives_are_named_after_their_input(
    label: str, fn: Callable[[popxl.Tensor], Any], expected: list[str]
) -> None:
    ir = _ir()
    with ir.main_graph:
        assert _names(fn(_var("x"))) == expected


@pytest.mark.parametrize(
    "fn", [C.all_reduce, C.all_reduce_identical_inputs, C.all_reduce_identical_grad_inputs], ids=lambda f: f.__name__
)
def test_ipu_all_reduce_outputs_are_numbered(fn: Callable[..., list[popxl.Tensor]]) -> None:
    # all_reduce.py: `f"all_reduce_out_{i}"` for output i.
    ir = _ir(1)
    with ir.main_graph:
        outs = fn([_var("a"), _var("b"), _var("c")], ipus=[0, 1, 2])
    assert [t.name for t in outs] == ["all_reduce_out_0", "all_reduce_out_1", "all_reduce_out_2"]


def test_collective_names_take_the_input_name_with_its_scopes_under_the_open_scopes() -> None:
    # Graph._create_tensor_id joins the open name scopes to the name, and `Tensor.name` keeps the
    # input's scopes: `a/` + `a/y` + suffix.
    ir = _ir()
    with ir.main_graph:
        x = _var("x")
        with popxl.name_scope("a"):
            y = ops.rename(x, "y")
            assert y.name == "a/y"
            assert C.replicated_all_reduce(y).name == "a/a/y_all_reduce"
            assert C.replicated_reduce_scatter(x).name == "a/x_reduce_scattered"


def test_collective_names_in_a_subgraph_and_when_taken() -> None:
    ir = _ir()

    def body(t: popxl.Tensor) -> popxl.Tensor:
        out = C.replicated_reduce_scatter(t)
        # The name is the id without the graph prefix; the id is `<graph id>/<name>`.
        assert out.name == "t_reduce_scattered"
        assert out.id == f"{popxl.gcg().id}/t_reduce_scattered"
        again = C.replicated_reduce_scatter(t)
        # A taken id gets the Ir's `__t<c>` suffix (Ir::createIntermediateTensorId).
        assert re.fullmatch(r"t_reduce_scattered__t\d+", again.name), again.name
        return out

    with ir.main_graph:
        ir.create_graph(body, popxl.TensorSpec((4, 4), popxl.float32))


def test_replica_sharded_variable_gradients_are_named_after_the_gradients() -> None:
    # Each reduce-scattered gradient keeps its gradient's name, so names order as the variables do.
    ir = _ir()
    with ir.main_graph:
        grads = [ops.rename(_var(f"w{i}"), f"Gradient___w{i}") for i in range(12)]
        shards = [C.replicated_reduce_scatter(g, configure_output_for_replicated_tensor_sharding=True) for g in grads]
    assert [s.name for s in shards] == [f"Gradient___w{i}_reduce_scattered" for i in range(12)]


# --- other ops whose names popxl gives specially ---------------------------------------------


def _seed() -> popxl.Tensor:
    return popxl.variable(np.array([1, 2], np.uint32), name="seed")


def _image() -> popxl.Tensor:
    return popxl.constant(np.ones((1, 1, 4, 4), np.float32), name="img")


def _kernel() -> popxl.Tensor:
    return popxl.constant(np.ones((1, 1, 2, 2), np.float32), name="k")


def _index() -> popxl.Tensor:
    return popxl.constant(np.array([0], np.uint32), name="index")


OPS: list[tuple[str, Callable[[popxl.Tensor], Any], list[str]]] = [
    # relu.py, gelu.py, geluerf.py, exp.py, swish.py, increment_mod.py: `<op>_inplace_out`.
    ("relu_", ops.relu_, ["relu_inplace_out"]),
    ("gelu_", ops.gelu_, ["gelu_inplace_out"]),
    ("geluerf_", ops.geluerf_, ["geluerf_inplace_out"]),
    ("exp_", ops.exp_, ["exp_inplace_out"]),
    ("swish_", ops.swish_, ["swish_inplace_out"]),
    ("increment_mod_", lambda x: ops.increment_mod_(x, 1.0, 3.0), ["increment_mod_inplace_out"]),
    ("increment_mod", lambda x: ops.increment_mod(x, 1.0, 3.0), ["increment_mod_out"]),
    ("detach_", ops.detach_, ["detach_out"]),
    # isfinite.py: `rename(out, "isfinite_out")`.
    ("isfinite", ops.isfinite, ["isfinite_out"]),
    ("ceil", ops.ceil, ["ceil_out"]),
    ("clip", ops.clip, ["clip_out"]),
    # gather.py: gather and groupedgather `gather_out`, tied_gather `tiedgather_out`.
    ("gather", lambda x: ops.gather(x, popxl.constant(np.array([0, 1], np.int32))), ["gather_out"]),
    ("tied_gather", lambda x: ops.tied_gather(x, popxl.constant(np.array([0, 1], np.int32))), ["tiedgather_out"]),
    (
        "groupedgather",
        lambda x: ops.groupedgather(x, popxl.constant(np.zeros((4, 2), np.int32)), axis=1, group_size=4),
        ["gather_out"],
    ),
    # dynamic_slice.py, dynamic_update.py.
    ("dynamic_slice", lambda x: ops.dynamic_slice(x, _index(), [0], [2]), ["dynamic_slice_out"]),
    ("dynamic_update", lambda x: ops.dynamic_update(x, _index(), x, [0], [4]), ["dynamic_update_out"]),
    ("dynamic_update_", lambda x: ops.dynamic_update_(x, _index(), x, [0], [4]), ["dynamicupdateinplace_out"]),
    # topk.py.
    ("topk", lambda x: ops.topk(x, 2, 0, True, True), ["topk_out_value", "topk_out_indices"]),
    ("argmax", ops.argmax, ["argmax_out"]),
    # scatter_reduce.py, scatter.py, subsample.py, onehot.py.
    (
        "scatter_reduce",
        lambda x: ops.scatter_reduce(x, popxl.constant(np.zeros((4, 4), np.int32)), "sum", axis_size=4),
        ["scatterreduce_out"],
    ),
    ("scatter", lambda x: ops.scatter(x, popxl.constant(np.zeros((4, 4), np.int32)), x), ["scatter_out"]),
    ("subsample", lambda x: ops.subsample(x, [2, 2]), ["subsample_out"]),
    # shaped_dropout.py, dropout.py, random.py.
    ("shaped_dropout", lambda x: ops.shaped_dropout(x, _seed(), (4, 1), 0.5), ["shapeddropout_out"]),
    ("dropout", lambda x: ops.dropout(x, _seed(), 0.5), ["dropout_out"]),
    ("random_uniform", lambda x: ops.random_uniform(_seed(), (2,)), ["random_uniform_out"]),
    ("random_normal", lambda x: ops.random_normal(_seed(), (2,)), ["random_normal_out"]),
    # random_seed.py: split_random_seed makes each seed with create_random_seed (`modified_seed`),
    # each after a modifier constant (`t`, then `t__t0`): the second seed is `modified_seed__t1`.
    ("split_random_seed", lambda x: ops.split_random_seed(_seed()), ["modified_seed", "modified_seed__t1"]),
    # print_tensor.py.
    ("print_tensor", ops.print_tensor, ["print_out"]),
    # ipu_copy.py: `t.name + f"_c{destination}"`; io_tile_copy.py: `t.name + "_iotilecopy"`.
    ("ipu_copy", lambda x: ops.ipu_copy(x, 1), ["x_c1"]),
    ("io_tile_copy", ops.io_tile_copy, ["x_iotilecopy"]),
    # identity.py: rename is identity with the given name.
    ("rename", lambda x: ops.rename(x, "renamed"), ["renamed"]),
    # init.py: `_create_tensor_id(name)`, whose default name is "t".
    ("init", lambda x: ops.init((2,), popxl.float32), ["t"]),
    ("init named", lambda x: ops.init((2,), popxl.float32, "foo"), ["foo"]),
    # conv.py, pool.py.
    ("conv", lambda x: ops.conv(_image(), _kernel()), ["conv_out"]),
    ("conv_transpose", lambda x: ops.conv_transpose(_image(), _kernel()), ["convtranspose_out"]),
    ("average_pool", lambda x: ops.average_pool(_image(), (2, 2)), ["averagepool_out"]),
    ("max_pool", lambda x: ops.max_pool(_image(), (2, 2)), ["maxpool_out"]),
    # interpolate.py, roialign.py.
    ("interpolate", lambda x: ops.interpolate(_image(), scale_factor=(1, 1, 2, 2)), ["interpolate_out"]),
    (
        "roi_align",
        lambda x: ops.roi_align(
            _image(),
            popxl.constant(np.array([[0, 0, 2, 2]], np.float32)),
            popxl.constant(np.array([0], np.int32)),
            (2, 2),
            1.0,
            1,
        ),
        ["roi_align_out"],
    ),
    # negative_log_likelihood.py: nll_loss `loss`; nll_loss_with_softmax_grad `loss` and `dx`.
    ("nll_loss", lambda x: ops.nll_loss(x, popxl.constant(np.zeros(4, np.int32))), ["loss"]),
    (
        "nll_loss_with_softmax_grad",
        lambda x: ops.nll_loss_with_softmax_grad(x, popxl.constant(np.zeros(4, np.int32))),
        ["loss", "dx"],
    ),
]


@pytest.mark.parametrize(("label", "fn", "expected"), OPS, ids=[c[0] for c in OPS])
def test_op_output_names_are_popxls(label: str, fn: Callable[[popxl.Tensor], Any], expected: list[str]) -> None:
    ir = _ir(1)
    with ir.main_graph:
        assert _names(fn(_var("x"))) == expected


def test_float8_op_names() -> None:
    ir = _ir(1)
    with ir.main_graph:
        x = _var("x")
        scale = popxl.constant(np.int32(0), name="scale")
        # cast.py: pow2scale casts are `f"{t.name}_{data_type._name}"`.
        x8 = ops.pow2scale_cast_to_fp8(x, scale, popxl.float8_143)
        assert x8.name == "x_float8_143"
        assert ops.pow2scale_cast_from_fp8(x8, scale, popxl.float16).name == "x_float8_143_float16"
        # matmul.py: matmul_pow2scaled `matmul_pow2scaled_out`.
        assert ops.matmul_pow2scaled(x8, x8, scale).name == "matmul_pow2scaled_out"
        # conv.py: conv_pow2scaled `conv_out`, conv_transpose_pow2scaled `convtranspose_out`.
        img = ops.pow2scale_cast_to_fp8(_image(), scale, popxl.float8_143)
        k = ops.pow2scale_cast_to_fp8(_kernel(), scale, popxl.float8_143)
        assert ops.conv_pow2scaled(img, k, scale).name == "conv_out"
        assert ops.conv_transpose_pow2scaled(img, k, scale).name == "convtranspose_out"


def test_host_load_names() -> None:
    # host_load.py: `name + "_hostload"`, `name` defaulting to the stream's id; an init tensor
    # `name + "_init"` is made first, so a second load of the stream is `<name>_hostload__t1`.
    ir = _ir(1)
    with ir.main_graph:
        h = popxl.h2d_stream((2,), popxl.float32, name="data")
        assert ops.host_load(h).name == "data_hostload"
        assert ops.host_load(h).name == "data_hostload__t1"
        assert ops.host_load(h, "given").name == "given_hostload"


def test_remote_load_names() -> None:
    # remote_load.py: `name + "_remote_loaded"`, `name` defaulting to
    # `f"id_{remote_buffer_id}_offset_{offset.name}"` (an int offset is a constant named "offset");
    # remote_load_ is `remote_load_inplace_out`.
    ir = _ir(1)
    with ir.main_graph:
        buf = popxl.remote_buffer((4,), popxl.float32, 2)
        assert ops.remote_load(buf, 0).name == f"id_{buf.remote_buffer_id}_offset_offset_remote_loaded"
        off = popxl.constant(np.int32(1), name="slot")
        assert ops.remote_load(buf, off).name == f"id_{buf.remote_buffer_id}_offset_slot_remote_loaded"
        assert ops.remote_load(buf, 0, "w").name == "w_remote_loaded"
        assert ops.remote_load_(buf, 0, _var("v", (4,))).name == "remote_load_inplace_out"


def test_call_conditional_and_repeat_output_names() -> None:
    ir = _ir(1)
    with ir.main_graph:
        spec = popxl.TensorSpec((4,), popxl.float32)
        g = ir.create_graph(lambda t: ops.rename(t, "y"), spec)
        x = _var("x", (4,))
        with popxl.name_scope("s"):
            # call.py: each output is `_create_tensor_id(<graph output name>)`, under the open scopes.
            assert [t.name for t in ops.call(g, x)] == ["s/y"]
            # conditional.py: `f"{then_name}_or_{else_name}"`.
            other = ir.create_graph(lambda t: ops.rename(t, "z"), spec)
            flag = popxl.constant(np.bool_(True), name="flag")
            assert [t.name for t in ops.conditional(flag, g, other, [x], [x])] == ["s/y_or_z"]
            # repeat.py (_setup_outputs): `createIntermediateTensorId` on the graph output's name,
            # without the open scopes, always suffixed.
            (out,) = ops.repeat(g, 2, x)
            assert re.fullmatch(r"y__t\d+", out.name), out.name


def test_variable_update_names() -> None:
    # var_updates/accumulate.py: `<prefix>__<t.name>`; copy_var_update.py: `updated__<t.name>`;
    # scaled_add.py (in place): `scaled_add__<X.name>`.
    ir = popxl.Ir()
    with ir.main_graph, popxl.name_scope("layer"):
        w = popxl.variable(np.zeros((2, 2), np.float32), name="w")
        x = popxl.constant(np.ones((2, 2), np.float32))
        got = [
            ops.var_updates.accumulate_(w, x).name,
            ops.var_updates.accumulate_square_(w, x).name,
            ops.var_updates.accumulate_mean_(w, x, 1.0).name,
            ops.var_updates.accumulate_moving_average_(w, x, 0.9).name,
            ops.var_updates.accumulate_moving_average_square_(w, x, 0.9).name,
            ops.var_updates.accumulator_scale_(w, 0.5).name,
            ops.var_updates.copy_var_update_(w, x).name,
            ops.var_updates.sparse_accumulate_(w, x, popxl.constant(np.array([0, 1], np.int32))).name,
            ops.scaled_add_(w, x).name,
        ]
    assert got[:6] == [
        "layer/accumulate__layer/w",
        "layer/accumulate_square__layer/w",
        "layer/accumulate_mean__layer/w",
        "layer/accumulate_moving_avg__layer/w",
        "layer/accumulate_moving_avg_square__layer/w",
        "layer/accumulator_scale__layer/w",
    ]
    assert got[6:] == ["layer/updated__layer/w", "layer/sparse_accumulate__layer/w", "layer/scaled_add__layer/w"]


# --- maths, shape and reduction ops (python/popxl/ops/<op>.py) -------------------------------


def _other() -> popxl.Tensor:
    return _var("y")


def _flags(name: str = "b") -> popxl.Tensor:
    return popxl.variable(np.ones((4, 4), np.bool_), name=name)


def _condition_of(out: popxl.Tensor) -> popxl.Tensor:
    assert out.producer is not None
    return out.producer.inputs[0]


def _per_channel(name: str) -> popxl.Tensor:
    return popxl.constant(np.ones((4,), np.float32), name=name)


MATHS: list[tuple[str, Callable[[popxl.Tensor], Any], list[str]]] = [
    # add.py: `add_out`; add_ `add_lhs_inplace_out`.
    ("add", lambda x: ops.add(x, _other()), ["add_out"]),
    ("add_", lambda x: ops.add_(x, _other()), ["add_lhs_inplace_out"]),
    # sub.py, mul.py, div.py, fmod.py, pow.py, equal.py, greater.py, max.py (maximum): `<op>_out`.
    ("sub", lambda x: ops.sub(x, _other()), ["sub_out"]),
    ("mul", lambda x: ops.mul(x, _other()), ["mul_out"]),
    ("div", lambda x: ops.div(x, _other()), ["div_out"]),
    ("fmod", lambda x: ops.fmod(x, _other()), ["fmod_out"]),
    ("pow", lambda x: ops.pow(x, _other()), ["pow_out"]),
    ("equal", lambda x: ops.equal(x, _other()), ["equal_out"]),
    ("greater", lambda x: ops.greater(x, _other()), ["greater_out"]),
    ("maximum", lambda x: ops.maximum(x, _other()), ["maximum_out"]),
    # logical_and.py `and_out`, logical_or.py `or_out`, logical_not.py `not_out`.
    ("logical_and", lambda x: ops.logical_and(_flags(), _flags("c")), ["and_out"]),
    ("logical_or", lambda x: ops.logical_or(_flags(), _flags("c")), ["or_out"]),
    ("logical_not", lambda x: ops.logical_not(_flags()), ["not_out"]),
    # negate.py, exp.py, log.py, sqrt.py, tanh.py, relu.py, gelu.py, abs.py, sin.py, cos.py: `<op>_out`.
    ("negate", ops.negate, ["negate_out"]),
    ("exp", ops.exp, ["exp_out"]),
    ("log", ops.log, ["log_out"]),
    ("sqrt", ops.sqrt, ["sqrt_out"]),
    ("tanh", ops.tanh, ["tanh_out"]),
    ("relu", ops.relu, ["relu_out"]),
    ("gelu", ops.gelu, ["gelu_out"]),
    ("abs", ops.abs, ["abs_out"]),
    ("sin", ops.sin, ["sin_out"]),
    ("cos", ops.cos, ["cos_out"]),
    # detach.py: `detach_out`.
    ("detach", ops.detach, ["detach_out"]),
    # identity.py: `output_name`, or `f"identity_{t.name}"` when none (or an empty one) is given.
    ("identity", ops.identity, ["identity_x"]),
    ("identity empty name", lambda x: ops.identity(x, ""), ["identity_x"]),
    ("identity named", lambda x: ops.identity(x, "y"), ["y"]),
    # cast.py: `f"{t.name}_{data_type._name}"`.
    ("cast", lambda x: ops.cast(x, popxl.float16), ["x_float16"]),
    ("cast int32", lambda x: ops.cast(x, popxl.int32), ["x_int32"]),
    # where.py: `where_out`; a non-bool condition is first cast (cast_if_needed -> cast.py: `<t>_bool`).
    ("where", lambda x: ops.where(_flags(), x, _other()), ["where_out"]),
    (
        "where cast condition",
        lambda x: _condition_of(ops.where(ops.cast(x, popxl.int32), x, _other())),
        ["x_int32_bool"],
    ),
    # matmul.py: `matmul_out`; softmax.py: `softmax_out`.
    ("matmul", lambda x: ops.matmul(x, _other()), ["matmul_out"]),
    ("softmax", lambda x: ops.softmax(x, 1), ["softmax_out"]),
    # group_norm.py: `group_norm_out` (layer_norm is group_norm with one group).
    ("group_norm", lambda x: ops.group_norm(x, _per_channel("w"), _per_channel("b"), 2), ["group_norm_out"]),
    ("layer_norm", lambda x: ops.layer_norm(x, _per_channel("w"), _per_channel("b")), ["group_norm_out"]),
    # reshape.py: reshape and reshape_ `f"{t.name}_reshaped"`; flatten(_) reshape(_) and squeeze.py reshapes.
    ("reshape", lambda x: ops.reshape(x, (16,)), ["x_reshaped"]),
    ("reshape_", lambda x: ops.reshape_(x, (16,)), ["x_reshaped"]),
    ("flatten", ops.flatten, ["x_reshaped"]),
    ("flatten_", ops.flatten_, ["x_reshaped"]),
    ("squeeze", lambda x: ops.squeeze(ops.reshape(x, (1, 16))), ["x_reshaped_reshaped"]),
    # transpose.py: transpose and transpose_ `f"{t.name}_T"`.
    ("transpose", ops.transpose, ["x_T"]),
    ("transpose_", ops.transpose_, ["x_T"]),
    # slice.py: slice and slice_ `slice_out`; concat.py: concat and concat_ `concat_out`.
    ("slice", lambda x: ops.slice(x, 0, 2), ["slice_out"]),
    ("slice_", lambda x: ops.slice_(x, 0, 2), ["slice_out"]),
    ("concat", lambda x: ops.concat([x, _other()]), ["concat_out"]),
    ("concat_", lambda x: ops.concat_([x, _other()]), ["concat_out"]),
    # split.py: output i is `f"{t.name}_split_{i}"`.
    ("split", lambda x: ops.split(x, 2), ["x_split_0", "x_split_1"]),
    ("split lengths axis=1", lambda x: ops.split(x, [1, 1, 2], axis=1), ["x_split_0", "x_split_1", "x_split_2"]),
    # sum.py, mean.py, max.py, min.py, sumsquare.py, logsumexp.py: `<op>_out`.
    ("sum", ops.sum, ["sum_out"]),
    ("mean", lambda x: ops.mean(x, 0), ["mean_out"]),
    ("max", ops.max, ["max_out"]),
    ("min", lambda x: ops.min(x, 1, keepdims=True), ["min_out"]),
    ("sumsquare", ops.sumsquare, ["sumsquare_out"]),
    ("logsumexp", lambda x: ops.logsumexp(x, 1), ["logsumexp_out"]),
    ("logsumexp keepdims", lambda x: ops.logsumexp(x, 1, keepdims=True), ["logsumexp_out"]),
    # scaled_add.py: `scaled_add_out` (the in-place form is in test_variable_update_names).
    ("scaled_add", lambda x: ops.scaled_add(x, _other(), 0.5, 2.0), ["scaled_add_out"]),
    # prod.py, median.py, l1.py, l2.py, logsum.py, cumsum.py: `<op>_out`.
    ("prod", ops.prod, ["prod_out"]),
    ("median", ops.median, ["median_out"]),
    ("l1", ops.l1, ["l1_out"]),
    ("l2", ops.l2, ["l2_out"]),
    ("logsum", ops.logsum, ["logsum_out"]),
    ("cumsum", ops.cumsum, ["cumsum_out"]),
    # lamb.py: `lamb_square_out`; histogram.py: `histogram_out`.
    ("lamb_square", ops.lamb_square, ["lamb_square_out"]),
    ("histogram", lambda x: ops.histogram(x, [0.5], True), ["histogram_out"]),
    # batch_norm.py: batch_norm_inference `batch_norm_out`.
    (
        "batch_norm_inference",
        lambda x: ops.batch_norm_inference(
            x, _per_channel("s"), _per_channel("b"), _per_channel("m"), _per_channel("v")
        ),
        ["batch_norm_out"],
    ),
    # tensor.py (Tensor.__getitem__): `ops.slice` (`slice_out`), `ops.subsample` (subsample.py:
    # `subsample_out`) for steps other than +-1, then `ops.squeeze` for integer keys (`<...>_reshaped`).
    ("getitem slice", lambda x: x[1:3], ["slice_out"]),
    ("getitem int", lambda x: x[1], ["slice_out_reshaped"]),
    ("getitem step", lambda x: x[::2], ["subsample_out"]),
    ("getitem int and step", lambda x: x[1, ::-2], ["subsample_out_reshaped"]),
]


@pytest.mark.parametrize(("label", "fn", "expected"), MATHS, ids=[c[0] for c in MATHS])
def test_maths_and_shape_op_names_are_popxls(
    label: str, fn: Callable[[popxl.Tensor], Any], expected: list[str]
) -> None:
    ir = _ir(1)
    with ir.main_graph:
        assert _names(fn(_var("x"))) == expected


def test_names_made_from_the_input_keep_its_scopes_under_the_open_scopes() -> None:
    # reshape.py, transpose.py, cast.py, split.py, identity.py: `_create_tensor_id(f"{t.name}...")`,
    # under the open name scopes; fixed names (sum.py: `sum_out`) take the open scopes only.
    ir = _ir(1)
    with ir.main_graph:
        x = _var("x")
        with popxl.name_scope("a"):
            y = ops.rename(x, "y")
            assert ops.reshape(y, (16,)).name == "a/a/y_reshaped"
            assert ops.transpose(x).name == "a/x_T"
            assert ops.cast(y, popxl.float16).name == "a/a/y_float16"
            assert [t.name for t in ops.split(y, 2)] == ["a/a/y_split_0", "a/a/y_split_1"]
            assert ops.identity(y).name == "a/identity_a/y"
            assert ops.sum(y).name == "a/sum_out"


def test_composite_ops_leave_popxls_names_free() -> None:
    # sumsquare.py, logsumexp.py and scaled_add.py are one op each in popxl, so the ops these are made
    # of here must not take a name a later op would get: each later op keeps its plain popxl name.
    ir = _ir(1)
    with ir.main_graph:
        x, y = _var("x"), _var("y")
        ops.sumsquare(x)
        ops.logsumexp(x, 0)
        ops.scaled_add(x, y, 0.5, 2.0)
        later = [
            ops.mul(x, y),
            ops.add(x, y),
            ops.sub(x, y),
            ops.sum(x),
            ops.max(x),
            ops.exp(x),
            ops.log(x),
            ops.detach(x),
            ops.reshape(x, (16,)),
        ]
    assert [t.name for t in later] == [
        "mul_out",
        "add_out",
        "sub_out",
        "sum_out",
        "max_out",
        "exp_out",
        "log_out",
        "detach_out",
        "x_reshaped",
    ]
