"""DotTree and NamedTensors."""

from __future__ import annotations

import numpy as np
import pytest

import popxl
from popxl_addons.core import DotTree, NamedTensors


def test_dot_tree_insert_access_and_order() -> None:
    t: DotTree[int] = DotTree()
    t.insert("b.y", 2)
    t.insert("a", 1)
    with pytest.raises(ValueError, match="'b' already exists"):
        t.insert("b.x", 3)
    t.insert("b.x", 3, overwrite=True)  # merges into the existing subtree
    t.insert(0, 4)
    assert t.to_dict() == {"b.y": 2, "b.x": 3, "a": 1, "0": 4}
    assert t.b.x == 3 and t["b.y"] == 2 and t[0] == 4
    assert t.unpack() == (["0", "a", "b.x", "b.y"], [4, 1, 3, 2])
    assert DotTree.pack(*t.unpack()).to_dict() == dict(zip(*t.unpack()))
    with pytest.raises(ValueError, match="already exists"):
        t.insert("a", 5)
    t.insert("a", 5, overwrite=True)
    with pytest.raises(ValueError, match="not a valid key"):
        t.insert("a-b", 1)
    with pytest.raises(ValueError, match="must not be negative"):
        t.insert(-1, 1)
    with pytest.raises(KeyError):
        t["zz"]
    with pytest.raises(AttributeError):
        _ = t.zz
    copy = t.copy()
    copy.b.insert("z", 9)
    assert "b.z" not in t and "b.z" in copy
    assert t.filter_keys(["a"]).to_dict() == {"a": 5}
    assert t.map(lambda v: v * 2).to_dict()["b.x"] == 6
    assert t.pop("b.x") == 3 and "b.x" not in t


def test_numeric_keys_count_back_from_the_largest() -> None:
    t: DotTree[str] = DotTree()
    for k, v in ((0, "a"), (1, "b"), (3, "d")):
        t.insert(k, v)
    assert t[-1] == "d" and t[-3] == "b" and t["1"] == "b" and getattr(t, "1") == "b"
    for missing in (-2, -5, 2):
        with pytest.raises(KeyError):
            t[missing]
    assert list(t._map) == ["0", "1", "3"]


def test_filter_keeps_leaves_and_whole_subtrees_and_clear_keeps_subtrees() -> None:
    t: DotTree[str] = DotTree(foo=DotTree(bar=DotTree(hee="a")))
    t.insert("foo.bar.goo", "b", overwrite=True)
    t.insert("tee.0.hee", "c")
    kept = t.filter_keys(["foo.bar.hee", "tee"])
    assert kept.to_dict() == {"foo.bar.hee": "a", "tee.0.hee": "c"} and kept.len() == 2
    with pytest.raises(ValueError, match="repeated"):
        t.filter_keys(["tee", "tee"])
    t._clear()
    assert t.len_flat() == 0 and isinstance(t.foo.bar, DotTree)


def test_named_tensors_sort_remap_and_mapping() -> None:
    ir = popxl.Ir()
    with ir.main_graph:
        b = popxl.variable(np.zeros(1, np.float32), name="b")
        a = popxl.variable(np.zeros(1, np.float32), name="a")
        c = popxl.variable(np.zeros(1, np.float32), name="c")
    named = NamedTensors.from_dict({"x.second": b, "first": a})
    assert named.tensors == (a, b)
    assert named.named_tensors == {"x.second": b, "first": a}
    assert named.remap({a: c, b: a}).to_dict() == {"x.second": a, "first": c}
    with pytest.raises(KeyError):
        named.remap({a: c})
    other = NamedTensors.from_dict({"first": c, "unrelated": b})
    assert named.to_mapping(other) == {a: c}


def test_init_zero_gives_named_zero_tensors_of_each_spec() -> None:
    from popxl_addons.core import NamedVariableFactories, VariableFactory

    ir = popxl.Ir()
    with ir.main_graph:
        factories = NamedVariableFactories()
        factories.insert("a.w", VariableFactory(lambda: np.ones((2, 3), np.float32), popxl.float32, "w"))
        factories.insert("b", VariableFactory(lambda: np.ones(4, np.float32), popxl.float32, "b"))
        zeros = factories.init_zero()
        assert isinstance(zeros, NamedTensors)
        d = popxl.d2h_stream((2, 3), popxl.float32, "w")
        popxl.ops.host_store(d, zeros.a.w)
    assert zeros.b.shape == (4,)
    with popxl.Session(ir, "cpu") as session:
        np.testing.assert_array_equal(session.run()[d], np.zeros((2, 3), np.float32))
