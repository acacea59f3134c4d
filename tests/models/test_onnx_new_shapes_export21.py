"""Real models whose exported ONNX model was wrong or failed obscurely on a new shape (bench/serve_corpus19.py),
tiny configs, random weights: onnxruntime gives eager's answer on the new shape, or refuses it with an error
naming the source line the trace relied on (export/guard_checks.py).

- transformers' Mamba (slow path) scans ``for index in range(seq_len)``: the loop is unrolled to the traced
  length; ``seq_len`` is an intermediate's size, so the export pinned no input dim and onnxruntime failed on a
  broadcast "16 by 24" (a scan whose result is not broadcast against the length would answer a wrong number).
"""
from __future__ import annotations

import importlib.util
import warnings

import pytest
import torch
from torch import nn

import tracejit

ort = pytest.importorskip("onnxruntime")
pytestmark = [pytest.mark.filterwarnings("ignore::tracejit.TracerWarning"),
              pytest.mark.skipif(importlib.util.find_spec("transformers") is None, reason="needs transformers")]


class LastHidden(nn.Module):
    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, *args):
        return self.model(*args).last_hidden_state


def _mamba():
    import transformers
    transformers.logging.set_verbosity_error()
    torch.manual_seed(0)
    config = transformers.MambaConfig(vocab_size=1000, hidden_size=64, num_hidden_layers=2, state_size=8,
                                      use_cache=False)
    return LastHidden(transformers.MambaModel(config).eval()).eval()


def _run(proto, *inputs):
    session = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
    feed = {i.name: t.numpy() for i, t in zip(session.get_inputs(), inputs)}
    return [torch.from_numpy(o) for o in session.run(None, feed)]


def test_mamba_onnx_serves_a_new_batch_and_refuses_a_new_length_naming_the_scan_line():
    model = _mamba()
    example = torch.randint(0, 1000, (2, 16))
    with torch.no_grad():
        traced = tracejit.trace(model, (example,))
        proto = tracejit.export_onnx(traced)
        batch = torch.randint(0, 1000, (3, 16))
        torch.testing.assert_close(_run(proto, batch)[0], model(batch), atol=1e-5, rtol=1e-4)
        longer = torch.randint(0, 1000, (2, 24))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            jit = torch.jit.trace(model, (example,), check_trace=False)
        with pytest.raises(RuntimeError):
            jit(longer)   # torch.jit.trace: an error inside the scan
        with pytest.raises(Exception, match=r"tracejit_guard_\d+_failed_at_transformers/models/mamba/"
                                            r"modeling_mamba.py:\d+"):
            _run(proto, longer)
