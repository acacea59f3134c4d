"""An attribute the first recording run changed, written again identically by the second run (trace/rewrites.py).

transformers' SwinModel traced fresh with hidden states: its first call sets up output capturing (the trace records
a second call), and every call that sees a small resolution clamps ``self.window_size`` (a 0-d tensor while
tracing). Before session 30 any attribute the first run changed refused the trace. Now it is accepted where the
second run assigns the same value again and what a call would write is that value (a value guard at the line of
the write where it depends on the inputs); anything else is still refused."""
from __future__ import annotations

import copy
import io
import warnings

import pytest
import torch
from torch import nn

import tracejit


def _set_up_once(module: nn.Module) -> None:
    if not hasattr(module, "ready"):   # a first-call set-up: the trace records the call after it
        module.ready = True


class ClampsWindow(nn.Module):
    """Swin's pattern: the window clamped to the input's length on every call that sees a short input. The write is
    in a method of its own, as the read and the write are in transformers' code: the first run's own checks take a
    plain tensor attribute set there for a capture (trace/python_state.py)."""

    def __init__(self, window: int = 4):
        super().__init__()
        self.lin = nn.Linear(8, 8)
        self.window = window

    def forward(self, x):
        _set_up_once(self)
        if x.shape[1] <= self.window:
            self._set_window(torch.tensor(x.shape[1]) if torch.jit.is_tracing() else x.shape[1])
        return self.lin(x) * self.window

    def _set_window(self, n):
        self.window = n


class TracksPeak(nn.Module):
    """Writes a value read from the input's data: the same on the second run, another one at a larger input."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(8, 8)
        self.peak = torch.zeros(())

    def forward(self, x):
        _set_up_once(self)
        self._keep(torch.maximum(self.peak, x.abs().amax()))
        return self.lin(x) / self.peak

    def _keep(self, peak):
        self.peak = peak


class CountsInATensor(nn.Module):
    def __init__(self):
        super().__init__()
        self.count = torch.zeros(())

    def forward(self, x):
        _set_up_once(self)
        self._keep(self.count + 1)
        return x * self.count

    def _keep(self, count):
        self.count = count


class WritesThroughDict(ClampsWindow):
    def forward(self, x):
        _set_up_once(self)
        if x.shape[1] <= self.window:
            vars(self)["window"] = torch.tensor(x.shape[1])   # a write no descriptor sees
        return self.lin(x) * self.window


def _trace(model, example, **kwargs):
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return tracejit.trace(model, example, **kwargs)


def _loaded(traced):
    buf = io.BytesIO()
    tracejit.save(traced, buf)
    buf.seek(0)
    return tracejit.load(buf)


def test_a_clamp_written_again_identically_traces_fresh_and_serves_new_batches():
    torch.manual_seed(0)
    model = ClampsWindow()
    twin = copy.deepcopy(model)
    traced = _trace(model, torch.randn(1, 4, 8))
    loaded = _loaded(traced)
    with torch.no_grad():
        for batch in (3, 5):
            x = torch.randn(batch, 4, 8)
            want = twin(x)
            for program in (traced, loaded):
                torch.testing.assert_close(program(x), want, rtol=0, atol=0)
        # a longer input takes the other branch: the loaded program names the line, the live one traces again
        x = torch.randn(2, 6, 8)
        with pytest.raises(tracejit.GuardError, match="x.shape\\[1\\] <= self.window"):
            loaded(x)
        torch.testing.assert_close(traced(x), twin(x), rtol=0, atol=0)
        # a shorter input writes another window: eager's next call reads it, so the program must not serve it
        x = torch.randn(2, 3, 8)
        with pytest.raises(tracejit.GuardError, match="self.window = n"):
            loaded(x)


def test_a_value_read_from_the_data_is_guarded_at_the_line_of_the_write():
    torch.manual_seed(0)
    model = TracksPeak()
    example = torch.randn(2, 5, 8)
    twin = copy.deepcopy(model)
    traced = _trace(model, example)
    loaded = _loaded(traced)
    with torch.no_grad():
        twin(example)
        quieter = example * 0.5   # (another batch, another length) below the peak: eager writes the same peak
        x = torch.cat([quieter, quieter[:1]])[:, :3]
        torch.testing.assert_close(loaded(x), twin(x), rtol=0, atol=0)
        louder = torch.randn(3, 4, 8) * 10   # a new peak: eager's next call divides by it
        assert louder.abs().amax() > example.abs().amax()
        with pytest.raises(tracejit.GuardError, match="self.peak = peak"):
            loaded(louder)
        # the live program traces again from the state it found, and that run writes another peak: refused
        with pytest.raises(tracejit.TraceError, match="read `peak` of TracksPeak and then wrote another value"):
            traced(louder)


class PeakWithoutSetUp(TracksPeak):
    def forward(self, x):
        self._keep(torch.maximum(self.peak, x.abs().amax()))
        return self.lin(x) / self.peak


def test_a_running_value_kept_in_a_tensor_attribute_is_refused_where_torch_jit_is_silently_wrong():
    """One run, no set-up: the write is in a method of its own, so the bytecode scan of trace/carried_state.py did
    not see the read before it; the trace was accepted and kept dividing by each call's own maximum (0.62 off
    on the second call below). The run's own reads and writes, seen while tracing, refuse it now."""
    torch.manual_seed(0)
    example, louder, quieter = torch.randn(2, 8), torch.randn(2, 8) * 10, torch.randn(2, 8)
    with pytest.raises(tracejit.TraceError, match="test_rewritten_attributes.py:60: forward read `peak`"):
        _trace(PeakWithoutSetUp(), example)
    model = PeakWithoutSetUp()
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        jit = torch.jit.trace(copy.deepcopy(model), example, check_trace=False)
        model(example)
        torch.testing.assert_close(jit(louder), model(louder))
        assert not torch.allclose(jit(quieter), model(quieter))   # the reference is silently wrong here


