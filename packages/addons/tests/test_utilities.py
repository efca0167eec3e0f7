"""popxl-addons' utilities: utils, testing_utils, performance_utils, available memory, instance groupings."""

from __future__ import annotations

import logging
from functools import partial

import numpy as np
import pytest

import popxl
import popxl_addons as addons
from popxl import ipu_only, ops
from popxl_addons import core, performance_utils, testing_utils, utils
from popxl_addons.core import (
    Module,
    OrderedDict,
    TensorInput,
    WeightsDict,
    available_memory_proportion,
    duplicate_items,
    evaluate_FLOPs,
    evaluate_ir_FLOPs,
    fill_none_group,
    format_flops_scientific,
    get_ild_replica_grouping,
    get_ild_size_from_popdist,
    get_instance_replica_grouping,
    is_cross_instance,
    ops_of_type,
    print_FLOPs,
    run_module,
    set_available_memory_proportion_by_ipu,
    set_graph_available_memory_proportion_by_ipu,
    suffix_graph_name,
    timer,
    total_FLOPs,
)
from popxl_addons.named_replica_grouping import fill_none_group as thin_fill_none_group


def test_thin_paths_reexport_core() -> None:
    assert utils.timer is timer and utils.suffix_graph_name is suffix_graph_name
    assert testing_utils.run_module is run_module and performance_utils.total_FLOPs is total_FLOPs
    assert addons.set_available_memory_proportion_by_ipu is set_available_memory_proportion_by_ipu
    assert (
        addons.transforms.set_graph_available_memory_proportion_by_ipu is set_graph_available_memory_proportion_by_ipu
    )
    assert thin_fill_none_group is fill_none_group and addons.OrderedDict is core.OrderedDict


# utils


def test_timer_logs_the_duration(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger="popxl_addons.core.utils"), timer("Load data"):
        pass
    assert caplog.messages[0] == "Starting Load data"
    assert caplog.messages[1].startswith("Load data duration: 0.00 mins")


def test_ordered_dict_index_and_repr() -> None:
    d: OrderedDict[str, int] = OrderedDict(a=1, b=2)
    assert d.idx(0) == 1 and d.idx(-1) == 2
    assert repr(d) == "{\na: 1,\nb: 2,\n}" and repr(OrderedDict()) == "{}"


def test_weights_dict_checks_dtype_and_host_shape() -> None:
    ir = popxl.Ir()
    ir.replication_factor = 2
    with ir.main_graph:
        v = popxl.variable(np.zeros((2, 3), np.float32))
        g = popxl.variable(np.zeros((2, 2, 3), np.float32), replica_grouping=ir.replica_grouping(group_size=1))
    w = WeightsDict({v: np.ones((2, 3), np.float32)})
    w[g] = np.ones((2, 2, 3), np.float32)  # one value per group: the host shape
    assert len(w) == 2 and list(w) == [v, g]
    with pytest.raises(ValueError, match="dtypes do not equal"):
        w[v] = np.ones((2, 3), np.int32)
    with pytest.raises(ValueError, match=r"shapes do not equal \(2, 2, 3\) != \(2, 3\)"):
        w[g] = np.ones((2, 3), np.float32)
    del w[v]
    assert list(w) == [g]


def test_suffix_and_duplicates() -> None:
    assert suffix_graph_name("layer_subgraph(12)", "recomp") == "layer_recomp"
    assert duplicate_items([7, 5, 5, 1, 2, 7]) == [7, 5] and duplicate_items([]) == []


# named_replica_grouping


def test_groupings_with_one_instance() -> None:
    ir = popxl.Ir(replication=4)
    with ir.main_graph:
        rg = ir.replica_grouping(stride=2, group_size=2)
        assert fill_none_group(None, rg) is rg and fill_none_group(rg, ir.replica_grouping()) is rg
        # One process runs all replicas: nothing crosses an instance.
        assert not is_cross_instance(ir.replica_grouping())
        assert get_instance_replica_grouping(rg) is rg
        assert get_instance_replica_grouping() == ir.replica_grouping()
        assert get_ild_size_from_popdist() == 4


