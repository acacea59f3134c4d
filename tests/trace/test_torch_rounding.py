"""``torch.ceil`` / ``floor`` / ``round`` of a size divided by a number, as library code writes it for
``torch.jit.is_tracing()`` (where torch.jit's sizes are tensors): transformers' MobileViT computes
``torch_int(torch.ceil(h / p) * p)``. Under tracejit ``h / p`` is a traced float and the call failed at trace time
("ceil(): argument 'input' must be Tensor, not TracedFloat"); it is math's rounding, recorded (trace/torch_rounding.py),
so the size stays symbolic and a new input size gives eager's answer."""
from __future__ import annotations

import io
import math
import warnings

import pytest
import torch
import torch.nn.functional as F

import tracejit


def pad_to_multiple(x):
    """Pad the last dimension up to a multiple of 4, as transformers writes it."""
    w = x.shape[-1]
    if torch.jit.is_tracing():
        new = torch.ceil(w / 4) * 4
    else:
        new = math.ceil(w / 4) * 4
    return F.pad(x, (0, new - w)) * 2


@pytest.mark.parametrize("fn", ["ceil", "floor", "round", "trunc"])
def test_rounding_a_traced_size_stays_symbolic(fn):
    op, py = getattr(torch, fn), getattr(math, fn, round)

    def f(x):
        n = op(x.shape[-1] / 3) if torch.jit.is_tracing() else py(x.shape[-1] / 3)
        return x.new_ones(n) * x.sum()

    traced = tracejit.trace(f, torch.randn(2, 7))
    for x in (torch.randn(2, 8), torch.randn(3, 11), torch.randn(1, 2)):
        assert torch.equal(traced(x), f(x))
    assert len(traced.specializations) == 1


def test_a_padded_size_follows_the_input_saved_and_loaded():
    traced = tracejit.trace(pad_to_multiple, torch.randn(2, 5))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        jit = torch.jit.trace(pad_to_multiple, torch.randn(2, 5))
    buf = io.BytesIO()
    tracejit.save(traced, buf)
    buf.seek(0)
    loaded = tracejit.load(buf)
    for x in (torch.randn(2, 9), torch.randn(3, 12), torch.randn(1, 1)):
        want = pad_to_multiple(x)
        assert torch.equal(traced(x), want)
        assert torch.equal(loaded(x), want)
        assert torch.equal(jit(x), want)   # torch.jit.trace, whose sizes are tensors, follows it too
    assert len(traced.specializations) == 1


def test_other_torch_functions_of_a_traced_float_run_on_its_value():
    def f(x):
        s = x.shape[-1] / 2
        return torch.add(x, s) + torch.mul(x, s)   # a number where the function takes a tensor: a scalar

    traced = tracejit.trace(f, torch.randn(2, 6))
    for x in (torch.randn(2, 6), torch.randn(2, 10)):
        torch.testing.assert_close(traced(x), f(x), rtol=0, atol=0)
