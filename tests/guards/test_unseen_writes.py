"""Writes torch never shows a TorchFunctionMode (hunt25): ``Tensor.set_``, ``torch.utils.swap_tensors``, and writes
through a tensor's numpy view (``x.numpy()[i] = v``, trace/numpy_writes.py).

Before, the trace did not see them: ``x.set_(y); return x * 2`` recorded ``x * 2`` on the caller's old ``x`` (a
Float(3) program for a Float(2) tensor) and a traced call returned the old tensor doubled, leaving ``x`` as it was,
silently (eager: ``y`` doubled, ``x`` now ``y``'s storage). Now the trace refuses at the line, with the opt-out.
"""
from __future__ import annotations

import inspect
import warnings

import numpy as np
import pytest
import torch

import tracejit
from trace_testlib import marker_lines

LINE = marker_lines(inspect.getsourcefile(inspect.currentframe()))
FILE = inspect.getsourcefile(inspect.currentframe())


def set_storage(x, y):                   # re-point a buffer at new data (old checkpoint loaders, ring buffers)
    x.set_(y)  # @set_storage
    return x * 2


def swap(x, y):
    torch.utils.swap_tensors(x, y)  # @swap
    return x * 2


@pytest.mark.parametrize("fn,marker", [(set_storage, "set_storage"), (swap, "swap")])
def test_an_unseen_write_is_refused_at_its_line(fn, marker):
    example, new = (torch.zeros(3), torch.ones(2)), (torch.zeros(3), torch.ones(4) * 3)
    eager = fn(*(t.clone() for t in new))
    assert eager.shape != example[0].shape   # the write moves the answer
    with pytest.raises(tracejit.TraceError) as err:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            tracejit.trace(fn, tuple(t.clone() for t in example), check_trace=False)
    assert f"{FILE}:{LINE(marker)}:" in str(err.value), str(err.value)
    assert "allow_frozen_python_state=True" in str(err.value)


def test_set_outside_a_trace_is_torch_s_own():
    x = torch.zeros(3)
    tracejit.trace(lambda a: a + 1, (torch.ones(2),))
    x.set_(torch.ones(2))   # the stand-in is gone after the trace
    assert x.shape == (2,) and torch.Tensor.set_ is torch._C.TensorBase.set_


def numpy_write(x):                      # clip outliers in place through numpy (preprocessing code in forward)
    a = x.numpy()  # @numpy_write
    a[a > 1] = 1.0
    return x * 2


def asarray_write(x):
    np.asarray(x)[0] = 0.0  # @asarray_write
    return x + 1


@pytest.mark.parametrize("fn,marker", [(numpy_write, "numpy_write"), (asarray_write, "asarray_write")])
def test_a_write_through_a_numpy_view_is_refused_at_the_read(fn, marker):
    """Eager changes the caller's tensor and the answer; the program would skip the write (before: silently)."""
    new = torch.tensor([0.5, 3.0, 2.0])
    kept = new.clone()
    fn(new)
    assert not torch.equal(new, kept)   # eager wrote into the caller's tensor
    with pytest.raises(tracejit.TraceError) as err:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            tracejit.trace(fn, (torch.tensor([0.5, 3.0, 0.2]),), check_trace=False)
    assert f"{FILE}:{LINE(marker)}:" in str(err.value), str(err.value)


def test_a_numpy_read_without_a_write_traces():
    def scale(x):
        return x * float(x.numpy().max())
    traced = tracejit.trace(scale, (torch.tensor([1.0, 2.0]),), check_trace=False)
    x = torch.tensor([1.0, 2.0])
    torch.testing.assert_close(traced(x), scale(x))
