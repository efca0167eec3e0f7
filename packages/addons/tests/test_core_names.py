"""popxl-addons' smaller names: graph cache hashes and `function`, graph-likes, hand-written gradient infos,
name scopes, printing, DotTree mappings, pattern levels, recompute inputs and the fully-connected pass."""

from __future__ import annotations

from functools import partial
from typing import Any

import numpy as np
import pytest

import popxl
from popxl import ops
from popxl.transforms import ExpectedConnection, ExpectedConnectionType, GradGraphInfo
from popxl_addons.core import (
    BoundGraph,
    DotTree,
    GradGraphInfoLike,
    GraphLike,
    GraphWithNamedArgs,
    Module,
    NamedTensors,
    NameScopeMeta,
    VariableFactory,
    add_recompute_inputs,
    apply_pre_alias_patterns,
    argument_hash,
    autodiff,
    bound_arguments,
    create_grad_graph_info,
    disable_fc_pass,
    enable_fc_pass,
    function,
    get_function_hash,
    host_scalar_tensor_types,
    patterns_level,
    print_named_tensors,
    print_tensor,
    print_text,
    tensor_hash,
    to_mapping,
    uses_fc_pass,
)
from popxl_addons.core.modules.graph_common import normalise_called_graphs_grad_info

RNG = np.random.default_rng(11)


def _run(ir: popxl.Ir, outputs: dict[str, popxl.Tensor]) -> dict[str, np.ndarray[Any, Any]]:
    with ir.main_graph:
        streams = {k: popxl.d2h_stream(t.shape, t.dtype, k) for k, t in outputs.items()}
        for k, t in outputs.items():
            ops.host_store(streams[k], t)
    with popxl.Session(ir, "cpu") as session:
        out = session.run()
    return {k: np.asarray(out[s]) for k, s in streams.items()}


class Scaled(Module):
    def build(self, x: popxl.Tensor, scale: float = 2.0) -> popxl.Tensor:
        return x * scale


def test_bound_arguments_include_self_and_defaults() -> None:
    def f(a: int, b: int = 3, *rest: int) -> None: ...

    assert bound_arguments(f, 1) == {"a": 1, "b": 3, "rest": ()}
    module = Scaled()
    assert bound_arguments(module, "x") == {"self": module, "x": "x", "scale": 2.0}
    assert bound_arguments(module.build, "x", 4.0) == {"self": module, "x": "x", "scale": 4.0}

    class Callable:
        def __call__(self, y: int, z: int = 0) -> None: ...

    c = Callable()
    assert bound_arguments(c, 5) == {"self": c, "y": 5, "z": 0}
    with pytest.raises(TypeError):
        bound_arguments(f)


def test_hashes_follow_specs_graphs_and_placement() -> None:
    ir = popxl.Ir()
    with ir.main_graph:
        a = popxl.variable(np.zeros((2, 3), np.float32))
        b = popxl.variable(np.ones((2, 3), np.float32))
        c = popxl.variable(np.ones((3, 2), np.float32))
        h = popxl.variable(np.ones((2, 3), np.float16))
        assert tensor_hash(a) == tensor_hash(b) == tensor_hash(a.spec)
        assert len({tensor_hash(a), tensor_hash(c), tensor_hash(h)}) == 3
        assert argument_hash([a, {"k": c}]) == argument_hash([b, {"k": c}]) != argument_hash([b, {"k": a}])
        g1, g2 = ir.create_empty_graph("g1"), ir.create_empty_graph("g2")
        with g1:
            i = popxl.graph_input((2, 3), popxl.float32, "i")
        assert argument_hash(GraphWithNamedArgs(g1)) == argument_hash(g1) != argument_hash(g2)
        assert argument_hash(BoundGraph(g1, {i: a})) == argument_hash(BoundGraph(g1, {i: b}))
        assert argument_hash(BoundGraph(g1, {i: a})) != argument_hash(BoundGraph(g1, {i: h}))
        module = Scaled()
        assert get_function_hash(module, a) == get_function_hash(module, b)
        assert get_function_hash(module, a) != get_function_hash(module, a, 3.0)
        on_ipu0 = get_function_hash(module, a)
        with popxl.ipu(1):
            assert get_function_hash(module, a) != on_ipu0
        assert get_function_hash(module, a) != get_function_hash(Scaled(), a)  # instances hash by identity


