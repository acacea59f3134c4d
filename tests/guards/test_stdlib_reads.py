"""A traced size handed to standard-library Python code that gives it to C (hunt21): ``json.dumps(n)``.

json's encoder (its C accelerator, or ``int.__repr__``) reads the number's digits without asking it, so the
trace's digits came back at every call (torch.jit.trace refuses: its sizes are tensors, json cannot encode them). trace/stdlib_calls.py guards the traced sizes
a user frame passes to a standard-library function whose module is not known to ask the number's own methods.
"""
from __future__ import annotations

import json
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
