"""nn.LSTM, nn.GRU and nn.RNN export to ONNX (export/recurrent.py) and give eager's answers in onnxruntime and
OpenVINO at batch sizes and lengths the trace did not see. Before, an LSTM or GRU called without a state
(``lstm(x)``: timm's Sequencer2D) failed at export ("Unsupported attribute type: SymbolicDim") and an RNN had
no conversion at all; found by bench/serve_corpus19.py."""
from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
import torch
from torch import nn

import tracejit

from backend_check import assert_backends_match

pytestmark = pytest.mark.filterwarnings("ignore::tracejit.TracerWarning")


def _x(*shape, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


class Recurrent(nn.Module):
    """The module's output sequence and final states, as a tuple of tensors."""

    def __init__(self, rnn):
        super().__init__()
        self.rnn = rnn

    def forward(self, x):
        out, state = self.rnn(x)
        return (out, *state) if isinstance(state, tuple) else (out, state)


def _module(cls, **options):
    torch.manual_seed(0)
    return Recurrent(cls(6, 5, **options)).eval()


CASES = {
    "lstm_two_layers_batch_first": (nn.LSTM, dict(num_layers=2, batch_first=True)),
    "lstm_bidirectional": (nn.LSTM, dict(bidirectional=True)),
    "lstm_no_bias": (nn.LSTM, dict(bias=False, batch_first=True)),
    "gru_two_layers_bidirectional": (nn.GRU, dict(num_layers=2, bidirectional=True, batch_first=True)),
    "gru_no_bias": (nn.GRU, dict(bias=False)),
    "rnn_tanh": (nn.RNN, dict(num_layers=2, batch_first=True)),
    "rnn_relu_bidirectional": (nn.RNN, dict(nonlinearity="relu", bidirectional=True)),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_recurrent_module_gives_eager_answers_on_new_shapes(name):
    cls, options = CASES[name]
    model = _module(cls, **options)
    first = options.get("batch_first", False)
    shape = (lambda b, t: (b, t, 6)) if first else (lambda b, t: (t, b, 6))
    new = [(_x(*shape(2, 4), seed=1),), (_x(*shape(3, 9), seed=2),)]
    assert_backends_match(model, (_x(*shape(1, 7)),), new, name, rtol=1e-5, atol=1e-6)


def test_exported_lstm_file_runs_at_another_batch_and_length():
    model = _module(nn.LSTM, num_layers=2, batch_first=True)
    with torch.no_grad():
        traced = tracejit.trace(model, (_x(1, 7, 6),))
        x = _x(3, 11, 6, seed=3)
        want = model(x)
    session = ort.InferenceSession(tracejit.export_onnx(traced).SerializeToString(),
                                   providers=["CPUExecutionProvider"])
    for got, w in zip(session.run(None, {"x": x.numpy()}), want):
        np.testing.assert_allclose(got, w.numpy(), rtol=1e-5, atol=1e-6)


def test_lstm_with_a_projection_is_refused_naming_the_line():
    model = _module(nn.LSTM, proj_size=3)
    with torch.no_grad():
        traced = tracejit.trace(model, (_x(7, 1, 6),))
    with pytest.raises(tracejit.ExportError, match="proj_size.*traced at .*rnn.py"):
        tracejit.export_onnx(traced)
