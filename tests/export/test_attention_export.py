"""scaled_dot_product_attention exported to ONNX (export/attention.py): eager's and torch.jit's
trace's answers on new shapes in onnxruntime and OpenVINO, including rows a mask hides entirely
(eager gives zeros; torch_lib's conversion gave the mean of the values, or NaN)."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
import transformers

import tracejit
from tracejit.export import ExportError

from backend_check import assert_backends_match

pytestmark = pytest.mark.filterwarnings("ignore::tracejit.TracerWarning")

def _qkv(batch=2, heads=4, length=6, source=7, head=8, kv_heads=None, seed=0):
    g = torch.Generator().manual_seed(seed)
    kv = kv_heads or heads
    return (torch.randn(batch, heads, length, head, generator=g), torch.randn(batch, kv, source, head, generator=g),
            torch.randn(batch, kv, source, head, generator=g))


def _bool_mask(batch, length, source, hidden_row=1, seed=0):
    g = torch.Generator().manual_seed(seed)
    mask = torch.rand(batch, 1, length, source, generator=g) > 0.4
    mask[..., 0] = True
    mask[0, :, hidden_row, :] = False   # a query that may see no key
    return mask


def _float_mask(batch, length, source, fill=float("-inf"), seed=0):
    bias = torch.where(_bool_mask(batch, length, source, seed=seed), 0.0, fill)
    return bias + torch.randn(bias.shape, generator=torch.Generator().manual_seed(seed)) * 0.1


def test_a_bool_mask_hiding_a_whole_row_gives_zeros_there_as_eager():
    def f(q, k, v, mask):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    q, k, v = _qkv()
    eager = f(q, k, v, _bool_mask(2, 6, 7))
    assert eager[0, :, 1].abs().max() == 0 and eager[1, :, 1].abs().max() > 0   # the case is real
    new = [(*_qkv(3, 4, 9, 11, seed=1), _bool_mask(3, 9, 11, hidden_row=8, seed=1)),
           (*_qkv(1, 4, 2, 3, seed=2), _bool_mask(1, 2, 3, hidden_row=0, seed=2))]
    assert_backends_match(f, (q, k, v, _bool_mask(2, 6, 7)), new, "bool mask")


@pytest.mark.parametrize("fill", [float("-inf"), torch.finfo(torch.float32).min], ids=["-inf", "finfo.min"])
def test_a_float_mask_gives_eager_answers_for_hidden_rows(fill):
    """-inf over a whole row: zeros, as eager; the dtype's minimum over a row: eager's even weights."""
    def f(q, k, v, bias):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=bias)
    q, k, v = _qkv()
    new = [(*_qkv(3, 4, 9, 11, seed=1), _float_mask(3, 9, 11, fill, seed=1))]
    assert_backends_match(f, (q, k, v, _float_mask(2, 6, 7, fill)), new, f"float mask {fill}")


def test_no_mask_with_an_explicit_scale_and_new_lengths():
    def f(q, k, v):
        return F.scaled_dot_product_attention(q, k, v, scale=0.3)
    assert_backends_match(f, _qkv(), [_qkv(1, 4, 11, 3, seed=1), _qkv(3, 4, 1, 20, seed=2)], "scale=0.3")


def test_three_dimensional_inputs_and_a_shared_two_dimensional_mask():
    def f(q, k, v, mask):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)

    def case(b, n, s, seed):
        q, k, v = (t[:, 0] for t in _qkv(b, 1, n, s, seed=seed))
        return q, k, v, _bool_mask(1, n, s, hidden_row=n - 1, seed=seed)[0, 0]
    assert_backends_match(f, case(2, 5, 6, 0), [case(3, 8, 4, 1)], "rank 3")


def test_is_causal_on_new_lengths():
    def f(q, k, v):
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)
    assert_backends_match(f, _qkv(length=6, source=6), [_qkv(1, 4, 9, 9, seed=1), _qkv(2, 4, 5, 8, seed=2)], "is_causal")


def test_grouped_query_attention():
    def f(q, k, v):
        return F.scaled_dot_product_attention(q, k, v, enable_gqa=True)
    assert_backends_match(f, _qkv(kv_heads=2), [_qkv(3, 4, 9, 5, kv_heads=2, seed=1)], "enable_gqa")


def test_dropout_is_refused_with_the_op_and_line():
    def f(q, k, v):
        return F.scaled_dot_product_attention(q, k, v, dropout_p=0.5)   # the refused line
    traced = tracejit.trace(f, _qkv(), check_trace=False)
    with pytest.raises(ExportError, match=r"dropout_p=0.5.*eager drops at random") as info:
        tracejit.export_onnx(traced)
    assert f"test_attention_export.py:{f.__code__.co_firstlineno + 1}" in str(info.value)


class FirstOutput(torch.nn.Module):
    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, ids, mask):
        return self.model(input_ids=ids, attention_mask=mask)[0]


def test_bert_with_a_sequence_of_padding_only():
    """A batch row whose attention mask is all zeros: every query of it sees no key."""
    torch.manual_seed(0)
    cfg = transformers.BertConfig(vocab_size=60, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                                  intermediate_size=64, max_position_embeddings=64, return_dict=False)
    f = FirstOutput(transformers.BertModel(cfg)).eval()

    def batch(b, n, seed):
        g = torch.Generator().manual_seed(seed)
        mask = torch.ones(b, n, dtype=torch.long)
        mask[0] = 0
        mask[-1, n // 2:] = 0
        return torch.randint(1, 60, (b, n), generator=g), mask
    assert_backends_match(f, batch(2, 8, 0), [batch(3, 13, 1)], "BERT with an all-padding row")
