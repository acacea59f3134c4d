"""transformers' Longformer on the onnxruntime backend (issue #25, breadth27). Its attention chunks the sequence with
``as_strided`` and strides read from ``x.stride()``, and decides whether any token has global attention with
``is_index_global_attn.flatten().any().item()`` (modeling_longformer.py ~1175), a real data dependence on
``attention_mask``. Before: ``optimize_for_inference(backend="onnxruntime")`` refused it (ExportError: "the trace
relied on tensor values ('stride' gave [16, 512, 64, 1])"), and the export wrote ``x.where(mask, y)`` with the
data as the condition. Now the backend builds; onnxruntime answers the traced shape; the strides of the value
chunks depend on the length (``padded_value.stride()[0]``), so another length fails the stride guard, checked on
meta tensors before the run, and the traced program answers it (eager's answer); another global-attention mask
fails the model's guard output and is handed over too. torch.jit.trace, side by side, answers another length wrong.
"""
from __future__ import annotations

import importlib.util
import warnings

import pytest
import torch

import tracejit
from tracejit.export.errors import ExportError

pytestmark = [pytest.mark.filterwarnings("ignore::tracejit.TracerWarning"),
              pytest.mark.skipif(importlib.util.find_spec("transformers") is None, reason="needs transformers"),
              pytest.mark.skipif(importlib.util.find_spec("onnxruntime") is None, reason="needs onnxruntime")]


class Longformer(torch.nn.Module):
    def __init__(self):
        super().__init__()
        import transformers
        transformers.logging.set_verbosity_error()
        torch.manual_seed(0)
        self.m = transformers.LongformerModel(transformers.LongformerConfig(
            attention_window=8, vocab_size=1000, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
            intermediate_size=128, max_position_embeddings=64)).eval()

    def forward(self, ids, mask):
        return self.m(input_ids=ids, attention_mask=mask, return_dict=False)[0]


def _inputs(batch, length, seed, global_first=False):
    g = torch.Generator().manual_seed(seed)
    mask = torch.ones(batch, length, dtype=torch.long)
    mask[:, -3:] = 0
    if global_first:
        mask[:, 0] = 2
    return torch.randint(0, 1000, (batch, length), generator=g), mask


def test_longformer_builds_on_onnxruntime_and_answers_as_eager():
    model = Longformer().eval()
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        traced = tracejit.trace(model, _inputs(1, 16, 0))
        jit = torch.jit.trace(model, _inputs(1, 16, 0), check_trace=False)
        fast = tracejit.optimize_for_inference(traced, backend="onnxruntime")
        x = _inputs(1, 16, 1)
        torch.testing.assert_close(fast(*x), model(*x), rtol=1e-5, atol=1e-5)
        assert fast.handed_over == 0   # onnxruntime's answer
        for x in (_inputs(1, 24, 2), _inputs(1, 16, 3, global_first=True)):
            want = model(*x)
            torch.testing.assert_close(fast(*x), want, rtol=1e-5, atol=1e-5)
        assert fast.handed_over == 2   # another length, another global mask: the traced program's answers
        x = _inputs(1, 24, 2)
        assert (jit(*x) - model(*x)).abs().max() > 1e-3   # torch.jit.trace: silently another answer


def test_longformer_raw_export_names_the_data_dependence():
    traced = tracejit.trace(Longformer().eval(), _inputs(1, 16, 0))
    with pytest.raises(ExportError, match=r"any\(\)\.item\(\)`, which gave False, computed from input 'mask'"):
        tracejit.export_onnx(traced)
