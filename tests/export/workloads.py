"""Small versions of the bench workloads (bench/bench_peers.py), with inputs of NEW shapes.

Each workload: (module or function, example inputs to trace with, list of new input sets:
other batch sizes / lengths / image sizes).
"""
from __future__ import annotations

import warnings

import torch
import transformers
from torch import nn


def elementwise_chain(x):
    """The bench's 60-op elementwise chain (bench/bench_core.py), 2 repetitions."""
    for _ in range(2):
        x = torch.relu(torch.abs(torch.neg(torch.cos(torch.exp(torch.sigmoid(torch.tanh(torch.sin(x * 1.5) + 0.1)
                                                                                  * 4.0) - 0.5)))))
    return x


def mlp():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 32), nn.ReLU(), nn.Linear(32, 8)).eval()
    return model, (torch.randn(1, 16),), [(torch.randn(5, 16),), (torch.randn(2, 16),)]


def elementwise():
    return elementwise_chain, (torch.randn(16),), [(torch.randn(7),), (torch.randn(33),)]


def transformer_encoder():
    torch.manual_seed(1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        layer = nn.TransformerEncoderLayer(d_model=32, nhead=4, dim_feedforward=64, batch_first=True)
        model = nn.TransformerEncoder(layer, num_layers=2).eval()
    return model, (torch.randn(1, 8, 32),), [(torch.randn(3, 5, 32),), (torch.randn(2, 11, 32),)]


class Pooled(nn.Module):
    """transformers' ResNetModel -> the pooled features (as bench_peers' ResNet-50 workload)."""

    def __init__(self, resnet):
        super().__init__()
        self.resnet = resnet

    def forward(self, pixel_values):
        return self.resnet(pixel_values, return_dict=False)[1]


def resnet_bottleneck():
    """A ResNet-50-like net (bottleneck blocks, stride-2 stages), tiny; batch-norm stats made non-trivial."""
    torch.manual_seed(2)
    cfg = transformers.ResNetConfig(num_channels=3, embedding_size=8, hidden_sizes=[16, 32], depths=[1, 2],
                                    layer_type="bottleneck")
    model = transformers.ResNetModel(cfg)
    for mod in model.modules():
        if isinstance(mod, nn.BatchNorm2d):
            with torch.no_grad():
                mod.running_mean.uniform_(-0.5, 0.5)
                mod.running_var.uniform_(0.5, 1.5)
                mod.weight.uniform_(0.5, 1.5)
                mod.bias.uniform_(-0.2, 0.2)
    model = Pooled(model).eval()
    return model, (torch.randn(1, 3, 32, 32),), [(torch.randn(3, 3, 32, 32),), (torch.randn(2, 3, 48, 40),)]


class BertFirst(nn.Module):
    def __init__(self, bert):
        super().__init__()
        self.bert = bert

    def forward(self, input_ids, attention_mask):
        return self.bert(input_ids=input_ids, attention_mask=attention_mask, return_dict=False)[0]


def bert_tiny():
    torch.manual_seed(3)
    cfg = transformers.BertConfig(vocab_size=50, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                                  intermediate_size=64, max_position_embeddings=64, initializer_range=0.2)
    model = BertFirst(transformers.BertModel(cfg)).eval()

    def batch(b, n, pad=0):
        mask = torch.ones(b, n, dtype=torch.long)
        if pad:
            mask[0, n - pad:] = 0
        return torch.randint(1, 50, (b, n)), mask
    return model, batch(1, 8), [batch(3, 13, pad=4), batch(2, 5, pad=2)]


WORKLOADS = {"mlp": mlp, "elementwise": elementwise, "transformer_encoder": transformer_encoder,
             "resnet_bottleneck": resnet_bottleneck, "bert_tiny": bert_tiny}


def as_tuple(out):
    return out if isinstance(out, tuple) else (out,)


def assert_close(actual, expected, what=""):
    actual, expected = as_tuple(actual), as_tuple(expected)
    assert len(actual) == len(expected), what
    for i, (a, e) in enumerate(zip(actual, expected)):
        torch.testing.assert_close(a, e, rtol=1e-4, atol=1e-4, msg=lambda m, i=i: f"{what}: output {i}: {m}")
