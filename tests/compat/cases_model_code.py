"""Differential cases: functions from modeling code (transformers attention, masks, rotary and position
embeddings; torchvision box ops and transforms; normalization and pooling helpers)."""
import math
import random
import time

import torch
import torch.nn.functional as F
from torch import nn

import tracejit
from harness import Case, Inputs

_in = Inputs(5678)
R, P, I, new2, elementwise, _g = _in.R, _in.P, _in.I, _in.new2, _in.elementwise, _in.g


def _attention(q, k, v):
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    return scores.softmax(-1) @ v

def _masked_attention(q, k, mask):
    scores = torch.matmul(q, k.transpose(-1, -2)) / q.shape[-1] ** 0.5
    scores = scores.masked_fill(mask == 0, float("-inf"))
    return F.softmax(scores, dim=-1)

def _rotate_half(x):
    x1 = x[..., : x.shape[-1] // 2]
    x2 = x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)

def _rotary(q, cos, sin):
    return q * cos + _rotate_half(q) * sin

def _gelu_new(x):
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))))

def _causal_mask(x):
    n = x.size(1)
    mask = torch.tril(torch.ones(n, n, dtype=torch.bool))
    return x.masked_fill(~mask, 0.0)

def _position_ids(input_ids):
    seq = input_ids.size(1)
    return torch.arange(seq, dtype=torch.long).unsqueeze(0).expand_as(input_ids) + input_ids

def _split_heads(x):
    b, t, c = x.size()
    return x.view(b, t, 2, c // 2).transpose(1, 2)

def _merge_heads(x):
    b, h, t, d = x.size()
    return x.transpose(1, 2).contiguous().view(b, t, h * d)

def _box_area(boxes):
    return (boxes[:, 2] - boxes[:, 0]) * (boxes[:, 3] - boxes[:, 1])

def _box_iou(a, b):
    area1, area2 = _box_area(a), _box_area(b)
    lt = torch.max(a[:, None, :2], b[:, :2])
    rb = torch.min(a[:, None, 2:], b[:, 2:])
    wh = (rb - lt).clamp(min=0)
    inter = wh[:, :, 0] * wh[:, :, 1]
    return inter / (area1[:, None] + area2 - inter)

def _boxes(n):
    xy = torch.rand(n, 2, generator=_g) * 10
    return torch.cat([xy, xy + torch.rand(n, 2, generator=_g) * 5 + 0.5], 1)

def _label_smoothing(logits, target):
    logp = logits.log_softmax(-1)
    nll = -logp.gather(-1, target.unsqueeze(-1)).squeeze(-1)
    return (0.9 * nll - 0.1 * logp.mean(-1)).mean()

def _normalize_image(img):
    mean = img.new_tensor([0.485, 0.456, 0.406]).view(-1, 1, 1)
    std = img.new_tensor([0.229, 0.224, 0.225]).view(-1, 1, 1)
    return (img - mean) / std

def _pad_to_multiple(x):
    pad = (8 - x.size(-1) % 8) % 8
    return F.pad(x, (0, pad))

def _interp_like(x, ref):
    return F.interpolate(x, size=ref.shape[-2:], mode="bilinear", align_corners=False)

def _layer_norm_manual(x):
    mu = x.mean(-1, keepdim=True)
    var = x.var(-1, keepdim=True, unbiased=False)
    return (x - mu) / torch.sqrt(var + 1e-5)

def _rms_norm(x):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6)

def _expand_mask(mask):
    b, s = mask.shape
    expanded = mask[:, None, None, :].expand(b, 1, s, s).to(torch.float32)
    return (1.0 - expanded) * torch.finfo(torch.float32).min

def _sinusoidal(pos):
    half = 4
    freqs = torch.exp(-math.log(10000.0) * torch.arange(half, dtype=torch.float32) / half)
    args = pos[:, None].float() * freqs[None]
    return torch.cat([args.sin(), args.cos()], dim=-1)

def _scale_by_head_dim(q):
    return q / q.shape[-1] ** 0.5   # torch records the pow of the size; tracejit guards the size and retraces


def _masked_mean(x, mask):
    m = mask.unsqueeze(-1).to(x.dtype)
    return (x * m).sum(1) / m.sum(1).clamp(min=1e-9)


class _StepCounter(nn.Module):
    def __init__(self):
        super().__init__()
        self.updates = 0

    def forward(self, x):
        self.updates += 1
        return x * self.updates


class _ListMemory(nn.Module):
    def __init__(self):
        super().__init__()
        self.mems = []

    def forward(self, x):
        self.mems.append(x.detach())
        return x + len(self.mems)


def _python_random_scale(x):
    return x * (1.0 + random.random())


def _clock_offset(x):
    return x + time.time() % 1.0


