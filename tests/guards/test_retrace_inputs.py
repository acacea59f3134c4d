"""A live retrace runs on inputs that keep what the guards read (runtime/undo.RetraceInputs).

A guard on an input's storage offset, strides, view-ness, version counter, inference flag or grad_fn fails
for a new input; the retrace then must see an input with the same metadata, or the new specialization fails
the same guard again. Copies keep all but grad_fn; a tensor with autograd history is passed itself, and a
retrace that writes into it gets its values put back and a GuardError (never a second write).
"""
from __future__ import annotations

import warnings

import pytest
import torch

import tracejit
from tracejit.runtime.undo import RetraceInputs, inputs_for_retrace


def quiet_trace(fn, *example):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return tracejit.trace(fn, example, check_trace=False)


def meta(t: torch.Tensor):
    inference = t.is_inference()
    return (tuple(t.shape), t.stride(), t.storage_offset(), t._is_view(), t.requires_grad, t.is_leaf,
            inference, None if inference else t._version, t.dtype, t.is_conj(), t.is_neg(), t.is_shared())


@pytest.mark.parametrize("make", [
    lambda: torch.randn(4, 3)[1:],                       # a view past the storage's beginning
    lambda: torch.randn(3, 4).t(),                       # transposed strides
    lambda: torch.randn(2, 3, 4, 5).to(memory_format=torch.channels_last),
    lambda: torch.ones(3).add_(1).add_(1),               # version counter 2
    lambda: torch.inference_mode()(lambda: torch.randn(3))(),
    lambda: torch.randn(3, requires_grad=True),          # a leaf that requires grad
    lambda: torch.randn(5, 5)[::2, 1:],                  # a strided view with an offset
    lambda: torch.randn(3, dtype=torch.complex64).conj(),            # the lazy conjugate bit
    lambda: torch.randn(3, dtype=torch.complex64).conj().imag,       # the negative bit
    lambda: torch.randn(3).share_memory_(),              # shared memory (a DataLoader worker's batch)
], ids=["offset_view", "transposed", "channels_last", "version", "inference", "leaf_requires_grad", "strided",
        "conj", "neg", "shared"])
def test_copies_keep_the_metadata_guards_read(make):
    x = make()
    (copy,), _ = inputs_for_retrace((x,), {})
    assert copy is not x
    assert meta(copy) == meta(x)
    assert torch.equal(copy.detach(), x.detach())
    if not x.is_inference() and not x.is_neg():
        with torch.no_grad():
            copy.add_(1)
        assert not torch.equal(copy.detach(), x.detach())   # its own memory: a write in the retrace stays there


def test_a_tensor_with_history_is_passed_itself_and_gradients_are_eagers():
    def fn(x):
        if x.grad_fn is None:
            return x * 2
        return x * 3
    traced = quiet_trace(fn, torch.randn(3))
    leaf = torch.randn(3, requires_grad=True)
    x = leaf * 1
    (copied,), _ = inputs_for_retrace((x,), {})
    assert copied is not x and copied.grad_fn is not None   # a clone keeps the history, not its last op
    (passed,), _ = RetraceInputs((x,), {}, keep_history=True).inputs
    assert passed is x
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        out = traced(x)
    assert len(traced.specializations) == 2
    torch.testing.assert_close(out, fn(x))
    out.sum().backward()
    torch.testing.assert_close(leaf.grad, torch.full((3,), 3.0))


def test_a_retrace_writing_into_a_tensor_with_history_is_undone_and_refused():
    def fn(x):
        if x.grad_fn is None:  # the guard that fails
            return x * 2
        x.mul_(3)
        return x
    traced = quiet_trace(fn, torch.randn(3))
    leaf = torch.randn(3, requires_grad=True)
    x = leaf * 1
    before = x.detach().clone()
    with pytest.raises(tracejit.GuardError, match="wrote in place into an input that has autograd history"):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            traced(x)
    assert torch.equal(x.detach(), before)   # its values put back
    assert len(traced.specializations) == 1   # nothing published


def test_a_conjugate_view_input_retraces_and_answers():
    def fn(x):
        if x.is_conj():
            return x * 2
        return x + 1
    c = torch.randn(3, dtype=torch.complex64)
    traced = quiet_trace(fn, c)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.testing.assert_close(traced(c.conj()), fn(c.conj()))
    assert len(traced.specializations) == 2