def test_an_attribute_written_otherwise_or_unguarded_is_still_refused():
    with pytest.raises(tracejit.TraceError, match="'count' of the module changed, and the next run wrote another"):
        _trace(CountsInATensor(), torch.ones(3))
    with pytest.raises(tracejit.TraceError, match="'window' of the module changed, and the next run did not assign"):
        _trace(WritesThroughDict(), torch.randn(1, 4, 8))
    with pytest.raises(tracejit.TraceError, match="'peak' of the module changed.*cannot be checked by value"):
        _trace(TracksPeak(), torch.randn(2, 5, 8), guards="shapes")


class ConvertsItsBuffer(nn.Module):
    """CTRL: ``self.pos_encoding = self.pos_encoding.to(device=..., dtype=...)`` on every call (a no-op in eager:
    ``to`` returns the buffer itself); while tracing the recorder hands back a view, which replaced the buffer and
    refused the trace."""

    def __init__(self):
        super().__init__()
        self.register_buffer("table", torch.randn(16, 8))

    def forward(self, x):
        self.table = self.table.to(device=x.device, dtype=x.dtype)
        return x + self.table[: x.shape[1]]


def test_a_buffer_assigned_a_no_op_conversion_of_itself_stays_the_buffer():
    torch.manual_seed(0)
    model = ConvertsItsBuffer()
    table = model.table
    traced = _trace(model, torch.randn(2, 5, 8))
    assert model.table is table   # eager's state: the same tensor
    loaded = _loaded(traced)
    with torch.no_grad():
        x = torch.randn(3, 9, 8)
        for program in (traced, loaded):
            torch.testing.assert_close(program(x), model(x), rtol=0, atol=0)
        model.table.mul_(2)   # the buffer the program reads is the module's
        torch.testing.assert_close(traced(x), model(x), rtol=0, atol=0)
