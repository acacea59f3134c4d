"""The boundary rule for traced numbers (trace/number_escapes.py), written over dir(int) / dir(float).

- every method of int / float is accounted for: recorded, guarded by its own rule, identity,
  exempt with a reason, or wrapped; a new method in a future Python fails the first tests;
- every wrapped method, called on a traced size while tracing, leaves a size guard in the graph,
  and the traced program then refuses (loaded) or retraces (live) for another size.
"""
from __future__ import annotations

import pytest
import torch

import tracejit
from tracejit.trace import number_escapes
from tracejit.trace.provenance import TracedFloat
from tracejit.trace.symbolic import TracedInt
from trace_testlib import quiet, roundtrip


@pytest.mark.parametrize("cls", [TracedInt, TracedFloat], ids=["int", "float"])
def test_every_method_of_the_base_type_is_accounted_for(cls):
    base = cls.__mro__[1]
    missing = set(dir(base)) - number_escapes.covered(cls)
    assert not missing, f"methods of {base.__name__} nobody wraps, records or exempts: {sorted(missing)}"


def test_every_exemption_has_a_reason():
    assert all(isinstance(why, str) and len(why) > 5 for why in number_escapes.EXEMPT.values())
    assert len(number_escapes.EXEMPT) <= 16


# sample arguments for the wrapped methods (the others take none)
_ARGS = {"to_bytes": (2, "little"), "__format__": ("",), "__rand__": (6,), "__ror__": (6,), "__rxor__": (6,),
         "__rlshift__": (1,), "__rrshift__": (64,), "__rdivmod__": (64,), "__reduce_ex__": (4,),
         "__radd__": (1.5,), "__rsub__": (1.5,), "__rmul__": (1.5,), "__rtruediv__": (1.5,)}


def _wrapped(cls):
    return sorted(number_escapes._wrapped(cls))


def _number(x, kind):
    return x.size(0) if kind == "int" else x.size(0) / 2


@pytest.mark.parametrize("kind,name", [("int", n) for n in _wrapped(TracedInt)]
                         + [("float", n) for n in _wrapped(TracedFloat)])
def test_each_wrapped_method_guards_the_number(kind, name):
    def fn(x):
        try:
            getattr(_number(x, kind), name)(*_ARGS.get(name, ()))
        except TypeError:   # float.__reduce__ refuses as it does for a plain float: the guard is made first
            assert name == "__reduce__"
        return x * 2

    traced = quiet(tracejit.trace, fn, torch.randn(3), check_trace=False)
    guards = [n for n in traced.graph.nodes if n.op == "tracejit::guard" and n.attrs["kind"] == "size"]
    assert guards, f"{kind}.{name} left no guard:\n{traced.graph}"
    with pytest.raises(tracejit.GuardError):
        roundtrip(traced)(torch.randn(5))
    torch.testing.assert_close(quiet(traced, torch.randn(5)).shape, torch.Size([5]))


def test_identity_methods_stay_recorded():
    def fn(x):
        n = x.size(0)
        return x.reshape(n.real, n.numerator, n.conjugate() // n) * 1

    traced = quiet(tracejit.trace, fn, torch.randn(3, 3), check_trace=False)
    assert "tracejit::guard" not in str(traced.graph)
    assert roundtrip(traced)(torch.randn(7, 7)).shape == (7, 7, 1)


def test_tracejit_own_formatting_adds_no_guard():
    """Graph printing, ledger messages and error texts format traced sizes: only user code's reads count."""
    traced = quiet(tracejit.trace, lambda x: x.view(x.size(0), -1), torch.randn(3, 2), check_trace=False)
    assert "tracejit::guard" not in str(traced.graph)
    assert roundtrip(traced)(torch.randn(6, 2)).shape == (6, 2)
