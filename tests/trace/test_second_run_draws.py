"""An escape after a random draw (dropout in train mode, ``torch.rand``, then a tensor handed out of the submodule's
call) is traced (hunt30; trace/attempts.py): the second run draws from private generators started where torch's
global generator was before the first run, so the caller's generator ends where ONE eager call leaves it, and no
other thread sees a state set back. Before, it was refused (``drew random numbers``); torch.jit.trace traces it.
Draws the private generators cannot take (a draw inside a C++ op: ``scaled_dot_product_attention``'s dropout) and
forward seeding the global generator stay refused."""
from __future__ import annotations

import threading
import warnings

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import tracejit
from trace_testlib import quiet, roundtrip


class DropsThenHandsOut(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)
        self.drop = nn.Dropout(0.5)

    def forward(self, x, store):
        h = self.drop(self.lin(x))
        store.append(h * 2)
        return h


class DrawsThenHandsOut(nn.Module):
    def forward(self, x, store):
        store.append(x * torch.rand_like(x))
        return x


class AttentionDropout(nn.Module):
    def forward(self, x, store):
        store.append(F.scaled_dot_product_attention(x, x, x, dropout_p=0.5))
        return x


class SeedsThenDraws(nn.Module):
    def forward(self, x, store):
        torch.manual_seed(1)
        store.append(x * torch.rand(()))
        return x


class Outer(nn.Module):
    def __init__(self, inner):
        super().__init__()
        self.inner = inner

    def forward(self, x):
        store = []
        return self.inner(x, store) + store[0]


@pytest.mark.parametrize("inner_cls", [DropsThenHandsOut, DrawsThenHandsOut])
def test_an_escape_after_a_draw_traces_and_the_generator_moves_once(inner_cls):
    torch.manual_seed(0)
    model = Outer(inner_cls()).train()
    example = torch.randn(3, 4)
    start = torch.get_rng_state()
    traced = quiet(tracejit.trace, model, example, check_trace=False)
    after_trace = torch.get_rng_state()
    torch.set_rng_state(start)
    model(example)   # what one eager call draws
    assert torch.equal(after_trace, torch.get_rng_state())
    loaded = roundtrip(traced)
    x = torch.randn(5, 4)
    torch.manual_seed(7)
    expected = model(x)
    torch.manual_seed(8)
    assert not torch.allclose(expected, model(x))   # the draw moves the answer
    for program in (traced, loaded):
        torch.manual_seed(7)
        torch.testing.assert_close(program(x), expected)


def test_torch_jit_trace_traces_it_too():
    torch.manual_seed(0)
    model = Outer(DrawsThenHandsOut()).train()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        jitted = torch.jit.trace(model, torch.randn(3, 4), check_trace=False)
    x = torch.randn(5, 4)
    torch.manual_seed(7)
    expected = model(x)
    torch.manual_seed(7)
    torch.testing.assert_close(jitted(x), expected)


@pytest.mark.parametrize("inner_cls", [AttentionDropout, SeedsThenDraws])
def test_draws_the_private_generators_cannot_take_stay_refused_after_one_run(inner_cls):
    torch.manual_seed(3)
    example = torch.randn(1, 2, 3, 4)
    model = Outer(inner_cls())
    start = torch.get_rng_state()
    with pytest.raises(tracejit.TraceError, match="drew random numbers"):
        quiet(tracejit.trace, model, example, check_trace=False)
    after = torch.get_rng_state()
    torch.set_rng_state(start)
    model(example)
    assert torch.equal(after, torch.get_rng_state())   # one run, as one eager call


def test_another_threads_draws_are_not_repeated():
    """The global generator is only read by the trace: a thread drawing meanwhile never sees its stream set back."""
    torch.manual_seed(0)
    seen, stop = [], threading.Event()

    def draw():
        while not stop.is_set():
            seen.append(torch.randint(0, 2**62, ()).item())

    worker = threading.Thread(target=draw)
    worker.start()
    try:
        for _ in range(5):
            quiet(tracejit.trace, Outer(DropsThenHandsOut()).train(), torch.randn(3, 4), check_trace=False)
    finally:
        stop.set()
        worker.join()
    assert len(seen) == len(set(seen))   # no repeated draw: the stream never went back
