"""The loader's attribute check and the saver's attribute filter come from ir/ops.py's op table."""
from __future__ import annotations

import pytest
import torch
from torch import nn

import tracejit

from tracejit.errors import LoadError
from tracejit.ir import ops
from tracejit.serialize.validate import check_attrs
from serialize_testlib import parse, to_bytes

_SAMPLES = {str: "a", int: 3, bool: True, list: [], object: 1.5}
_WRONG = {str: 3, int: "3", bool: 1, list: "x"}


@pytest.mark.parametrize("op", sorted(ops.OPS) + ["aten::add.Tensor"])
def test_each_saved_attribute_of_the_table_is_accepted_and_type_checked(op):
    table = ops.saved_attrs(op)
    own = ops.OPS[op].attrs if op in ops.OPS else ops.ATEN_ATTRS
    assert set(table) == {k for k, a in {**own, **ops.REGION_ATTRS}.items() if a.saved}
    check_attrs(op, {k: _SAMPLES[t] for k, t in table.items()}, "here")
    for k, t in table.items():
        if t in _WRONG:
            with pytest.raises(LoadError, match=f"here: attribute '{k}' must be a {t.__name__}"):
                check_attrs(op, {k: _WRONG[t]}, "here")
    with pytest.raises(LoadError, match="unknown node attribute 'no_such_attr'"):
        check_attrs(op, {"no_such_attr": 1}, "here")


@pytest.mark.parametrize("op,key", [("tracejit::call_module", "graph"), ("tracejit::autograd_function", "fn")])
def test_in_memory_attributes_are_never_accepted_from_a_file(op, key):
    assert key not in ops.OPS[op].attrs or ops.OPS[op].attrs[key].saved is False   # live objects stay out of files
    with pytest.raises(LoadError, match=f"unknown node attribute '{key}'"):
        check_attrs(op, {key: 0}, "here")


def test_a_new_op_is_one_table_entry(monkeypatch):
    new = ops.OpDef("tracejit::example", {"width": ops.Attr(int), "note": ops.Attr(str, required=False),
                                          "cache": ops.Attr(object, required=False, saved=False)},
                    True, ("width",), "an op added for this test")
    monkeypatch.setitem(ops.OPS, new.name, new)
    check_attrs(new.name, {"width": 4, "note": "n", "grad": "no_grad"}, "here")
    with pytest.raises(LoadError, match="attribute 'width' must be a int"):
        check_attrs(new.name, {"width": "4"}, "here")
    with pytest.raises(LoadError, match="unknown node attribute 'cache'"):
        check_attrs(new.name, {"cache": 1}, "here")
    node = type("N", (), {"op": new.name, "attrs": {"note": "n"}, "args": (), "kwargs": {}, "outputs": []})()
    assert ops.check_tracejit_node(node) == "tracejit::example needs attribute 'width'"


def test_the_saver_writes_the_saved_attributes_only():
    net = nn.Sequential(nn.Linear(3, 3), nn.ReLU())
    traced = tracejit.trace(net, torch.randn(2, 3))
    call = next(n for n in traced.graph.nodes if n.op == "tracejit::call_module")
    assert set(call.attrs) == {"path", "method", "n_captures"}   # named; linked by the graph's table
    assert traced.graph.callee(call).out_spec is not None
    doc, _ = parse(to_bytes(traced))
    saved = [n for g in doc["program"]["graphs"] for n in g["nodes"] if n["op"] == "tracejit::call_module"]
    assert saved and all(set(n["attrs"]) == {"path", "method", "n_captures"} for n in saved)
