"""An attribute forward writes before any read in the call: scratch state, not state (hunt27; trace/first_access.py).

transformers' FunnelModel sets ``self.seq_len = inputs_embeds.size(1)`` on every call and reads it later in the
same call: the trace was refused (``forward assigned attribute seq_len``), so the model could not be served.
Its value before a call never reaches the output, so the trace is valid on every call: now accepted (a ledger entry),
and the program serves new lengths with eager's answer. Which access comes first is SEEN while tracing: a read
before the write, in the same method or another, still refuses (the program would freeze the value read).
The program does not replay the write: after a call of the program the attribute holds the value the last
trace (or eager call) left, as the ledger entry says.
"""
from __future__ import annotations

import io
import threading
import warnings

import pytest
import torch
from torch import nn

import tracejit


class Structure(nn.Module):
    """Funnel's FunnelAttentionStructure, reduced: the length set from the input, read by a later method."""

    def __init__(self):
        super().__init__()
        self.seq_len = None
        self.scale = 0.5

    def init_inputs(self, h):
        self.seq_len = h.size(1)   # written before any read: scratch
        self.mult = 1
        return self.positions(h)

    def positions(self, h):
        self.mult *= 2             # read after this call's write: the same call's value
        return torch.arange(self.seq_len, dtype=h.dtype)[None, :, None] * self.scale * self.mult


class Funnelish(nn.Module):
    def __init__(self):
        super().__init__()
        self.structure = Structure()
        self.proj = nn.Linear(4, 4)

    def forward(self, x):
        pos = self.structure.init_inputs(x)
        return self.proj(x + pos) * self.structure.seq_len


class ReadFirst(nn.Module):
    """Reads the attribute before writing it: the output depends on the previous call."""

    def __init__(self):
        super().__init__()
        self.last = 3

    def forward(self, x):
        out = x * self.last
        self.last = x.size(1)
        return out


class ReadInAnotherMethod(nn.Module):
    """The read comes first, in another method (a bytecode look at the writing method alone sees a write first)."""

    def __init__(self):
        super().__init__()
        self.n = 3

    def scale(self, x):
        return x * self.n

    def forward(self, x):
        out = self.scale(x)
        self.n = x.size(1)
        return out + self.n


def _first(out):
    return out["last_hidden_state"] if isinstance(out, dict) else out[0]


def _quiet(fn, *args, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return fn(*args, **kwargs)


def test_an_attribute_written_before_any_read_serves_new_lengths():
    model = Funnelish().eval()
    model(torch.randn(2, 5, 4))   # the attribute exists before the trace (an eager call): it is not a lazy set-up
    traced = _quiet(tracejit.trace, model, (torch.randn(2, 5, 4),))
    assert any("before any read" in e.message for e in traced.ledger)
    optimized = tracejit.optimize_for_inference(_quiet(tracejit.trace, model, (torch.randn(2, 5, 4),)))
    buf = io.BytesIO()
    tracejit.save(traced, buf)
    loaded = tracejit.load(io.BytesIO(buf.getvalue()))
    for n in (7, 3, 5):
        x = torch.randn(2, n, 4)
        expected = model(x)
        for program in (traced, optimized, loaded):
            torch.testing.assert_close(_quiet(program, x), expected)
    assert type(model.structure.seq_len) is int   # the trace's traced size is not left in the attribute


@pytest.mark.parametrize("cls", [ReadFirst, ReadInAnotherMethod])
def test_an_attribute_read_before_it_is_written_stays_refused(cls):
    model = cls().eval()
    with pytest.raises(tracejit.TraceError, match="attribute `(last|n)`"):
        _quiet(tracejit.trace, model, (torch.randn(2, 5),))


def test_funnel_model_serves_new_lengths():
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    cfg = transformers.FunnelConfig(vocab_size=50, d_model=16, n_head=2, d_head=8, d_inner=32, block_sizes=[1, 1],
                                    num_decoder_layers=1)
    model = transformers.FunnelModel(cfg).eval()
    model(torch.randint(0, 50, (1, 8)))   # warm: seq_len holds 8 before the trace
    traced = _quiet(tracejit.trace, model, (torch.randint(0, 50, (1, 8)),), strict=False)
    jit = _quiet(torch.jit.trace, model, (torch.randint(0, 50, (1, 8)),), strict=False)
    for n in (12, 5):
        ids = torch.randint(0, 50, (1, n))
        expected = model(ids)[0]
        torch.testing.assert_close(_quiet(traced, ids)[0], expected)
        assert model.encoder.attention_structure.seq_len == n   # eager's call left its own length
        if n == 12:   # torch.jit.trace keeps the example's length: a shape error, or a silent wrong answer
            try:
                assert not torch.allclose(_first(jit(ids)), expected, atol=1e-5)
            except RuntimeError:
                pass



def test_the_watch_is_taken_off_the_classes_and_other_threads_run_eager_meanwhile():
    """The descriptors live on the classes only while a recording runs (several at once: counted), and pass every
    read and write through for threads that are not tracing."""
    errors: list = []

    def trace_it():
        try:
            model = Funnelish().eval()
            model(torch.randn(2, 5, 4))
            traced = _quiet(tracejit.trace, model, (torch.randn(2, 5, 4),))
            x = torch.randn(2, 6, 4)
            torch.testing.assert_close(_quiet(traced, x), model(x))
        except Exception as e:   # noqa: BLE001  (reported below)
            errors.append(e)

    def eager():
        try:
            model = Funnelish().eval()
            for n in range(3, 40):
                x = torch.randn(1, n, 4)
                model(x)
                assert model.structure.seq_len == n and model.structure.mult == 2
        except Exception as e:   # noqa: BLE001
            errors.append(e)

    threads = [threading.Thread(target=trace_it) for _ in range(3)] + [threading.Thread(target=eager)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    assert "seq_len" not in vars(Structure) and "mult" not in vars(Structure)
