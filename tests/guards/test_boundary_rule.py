"""The boundary rule for tensors (trace/boundary.py): guarded by default, one reviewed exceptions list.

- a torch function or Tensor method that no list of tracejit's names (checked against its source)
  and that returns a Python value is guarded: the default, without editing a list;
- each exception holds for the reason it gives;
- NaN and signed zeros survive save + load and compare as the Python branch did.
"""
from __future__ import annotations

import copy
import pathlib

import pytest
import torch

import tracejit
from tracejit.serialize.guards import file_may_call
from tracejit.trace import boundary
from trace_testlib import quiet, roundtrip

_SOURCE = "\n".join(p.read_text() for p in pathlib.Path(tracejit.__file__).parent.rglob("*.py"))


def _guards(traced):
    return [n for n in traced.graph.nodes if n.op == "tracejit::guard"]


# ---- guarded by default ------------------------------------------------------------------------
def _result_type_branch(x):
    return x * 2 if torch.result_type(x, 1.5) == torch.float32 else x * 3


def _shallow_copy_branch(x):
    return x + 1 if torch._has_compatible_shallow_copy_type(x, x) else x - 1


def _nonzero_count_key(x):
    return x * {2: 1.0, 3: 5.0}.get(torch.count_nonzero(x).item(), -1.0)


@pytest.mark.parametrize("fn,name,example,new", [
    (_result_type_branch, "result_type", torch.randn(3), torch.randn(3).double()),
    (_shallow_copy_branch, "_has_compatible_shallow_copy_type", torch.randn(3), None),
], ids=["result_type", "has_compatible_shallow_copy_type"])
def test_an_unlisted_function_is_guarded_by_default(fn, name, example, new):
    assert f'"{name}"' not in _SOURCE and f"'{name}'" not in _SOURCE, f"{name} is on a list in tracejit's source"
    traced = quiet(tracejit.trace, fn, example, check_trace=False)
    calls = [n for n in _guards(traced) if n.attrs["test"] == "call"]
    assert calls and calls[0].attrs["call"].endswith(name), str(traced.graph)
    if not file_may_call(calls[0].attrs["call"]):
        # a file may repeat only reviewed reads (default-deny at load): save says so, naming the read
        with pytest.raises(tracejit.SaveError, match=f"{name}.*may not repeat"):
            roundtrip(traced)
        if new is not None:
            torch.testing.assert_close(quiet(traced, new), fn(new))
        return
    loaded = roundtrip(traced)
    torch.testing.assert_close(loaded(example), fn(example))
    if new is not None:
        with pytest.raises(tracejit.GuardError, match=name):
            loaded(new)
        torch.testing.assert_close(quiet(traced, new), fn(new))


# ---- the exceptions, each for its reason ---------------------------------------------------------
def test_exceptions_are_few_and_explained():
    assert len(boundary.EXCEPTIONS) <= 24
    assert all(isinstance(why, str) and len(why) > 10 for why in boundary.EXCEPTIONS.values())
    assert not set(boundary.EXCEPTIONS) & set(boundary.REFUSED)


def test_hash_is_identity_not_value():
    a, b = torch.ones(2), torch.ones(2)
    assert hash(a) != hash(b) and hash(a) == id(a)


@pytest.mark.parametrize("name", ["__reversed__", "__deepcopy__"])
def test_copies_and_flips_are_tensors(name):
    x = torch.arange(3.0)
    out = reversed(x) if name == "__reversed__" else copy.deepcopy(x)
    assert isinstance(out, torch.Tensor)


def test_array_priority_is_a_class_constant():
    assert torch.randn(2).__array_priority__ == torch.ones(3, dtype=torch.int64).__array_priority__


@pytest.mark.parametrize("name,other", [("is_floating_point", torch.int64), ("is_complex", torch.complex64),
                                        ("is_signed", torch.uint8), ("element_size", torch.float64),
                                        ("itemsize", torch.float64)])
def test_dtype_facts_are_guarded_through_the_dtype(name, other):
    def fn(x):
        v = getattr(x, name)
        v = v() if callable(v) else v
        return x.float() * (2 if v in (True, 4) else 3)

    x = torch.ones(3)
    traced = quiet(tracejit.trace, fn, x, check_trace=False)
    assert any(n.attrs["test"] == "dtype" for n in _guards(traced)), str(traced.graph)
    with pytest.raises(tracejit.GuardError):
        roundtrip(traced)(x.to(other))


@pytest.mark.parametrize("name", ["dim", "ndimension"])
def test_rank_reads_are_guarded_as_ranks(name):
    traced = quiet(tracejit.trace, lambda x: x * getattr(x, name)(), torch.randn(2, 3), check_trace=False)
    assert any(n.attrs["test"] == "dim" for n in _guards(traced))


# ---- NaN and signed zeros ------------------------------------------------------------------------
@pytest.mark.parametrize("seen,same_path,other_path", [
    (float("nan"), float("nan"), 1.0),
    (-0.0, -0.0, 0.0),
    (0.0, 0.0, -0.0),
], ids=["nan", "minus-zero", "plus-zero"])
def test_value_guard_on_nan_and_signed_zero(seen, same_path, other_path):
    def fn(x):
        v = x.max().item()
        return x * 0 + (1.0 / v if v == v and v != 0 else float(repr(v) == "-0.0"))

    traced = quiet(tracejit.trace, fn, torch.tensor([seen]), check_trace=False)
    loaded = roundtrip(traced)
    torch.testing.assert_close(loaded(torch.tensor([same_path])), fn(torch.tensor([same_path])), equal_nan=True)
    with pytest.raises(tracejit.GuardError):
        loaded(torch.tensor([other_path]))
    torch.testing.assert_close(quiet(traced, torch.tensor([other_path])), fn(torch.tensor([other_path])),
                               equal_nan=True)


def test_plain_value_keeps_trace_and_call_time_comparable():
    pv = boundary.plain_value
    assert pv(float("nan")) == pv(float("nan")) == "nan"
    assert pv(-0.0) != pv(0.0)
    assert pv((1, 2)) == pv(torch.Size([1, 2])) == [1, 2]
    assert pv(torch.float32) == "torch.float32" and pv(None) is None
    assert pv(torch.ones(1, requires_grad=True) * 2).startswith("<")   # an object: its type


# ---- refusals -------------------------------------------------------------------------------------
def test_refused_inputs_name_what_to_do():
    x = torch.randn(2)
    x.meta = "info"
    with pytest.raises(boundary.BoundaryError, match="Python attributes"):
        tracejit.trace(lambda t: t * 2, x)
    assert issubclass(boundary.BoundaryError, tracejit.TraceError)


def test_torch_internal_reads_do_not_warn():
    """x.norm() reads x.layout inside torch: guarded, but not reported to the user as their read."""
    import warnings
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        traced = tracejit.trace(lambda x: x / 2 * x.norm(), torch.randn(3), check_trace=False)
    assert not [w for w in caught if issubclass(w.category, tracejit.TracerWarning)]
    assert any(n.attrs.get("call") == "attr:layout" for n in _guards(traced))