def test_function_outlines_once_per_spec_and_computes_the_function() -> None:
    x = RNG.normal(size=(2, 3)).astype(np.float32)
    w = RNG.normal(size=(3, 4)).astype(np.float32)

    @function
    def affine(x: popxl.Tensor, w: popxl.Tensor, shift: float) -> popxl.Tensor:
        return x @ w + shift

    ir = popxl.Ir()
    with ir.main_graph:
        xt, wt = popxl.variable(x), popxl.variable(w)
        (first,) = affine(xt, wt, 1.0)
        (again,) = affine(xt, wt, shift=1.0)
        (other,) = affine(xt, wt, -2.0)
        subgraphs = [g for g in ir.graphs if g is not ir.main_graph]
    assert len(subgraphs) == 2  # one per value of `shift`; the tensors' specs are the same
    assert affine.__name__ == "affine"
    out = _run(ir, {"first": first, "again": again, "other": other})
    np.testing.assert_allclose(out["first"], x @ w + 1.0, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(out["again"], x @ w + 1.0, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(out["other"], x @ w - 2.0, rtol=1e-5, atol=1e-6)


class Linear(Module):
    def build(self, x: popxl.Tensor) -> popxl.Tensor:
        w = self.add_variable_input("w", partial(np.ones, (x.shape[-1], 2)), popxl.float32)
        return x @ w


def test_called_graphs_grad_info_takes_graph_likes() -> None:
    ir = popxl.Ir()
    with ir.main_graph:
        x = popxl.variable(np.ones((1, 3), np.float32))
        _, inner = Linear().create_graph(x)
        inner_grad = autodiff(inner)
        likes: dict[GraphLike, GradGraphInfoLike] = {inner: inner_grad, BoundGraph(inner.graph): inner_grad}
        normal = normalise_called_graphs_grad_info(likes)
        assert normal == {inner.graph: inner_grad.grad_graph_info}
        assert normalise_called_graphs_grad_info({inner.graph: inner_grad.grad_graph_info}) == normal
        with pytest.raises(TypeError, match="called_graphs_grad_info maps graphs"):
            normalise_called_graphs_grad_info({inner.graph: "not a grad graph"})  # type: ignore[arg-type]


class Doubling(Module):
    def build(self, x: popxl.Tensor) -> popxl.Tensor:
        return x * 2.0


def test_create_grad_graph_info_connects_as_given() -> None:
    ir = popxl.Ir()
    with ir.main_graph:
        x = popxl.variable(np.ones((2,), np.float32))
        _, fwd = Doubling().create_graph(x)
    (fx,) = fwd.graph.inputs
    (fy,) = fwd.graph.outputs
    grad = ir.create_empty_graph("hand_grad")
    with grad:
        dy = popxl.graph_input((2,), popxl.float32, "dy")
        kept = popxl.graph_input((2,), popxl.float32, "kept")
        popxl.graph_output(dy * 2.0 + kept * 0.0)
    info = create_grad_graph_info(ir, fwd.graph, grad, {dy: fy, kept: fx}, {grad.outputs[0]: fx}, {fx})
    assert [(ec.fwd_tensor, ec.connection_type) for ec in info.expected_inputs] == [
        (fy, ExpectedConnectionType.FwdGrad),
        (fx, ExpectedConnectionType.Fwd),
    ]
    assert [(ec.fwd_tensor, ec.connection_type) for ec in info.expected_outputs] == [
        (fx, ExpectedConnectionType.FwdGrad)
    ]
    assert info.graph is grad and info.forward_graph is fwd.graph
    with pytest.raises(ValueError, match="first inputs"):
        create_grad_graph_info(ir, fwd.graph, grad, {kept: fx, dy: fy}, {}, {fx})
    with pytest.raises(ValueError, match="not of the given Ir"):
        create_grad_graph_info(popxl.Ir(), fwd.graph, grad, {dy: fy}, {}, set())
    with pytest.raises(ValueError, match="not a tensor of the forward graph"):
        GradGraphInfo.create(grad, fwd.graph, [ExpectedConnection.create(dy, ExpectedConnectionType.Fwd)], [])
    with pytest.raises(TypeError, match="connection_type"):
        ExpectedConnection.create(fx, "Fwd")  # type: ignore[arg-type]


def test_name_scope_meta_scopes_build() -> None:
    class Scoped(metaclass=NameScopeMeta):
        def __init__(self, scope: str | None) -> None:
            self._name_scope = scope

        def build(self, x: popxl.Tensor) -> popxl.Tensor:
            return ops.rename(x + 1.0, "out")

    assert isinstance(Module, NameScopeMeta)
    ir = popxl.Ir()
    with ir.main_graph:
        x = popxl.variable(np.ones((2,), np.float32))
        assert Scoped("layer0").build(x).name == "layer0/out"
        assert Scoped(None).build(x).name == "out"


def test_prints_show_values_when_the_level_is_on(monkeypatch: pytest.MonkeyPatch, capfd: Any) -> None:
    x = np.arange(3, dtype=np.float32) + 0.5
    ir = popxl.Ir()
    with ir.main_graph, popxl.in_sequence(True):
        xt = popxl.variable(x, name="x")
        assert print_tensor(xt, "hidden") is xt  # DEBUG prints are off under the default level INFO
        print_text("quiet")
        monkeypatch.setenv("MODEL_LOG_LEVEL", "DEBUG")
        shown = print_tensor(xt * 2.0, "doubled")
        assert shown is not xt
        print_text("loud text", level="INFO")
        printed = print_named_tensors(NamedTensors.from_dict({"a.b": xt}))
        assert printed.keys_flat() == ["a.b"]
        monkeypatch.setenv("MODEL_LOG_LEVEL", "NOISY")
        with pytest.raises(ValueError, match="MODEL_LOG_LEVEL"):
            print_text("bad")
    out = _run(ir, {"shown": shown, "printed": printed.a.b})
    np.testing.assert_array_equal(out["shown"], x * 2.0)
    np.testing.assert_array_equal(out["printed"], x)
    text = capfd.readouterr().err  # printed to standard error, as poplar prints
    assert "doubled" in text and "loud text" in text and "a.b" in text
    assert "hidden" not in text and "quiet" not in text


def test_to_mapping_clear_and_copy() -> None:
    keys: DotTree[int] = DotTree.from_dict({"a.x": 1, "a.y": 2, "b": 3})
    values: DotTree[str] = DotTree.from_dict({"a.x": "one", "b": "three", "c": "none"})
    assert to_mapping(keys, values) == {1: "one", 3: "three"}
    copy = keys.copy()
    copy.insert("d", 4)
    assert "d" not in keys and copy.a is not keys.a and copy.a.x == 1
    shared: DotTree[int] = DotTree.from_dict({"a.x": 1})
    parent: DotTree[int] = DotTree()
    parent.insert("child", shared)
    parent.clear()
    assert parent.keys() == ["child"] and shared.to_dict() == {}  # subtrees kept, emptied in place


def test_host_scalar_tensor_types_are_what_a_factory_takes() -> None:
    with popxl.Ir().main_graph:
        for value in [1, 2.5, True, np.float16(1), np.bool_(True), np.zeros((2,))]:
            assert isinstance(value, host_scalar_tensor_types)
            assert VariableFactory(partial(lambda v: v, value)).dtype == popxl.dtypes.as_dtype(np.asarray(value))
        with pytest.raises(ValueError, match="`data_iter` must give NumPy arrays or scalars"):
            VariableFactory(lambda: "text")


def test_patterns_level_names_the_levels() -> None:
    assert list(patterns_level) == ["no_patterns", "minimal", "default", "all"]
    assert [level.value for level in patterns_level.values()] == [0, 1, 2, 3]
    with pytest.raises(ValueError, match="Unknown pattern level 'most'"):
        apply_pre_alias_patterns(popxl.Ir(), "most")


def test_op_to_identity_replaces_the_declaring_kinds_ops() -> None:
    """An op kind declared identity-replaceable becomes an identity where its predicate holds, only there."""
    from popxl.extension import OpDef, PopartFacts, create_op, register

    def refuse(op: Any) -> None:
        if op.attrs["same"]:
            raise RuntimeError("needs the op-to-identity rewrite")

    double = register(
        OpDef(
            "test_double_unless_same",
            lambda specs, attrs: [specs[0]],
            lambda ctx, attrs, x: [2 * x],
            check=refuse,
            popart=PopartFacts(identity_when=lambda op: bool(op.attrs["same"])),
        )
    )
    ir = popxl.Ir()
    with ir.main_graph:
        x = popxl.variable(np.array([1.0, 2.0], np.float32))
        kept = create_op(double, [x], {"same": False})[0]
        replaced = create_op(double, [x], {"same": True})[0]
        out_kept, out_replaced = popxl.d2h_stream(kept.shape, kept.dtype), popxl.d2h_stream(x.shape, x.dtype)
        ops.host_store(out_kept, kept)
        ops.host_store(out_replaced, replaced)
    apply_pre_alias_patterns(ir, "default")
    assert [op.opdef.name for op in ir.main_graph.ops[:2]] == ["test_double_unless_same", "identity"]
    with popxl.Session(ir, "cpu") as session:
        got = session.run()
    np.testing.assert_array_equal(got[out_kept], [2.0, 4.0])
    np.testing.assert_array_equal(got[out_replaced], [1.0, 2.0])


def test_add_recompute_inputs_takes_gradients_then_forward_inputs() -> None:
    ir = popxl.Ir()
    with ir.main_graph:
        x = popxl.variable(np.ones((1, 3), np.float32))
        _, fwd = Linear().create_graph(x)
        grad = autodiff(fwd)
    info = grad.grad_graph_info
    target = ir.create_empty_graph("recompute")
    with target:
        fwd_inputs, grad_inputs, expected = add_recompute_inputs(info)
    kinds = [ec.connection_type for ec in expected]
    given = [t for t, ec in zip(info.graph.inputs, info.expected_inputs) if ec.connection_type.name == "FwdGrad"]
    assert list(grad_inputs) == given and kinds[: len(given)] == [ExpectedConnectionType.FwdGrad] * len(given)
    assert set(fwd_inputs) == set(fwd.graph.inputs) and kinds[len(given) :] == [ExpectedConnectionType.Fwd] * 2
    assert list(target.inputs) == [*grad_inputs.values(), *fwd_inputs.values()]
    assert [ec.fwd_tensor for ec in expected[len(given) :]] == list(fwd_inputs)
    for old, new in [*fwd_inputs.items(), *grad_inputs.items()]:
        assert (new.shape, new.dtype, new.meta_shape) == (old.shape, old.dtype, old.meta_shape)


def test_fc_pass_is_recorded_per_matmul() -> None:
    ir = popxl.Ir()
    with ir.main_graph:
        a = popxl.variable(np.ones((2, 2), np.float32))
        product = a @ a
        total = product + a
    (matmul,) = [op for op in ir.main_graph.ops if op.outputs[0] is product]
    (add,) = [op for op in ir.main_graph.ops if op.outputs[0] is total]
    assert uses_fc_pass(matmul)  # popart's default
    disable_fc_pass(ir)
    assert not uses_fc_pass(matmul)
    enable_fc_pass(ir)
    assert uses_fc_pass(matmul)
    with pytest.raises(ValueError, match="not a matmul"):
        uses_fc_pass(add)
