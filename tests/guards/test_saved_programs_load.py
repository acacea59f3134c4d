"""A program that saves, loads (issue #20, "saves but does not load").

``torch.empty_like(y).normal_(generator=g)`` traced and saved, then the loader refused it: neither op was on its
allow-list. Now the in-place samplers are (serialize/op_allowlist.py, family ``samplers_in_place``), a file writes
``empty*`` as ``zeros*`` (serialize/uninitialized.py: the loader never runs uninitialized memory), and the class of
bug is closed by ``save`` itself: it runs the loader's graph validation (serialize/save_check.py) and refuses, with
the loader's message, what the loader would refuse. Proven here: the noise patterns give eager's exact numbers
live and loaded; every pattern of tests/guards whose own test does not save it (the state patterns' opt-out
programs) loads after it saves and answers as the traced program; a program the loader
refuses (an op off the list, a budget) is refused by ``save`` with the loader's words. (The boundary, size-math,
base, index-read and RNG patterns are saved and loaded by their own tests; every model of the corpus by
tests/security/test_op_allowlist.py.)
"""
from __future__ import annotations

import io
import warnings

import pytest
import torch

import state_patterns
import tracejit
from filesurgery import parse, rewrite


def generator_noise(y):                   # diffusers' samplers: noise from a generator seeded per call
    g = torch.Generator()
    g.manual_seed(3)
    return y + torch.empty_like(y).normal_(generator=g)


def sampler_zoo(x):                       # every in-place sampler, on empty / new_empty / empty_like storage
    g = torch.Generator().manual_seed(11)
    a = torch.empty(x.size(-1)).uniform_(-1, 1, generator=g)
    b = x.new_empty(x.shape).exponential_(2.0, generator=g)
    c = torch.empty_like(x).cauchy_(generator=g).clamp(-3, 3)
    d = torch.empty_like(x).log_normal_(0.0, 0.5, generator=g)
    e = torch.empty_like(x).geometric_(0.3, generator=g)
    f = torch.empty_like(x).random_(0, 7, generator=g)
    return x * a + b + c + d + e + f + torch.empty_like(x).bernoulli_(0.5, generator=g)


def global_seed_noise(x):
    torch.manual_seed(5)
    return x + torch.empty(x.shape).normal_() * 0.1


NOISE = [(generator_noise, torch.randn(3, 4), torch.randn(5, 2)),
         (sampler_zoo, torch.randn(2, 3), torch.randn(4, 5)),
         (global_seed_noise, torch.randn(3), torch.randn(6))]


def quiet_trace(fn, example, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return tracejit.trace(fn, example, check_trace=False, **kwargs)


def saved(traced) -> bytes:
    buf = io.BytesIO()
    tracejit.save(traced, buf)
    return buf.getvalue()


def call(fn, x):
    torch.manual_seed(99)      # the caller's generator, then its next draw: as eager leaves it
    return fn(x.clone()), torch.rand(3)


@pytest.mark.parametrize("fn,example,new", NOISE, ids=[n[0].__name__ for n in NOISE])
def test_noise_from_uninitialized_storage_saves_loads_and_draws_eagers_numbers(fn, example, new):
    traced = quiet_trace(fn, (example,))
    raw = saved(traced)
    loaded = tracejit.load(io.BytesIO(raw))
    for x in (example, new):
        want = call(fn, x)
        for program in (traced, loaded):
            got = call(program, x)
            assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1]), fn.__name__
    ops = {n["op"] for g in parse(raw)[0]["program"]["graphs"] for n in g["nodes"]}
    assert not [op for op in ops if "empty" in op], ops          # the file names no uninitialized memory
    assert "empty" in str(traced.graph)                           # the live program keeps empty (no fill)


def test_a_sampler_in_a_file_is_still_type_checked():
    raw = saved(quiet_trace(generator_noise, (torch.randn(3, 4),)))

    def edit(doc):
        for n in (x for g in doc["program"]["graphs"] for x in g["nodes"]):
            if n["op"] == "aten::normal_.default":
                n["args"].append("not a mean")
    with pytest.raises(tracejit.LoadError, match="normal_"):
        tracejit.load(io.BytesIO(rewrite(raw, edit_doc=edit)))


def _unsaved_patterns():
    """The patterns of tests/guards whose own tests do not save them: the state patterns' opt-out programs."""
    out = []
    for case in state_patterns.CASES:    # refused by default; the opt-out's program freezes and saves
        out.append(pytest.param(case.make, case.example, {"allow_frozen_python_state": True}, id=case.name))
    return out


@pytest.mark.parametrize("make,example,options", _unsaved_patterns())
def test_every_pattern_that_saves_loads_and_answers_as_the_traced_program(make, example, options):
    torch.manual_seed(0)
    traced = quiet_trace(make(), example, **options)
    torch.manual_seed(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        want = traced(*example)   # first (a module forward left switched retraces: the file holds both)
    try:
        raw = saved(traced)
    except tracejit.SaveError as e:   # refused at save, with a reason (never at load)
        assert "cannot be saved" in str(e) or "would refuse" in str(e), str(e)
        return
    loaded = tracejit.load(io.BytesIO(raw))
    torch.manual_seed(0)
    assert torch.allclose(loaded(*example), want, equal_nan=True)


def test_save_refuses_an_op_the_loader_refuses_with_the_loaders_message():
    def channels_last(x):
        return x + torch.empty(1, 3, 4, 2, memory_format=torch.channels_last).zero_().sum()

    def zeros(x):
        return x + torch.zeros(1, 3, 4, 2).zero_().sum()

    with pytest.raises(tracejit.SaveError) as refused:
        saved(quiet_trace(channels_last, (torch.randn(3),)))

    def edit(doc):   # the same op, written into a file by hand: what the loader says of it
        for n in (x for g in doc["program"]["graphs"] for x in g["nodes"]):
            if n["op"] == "aten::zeros.default":
                n["op"], n["target"] = "aten::empty.memory_format", "fn:torch.empty"
    with pytest.raises(tracejit.LoadError) as at_load:
        tracejit.load(io.BytesIO(rewrite(saved(quiet_trace(zeros, (torch.randn(3),))), edit_doc=edit)))
    said = str(at_load.value).split("): ", 1)[1]
    assert said.startswith("aten::empty is not on the allow-list")
    assert said in str(refused.value) and "tracejit.load would refuse this program" in str(refused.value)


def test_save_refuses_a_program_over_the_loaders_budget():
    def huge(x):   # a view at trace time (no memory), a copy of 10^8 elements once contiguous
        return x + x[:1].expand(10 ** 4, 10 ** 4)[0, :3]

    with pytest.raises(tracejit.SaveError, match="would allocate 100000000 elements"):
        saved(quiet_trace(huge, (torch.randn(3),)))
