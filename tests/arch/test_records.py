"""The frozen records of the load path (tracejit/records.py) behave as the frozen dataclasses they replaced:
assignment refused, == / hash over the compared fields, the dataclass repr, replace, copy and pickle."""
from __future__ import annotations

import copy
import dataclasses
import pickle

import pytest
import torch

from tracejit.ir import Graph, ScalarType, SourceLoc, TensorType
from tracejit.ir.ops import Attr
from tracejit.ir.target import CallTarget, CallTargetError
from tracejit.program import ModuleEntry, Program
from tracejit.pytree import Spec
from tracejit.trace.ledger import LedgerEntry


def test_a_record_is_frozen_compares_and_hashes_by_its_fields_and_prints_as_its_dataclass_did():
    t = TensorType(torch.float32, (2, 3), "cpu")
    with pytest.raises(dataclasses.FrozenInstanceError):
        t.shape = (4,)
    with pytest.raises(dataclasses.FrozenInstanceError):
        del t.dtype
    with pytest.raises(AttributeError):   # __slots__: no attribute outside the fields
        object.__setattr__(t, "other", 1)
    same, other = TensorType(torch.float32, (2, 3), "cpu", False), TensorType(torch.float32, (2, 3), "cpu", True)
    assert t == same and hash(t) == hash(same) and t != other and len({t, same, other}) == 2
    assert t != ScalarType("int") and (t == (torch.float32, (2, 3), "cpu", False)) is False
    assert repr(t) == "TensorType(dtype=torch.float32, shape=(2, 3), device='cpu', requires_grad=False)"
    assert repr(SourceLoc("a.py", 3)) == "SourceLoc(filename='a.py', lineno=3, function='')"
    assert str(t) == "Float(2, 3, device=cpu)" and str(SourceLoc("a.py", 3, "f")) == "a.py:3"


def test_replace_copy_and_pickle_give_an_equal_record():
    t = TensorType(torch.float16, (5,), "cpu", True)
    r = t.replace(dtype=torch.float32, requires_grad=False)
    assert r == TensorType(torch.float32, (5,), "cpu", False) and t.dtype is torch.float16   # t unchanged
    with pytest.raises(TypeError, match="no field 'size'"):
        t.replace(size=3)
    for made in (copy.copy(t), copy.deepcopy(t), pickle.loads(pickle.dumps(t)), pickle.loads(pickle.dumps(r))):
        assert type(made) is TensorType and made in (t, r)
    spec = Spec("tuple", None, (), (Spec("leaf"), Spec("dict", dict, ("a",), (Spec("leaf"),))))
    assert copy.deepcopy(spec) == spec and spec.num_leaves == 2


def test_the_ledger_entry_leaves_its_guard_out_of_equality_and_repr():
    a = LedgerEntry("int", "read x.size(0)", SourceLoc("m.py", 7), 3)
    b = a.replace(guard="the guard node")
    assert b.guard == "the guard node" and a.guard is None
    assert a == b and hash(a) == hash(b) and repr(a) == repr(b)
    assert "guard" not in repr(b) and repr(b).startswith("LedgerEntry(kind='int', message='read x.size(0)'")
    assert a != a.replace(value=4)


def test_constructors_still_check_what_they_checked():
    with pytest.raises(CallTargetError, match="kind 'nope' is not one of"):
        CallTarget("nope", "x")
    with pytest.raises(CallTargetError, match="has no name"):
        CallTarget("fn", "")
    assert CallTarget.parse("method:view") == CallTarget("method", "view")
    with pytest.raises(ValueError, match="must be 'function' or 'module'"):
        Program("script", "X", (ModuleEntry("", "X", False),))
    assert Attr(int) == Attr(int, True, True) and Attr(int) != Attr(int, required=False)


def test_a_graph_compares_by_its_fields_and_is_not_hashable():
    a, b = Graph(name="f"), Graph("f")
    assert a == b and a != Graph("g") and a.inputs == [] and a.inputs is not b.inputs   # fresh lists each
    a.constants.append(1)
    assert a != b
    with pytest.raises(TypeError):
        hash(a)