CASES = [
    Case("size_in_float_math_other_size", _scale_by_head_dim, (R(2, 4),), [(R(2, 9),), (R(3, 16),)],
         source="attention scaling by the head size", deliberate="warns-size-float-math"),
    elementwise("gelu_new_tanh", _gelu_new,
                                                                          "transformers activations.py"),
    elementwise("layer_norm_manual", _layer_norm_manual, "BERT LayerNorm (TF style)"),
    elementwise("rms_norm", _rms_norm, "transformers LlamaRMSNorm"),
    elementwise("pad_to_multiple", _pad_to_multiple,
                                                                    "transformers padding helpers"),
    Case("causal_mask_tril", _causal_mask, (R(2, 4, 4),), new2([(3, 6, 6)], [(1, 2, 2)]), source="GPT-2 causal mask"),
    Case("attention_sdpa_manual", _attention, (R(2, 3, 4), R(2, 5, 4), R(2, 5, 6)),
         new2([(1, 2, 4), (1, 7, 4), (1, 7, 6)], [(3, 4, 8), (3, 2, 8), (3, 2, 3)]), grad=True,
         source="torch tutorial: transformer from scratch", deliberate="guard-gives-eager"),
    Case("masked_attention_probs", _masked_attention, (R(2, 3, 4), R(2, 3, 4), I(2, 2, 3, 3)),
         [(R(1, 5, 4), R(1, 5, 4), I(2, 1, 5, 5)), (R(3, 2, 4), R(3, 2, 4), torch.ones(3, 2, 2))],
         source="annotated transformer", deliberate="warns-size-float-math"),
    Case("rotary_embedding", _rotary, (R(2, 4, 8), R(4, 8), R(4, 8)),
         new2([(1, 6, 8), (6, 8), (6, 8)], [(3, 2, 4), (2, 4), (2, 4)]), grad=True,
         source="transformers apply_rotary_pos_emb"),
    Case("split_heads", _split_heads, (R(2, 3, 8),), new2([(1, 5, 4)], [(4, 2, 6)]), source="GPT-2 split_heads"),
    Case("merge_heads", _merge_heads, (R(2, 2, 3, 4),), new2([(1, 3, 5, 2)], [(3, 1, 2, 6)]),
         source="GPT-2 merge_heads"),
    Case("position_ids_arange", _position_ids, (I(100, 2, 5),), [(I(100, 3, 7),), (I(100, 1, 2),)],
         source="transformers position ids"),
    Case("expand_attention_mask", _expand_mask, (I(2, 2, 4),), [(I(2, 3, 6),), (torch.ones(1, 2, dtype=torch.long),)],
         source="transformers _expand_mask"),
    Case("sinusoidal_positions", _sinusoidal, (I(50, 5),), [(I(50, 9),), (I(50, 2),)],
         source="diffusion timestep embedding"),
    Case("box_iou", _box_iou, (_boxes(3), _boxes(4)), [(_boxes(5), _boxes(2)), (_boxes(1), _boxes(6))],
         source="torchvision.ops.box_iou"),
    Case("box_area", _box_area, (_boxes(3),), [(_boxes(6),), (_boxes(1),)], source="torchvision.ops.box_area"),
    Case("label_smoothing_loss", _label_smoothing, (R(4, 5), I(5, 4)), [(R(6, 5), I(5, 6)), (R(2, 5), I(5, 2))],
         grad=True, source="fairseq label smoothed cross entropy"),
    Case("normalize_image", _normalize_image, (P(3, 4, 4),), [(P(3, 6, 5),), (P(3, 2, 2),)],
         source="torchvision transforms.Normalize"),
    Case("interpolate_like", _interp_like, (R(1, 2, 4, 4), R(1, 1, 8, 6)),
         [(R(2, 2, 3, 3), R(1, 1, 5, 7)), (R(1, 2, 6, 6), R(1, 1, 2, 2))], source="FPN upsample to lateral size"),
    Case("masked_mean_pooling", _masked_mean, (R(2, 3, 4), I(2, 2, 3)),
         [(R(3, 5, 4), I(2, 3, 5)), (R(1, 2, 4), torch.ones(1, 2, dtype=torch.long))],
         source="sentence-transformers mean pooling"),
    # issue 20, item 2: what forward does in Python; torch's program keeps the trace-time outcome
    Case("python_step_counter", lambda: _StepCounter(), R(2, 4), [(R(2, 4),), (R(3, 4),)], module=True,
         trace_kwargs={"check_trace": False}, deliberate="python-state-refused", refuses=tracejit.TraceError,
         source="fairseq / timm num_updates"),
    Case("python_list_memory", lambda: _ListMemory(), R(2, 4), [(R(2, 4),), (R(2, 4),)], module=True,
         trace_kwargs={"check_trace": False}, deliberate="python-state-refused", refuses=tracejit.TraceError,
         source="Transformer-XL style mems"),
    Case("python_random_scale", _python_random_scale, R(4), [(R(4),), (R(4),)],
         trace_kwargs={"check_trace": False}, deliberate="python-state-refused", refuses=tracejit.TraceError,
         source="LayerDrop with random"),
    Case("clock_offset", _clock_offset, R(4), [(R(4),), (R(4),)],
         trace_kwargs={"check_trace": False}, deliberate="python-state-refused", refuses=tracejit.TraceError,
         source="a time feature"),
]