def test_ild_grouping_from_target_options(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("POPLAR_TARGET_OPTIONS", '{"ipuLinkDomainSize": "2"}')
    ir = popxl.Ir(replication=8)
    with ir.main_graph:
        assert get_ild_size_from_popdist() == 2
        assert get_ild_replica_grouping() == ir.replica_grouping(stride=1, group_size=2)
        with pytest.raises(ValueError, match="stride must be < IPU Link Domain size"):
            get_ild_replica_grouping(ir.replica_grouping(stride=4, group_size=2))


# testing_utils


class _Affine(Module):
    def build(self, x: popxl.Tensor) -> popxl.Tensor:
        w = self.add_variable_input("w", partial(np.ones, (x.shape[-1], 2)), popxl.float32)
        b = self.add_variable_input("b", partial(np.zeros, (2,)), popxl.float32)
        return x @ w + b


def test_run_module_with_weights() -> None:
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    w = np.arange(6, dtype=np.float32).reshape(3, 2) / 10
    b = np.array([1.0, -1.0], np.float32)
    (out,) = run_module(_Affine(), TensorInput(x), weights=lambda v: {v.w: w, v.b: b})
    np.testing.assert_allclose(out, x @ w + b, rtol=1e-6)
    (default,) = run_module(_Affine(), TensorInput(x.astype(np.float64), popxl.float32))
    np.testing.assert_allclose(default, x @ np.ones((3, 2)), rtol=1e-6)


def test_ops_of_type() -> None:
    ir = popxl.Ir()
    with ir.main_graph:
        a = popxl.variable(np.ones((2, 2), np.float32))
        b = a @ a
        c = b @ a + 1
        ops.add_(c, b)
    main = ir.main_graph.ops
    assert ops_of_type(main, "matmul") == 2 and ops_of_type(main, main[0].opdef) == 2
    assert ops_of_type(main, "add") == 1 and ops_of_type(main, "add_") == 1
    assert ops_of_type(main, "no_such_kind") == 0
    with pytest.raises(TypeError):
        ops_of_type(main, 3)  # type: ignore[arg-type]


# performance_utils


def test_flops_per_op_from_shapes() -> None:
    ir = popxl.Ir()
    with ir.main_graph:
        x = popxl.constant(np.ones(4, np.float32))
        m = popxl.constant(np.ones((4, 8), np.float32))
        _ = x @ m  # op 100, as popart numbers ops
        _ = x.T @ x  # 101 is the transpose, 102 the dot product
        a = popxl.constant(np.ones((3, 5, 10, 9), np.float32))
        c = popxl.constant(np.ones((3, 5, 9, 3), np.float32))
        _ = a @ c  # 103
        y = a - a  # 104
        _ = y * a / a  # 105, 106
        t = popxl.constant(np.ones((6, 4), np.float32))
        s = popxl.constant(np.ones(4, np.float32))
        ops.group_norm(t, s, s, num_groups=2)  # 107
        ops.add_(t, t)  # in place: not counted
    breakdown = evaluate_FLOPs(ir.main_graph)
    assert breakdown["MatMul"] == {100: 2 * 4 * 8, 102: 2 * 4, 103: 2 * 9 * 3 * 5 * 10 * 3}
    assert breakdown["Sub"] == {104: 3 * 5 * 10 * 9}
    assert breakdown["Mul"] == {105: 1350} and breakdown["Div"] == {106: 1350}
    # popxl-addons' estimate for 12 statistics of 2 groups over a (6, 4) input of 24 elements.
    averaged = 6 * 4 // 2
    assert breakdown["GroupNormalization"] == {107: averaged + 2 * averaged + 2 * 12 + 4 * 24}
    assert "Add" not in breakdown
    assert breakdown["TOT"] == sum(sum(v.values()) for k, v in breakdown.items() if k != "TOT")


def test_flops_of_called_and_repeated_graphs() -> None:
    ir = popxl.Ir()
    ir.replication_factor = 2
    spec = popxl.TensorSpec((2, 3), popxl.float32)
    sub = ir.create_graph(lambda x: x + x, spec)  # the add is op 100
    with ir.main_graph:
        v = popxl.variable(np.ones((2, 3), np.float32))
        ops.call(sub, v)  # 101
        ops.repeat(sub, 4, v)  # 102
    breakdown = evaluate_FLOPs(ir.main_graph)
    name = sub.id.split("_subgraph")[0]
    assert breakdown["Add"] == {f"Call_101({name})": {100: 6}, f"Loop_102({name})": {100: 24}}
    assert breakdown["TOT"] == 30
    assert evaluate_ir_FLOPs(ir)["Add"][f"Loop_102({name})"] == {100: 48}
    assert total_FLOPs(ir) == 60


def test_format_flops_scientific() -> None:
    assert format_flops_scientific(9072) == "9.072E+03"
    assert format_flops_scientific(95) == "95.000E+00" and format_flops_scientific(950) == "0.950E+03"
    assert format_flops_scientific(0) == "0.000E+00"
    assert format_flops_scientific(12_345_678, "M") == "12.346E+06"
    with pytest.raises(ValueError):
        format_flops_scientific(1, "X")  # type: ignore[arg-type]


def test_print_flops(capsys: pytest.CaptureFixture[str]) -> None:
    breakdown = {"MatMul": {3: 900, 0: 100}, "Add": {1: 0}, "TOT": 1000}
    print_FLOPs(breakdown)
    lines = [line for line in capsys.readouterr().out.splitlines() if "|" in line]
    # Largest first; MatMul ties with the total and keeps its place.
    assert [line.split("|")[0].strip() for line in lines] == ["Op Type", "MatMul", "TOT", "Add"]
    assert [line.split("|")[1].strip() for line in lines[1:]] == ["1.000E+03", "1.000E+03", "0.000E+00"]
    assert lines[-1].rstrip().endswith("0.0") and lines[1].rstrip().endswith("100.0")
    print_FLOPs(breakdown, mode="flat")
    flat = capsys.readouterr().out
    assert "MatMul.3" in flat and "0.900E+03" in flat
    with pytest.raises(ValueError):
        print_FLOPs(breakdown, mode="tree")  # type: ignore[arg-type]


# available memory proportion


def test_available_memory_proportion_by_ipu_is_recorded() -> None:
    ir = popxl.Ir()
    spec = popxl.TensorSpec((2, 2), popxl.float32)
    sub = ir.create_graph(lambda a, b: a @ b, spec, spec)
    with ir.main_graph:
        with popxl.ipu(0):
            a = popxl.variable(np.ones((2, 2), np.float32))
            (c,) = ops.call(sub, a, a)
        with popxl.ipu(2):
            d = c @ a
            e = d + 1
    matmul_0, matmul_2 = sub.ops[0], ir.main_graph.ops[1]
    set_graph_available_memory_proportion_by_ipu(ir.main_graph, [0.1, 0.2])
    # IPU 2 has no entry: IPU 0's proportion applies.
    assert available_memory_proportion(matmul_0) == 0.1 and available_memory_proportion(matmul_2) == 0.1
    assert available_memory_proportion(e.producer) is None  # an add has none
    set_available_memory_proportion_by_ipu(ir, [0.3, 0.4, 0.5])
    assert available_memory_proportion(matmul_0) == 0.3 and available_memory_proportion(matmul_2) == 0.5
    with popxl.Session(ir, "cpu") as session:
        np.testing.assert_array_equal(session.get_tensor_data(a), np.ones((2, 2)))


def test_available_memory_proportion_is_one_setting_with_one_reader() -> None:
    """The proportion an op function is given and the one the transforms set are one setting of the op."""
    ir = popxl.Ir()
    with ir.main_graph:
        a = popxl.variable(np.ones((2, 2), np.float32))
        given = ops.matmul(a, a, available_memory_proportion=0.4)
        x = popxl.variable(np.ones((1, 2, 4, 4), np.float32))
        y = ops.conv(x, popxl.variable(np.ones((3, 2, 1, 1), np.float32)))
    assert available_memory_proportion is ipu_only.available_memory_proportion
    assert available_memory_proportion(given.producer) == 0.4  # type: ignore[arg-type]
    set_available_memory_proportion_by_ipu(ir, [0.3])
    assert ipu_only.recorded(given.producer) == {"available_memory_proportion": 0.3}  # type: ignore[arg-type]
    # A convolution takes one proportion per convolution, as popart's conv options hold them.
    assert ipu_only.recorded(y.producer) == {"available_memory_proportions": (0.3,)}  # type: ignore[arg-type]
    assert available_memory_proportion(y.producer) == 0.3  # type: ignore[arg-type]


def test_print_schedule() -> None:
    ir = popxl.Ir()
    with ir.main_graph:
        x = popxl.variable(np.ones((2, 3), np.float32))
        _, graph = _Affine().create_graph(x)
    assert graph.print_schedule() == (
        f"Graph : {graph.graph.name}\n"
        "  (%1, w=%2, b=%3) -> (%5) {\n"
        "    matmul.0 (%1 [(2, 3) float32], %2 [(3, 2) float32]) -> (%4 [(2, 2) float32])\n"
        "    add.1 (%4 [(2, 2) float32], %3 [(2,) float32]) -> (%5 [(2, 2) float32])\n"
        "  }"
    )
