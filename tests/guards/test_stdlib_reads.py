"""A traced size handed to standard-library Python code that gives it to C (hunt21): ``json.dumps(n)``.

json's encoder (its C accelerator, or ``int.__repr__``) reads the number's digits without asking it, so the
trace's digits came back at every call (torch.jit.trace refuses: its sizes are tensors, json cannot encode them). trace/stdlib_calls.py guards the traced sizes
a user frame passes to a standard-library function whose module is not known to ask the number's own methods.
"""
from __future__ import annotations

import importlib
import json
import sys
import warnings

import pytest
import torch

import tracejit


class Dumps(torch.nn.Module):
    def __init__(self, make):
        super().__init__()
        self.make = make

    def forward(self, x):
        return x * len(json.dumps(self.make(x.shape[0] * 1000)))


MAKERS = {"int": lambda n: n, "list": lambda n: [n], "dict": lambda n: {"n": n}}


@pytest.mark.parametrize("kind", sorted(MAKERS))
def test_json_dumps_of_a_traced_size_is_guarded(kind):
    m = Dumps(MAKERS[kind])
    x, y = torch.ones(9, 2), torch.ones(10, 2)   # 9000 -> 10000: one more digit
    traced = tracejit.trace(m, (x,))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(TypeError):   # torch.jit: sizes are tensors while it traces, json refuses them
            torch.jit.trace(m, (x,))
        assert not torch.equal(x.new_ones(10, 2) * len(json.dumps(MAKERS[kind](9000))), m(y))   # frozen: wrong
        assert torch.equal(traced(y), m(y))
    with pytest.raises(tracejit.GuardError, match=r"json\.dumps"):
        _without_original(m, x)(y)


def _without_original(m, x):
    traced = tracejit.trace(m, (x,))
    traced.drop_original()
    return traced


def test_a_logging_call_does_not_pin_the_size():
    import logging
    log = logging.getLogger("tracejit.hunt21.test")

    def f(x):
        log.debug("rows: %d", x.shape[0])
        return x * 2
    traced = tracejit.trace(f, (torch.ones(2, 3),))
    y = torch.ones(5, 3)
    assert torch.equal(traced(y), f(y))
    assert len(getattr(traced, "specializations", [None])) == 1


def test_a_module_first_imported_mid_trace_runs_its_body_unwatched(tmp_path, monkeypatch):
    """A module body run by an import inside forward is not the traced code: the hook only counts the import's
    nesting there (trace/frame_returns.py). Each standard-library call of such a body went through the stdlib
    check before session 32: ``import sympy`` took 9 CPU s inside a trace against 0.3 outside. The forward's own
    ``json.dumps`` of a traced size, after the import, is still guarded."""
    from tracejit.trace.index_reads import IndexScanner
    name = "tj_imported_mid_trace"
    (tmp_path / f"{name}.py").write_text("import json\nTEXT = [json.dumps(i) for i in range(2000)]\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, name, raising=False)
    seen = []
    real = IndexScanner.stdlib_call
    monkeypatch.setattr(IndexScanner, "stdlib_call",
                        lambda self, frame: seen.append(frame.f_code.co_name) or real(self, frame))

    def f(x):
        module = importlib.import_module(name)
        return x * len(module.TEXT) + len(json.dumps(x.shape[0] * 1000))
    x, y = torch.ones(9, 2), torch.ones(10, 2)   # 9000 -> 10000: one more digit
    traced = tracejit.trace(f, (x,), check_trace=False)
    assert sys.modules[name].TEXT[-1] == "1999"   # the body ran whole
    assert seen.count("dumps") == 1               # the forward's call; not the body's 2000
    assert torch.equal(traced(x * 3), f(x * 3))
    traced.drop_original()
    with pytest.raises(tracejit.GuardError, match=r"json\.dumps"):
        traced(y)
