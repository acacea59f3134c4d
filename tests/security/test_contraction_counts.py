"""A loaded program's work count (support/call_budget.work_count at a call, serialize/traced_work at load) takes an
op's tensor arguments as their broadcast, except for an op whose size rule counts its multiply-adds (a convolution,
a matmul): a 1x1 convolution's input ``[1, C, H, W]`` and weight ``[O, C, 1, 1]`` do not broadcast together.
Counted so, timm's efficientvit_l1 claimed 2.4e14 multiply-adds for its 64-px example and every load was refused
(breadth27); a decoder from a small latent below is the same pattern, small enough for the suite."""
from __future__ import annotations

import io

import pytest
import torch
from torch import nn

import tracejit
from tracejit.serialize import budget_plan, traced_work
from tracejit.support import call_budget


class LatentDecoder(nn.Module):
    """A VAE-style decoder: a 4-channel 8x8 latent, upsampled 8x, then eight 1x1 convolutions of 256 channels."""

    def __init__(self):
        super().__init__()
        self.stem = nn.Conv2d(4, 256, 3, padding=1)
        self.mix = nn.ModuleList(nn.Conv2d(256, 256, 1) for _ in range(8))
        self.out = nn.Conv2d(256, 3, 1)

    def forward(self, z):
        h = nn.functional.interpolate(self.stem(z), scale_factor=8.0, mode="nearest")
        for conv in self.mix:
            h = torch.relu(conv(h))
        return self.out(h)


def _loaded(model, example):
    buf = io.BytesIO()
    tracejit.save(tracejit.trace(model, example), buf)
    buf.seek(0)
    return tracejit.load(buf)


def test_a_decoder_from_a_small_latent_loads_and_gives_eagers_answer():
    torch.manual_seed(0)
    model = LatentDecoder().eval()
    loaded = _loaded(model, torch.randn(1, 4, 8, 8))   # before: LoadError, "its traced call would compute ..."
    for z in (torch.randn(1, 4, 8, 8), torch.randn(2, 4, 6, 10)):
        want = model(z)
        assert not torch.equal(want, model(torch.randn_like(z)))   # the latent moves the image
        torch.testing.assert_close(loaded(z), want)


def test_a_convolution_counts_its_largest_tensor_an_elementwise_op_the_broadcast():
    x, w, b = torch.randn(1, 256, 64, 64), torch.randn(256, 256, 1, 1), torch.randn(256)
    assert not budget_plan.broadcasts("aten::conv2d") and not budget_plan.broadcasts("aten::linear")
    assert budget_plan.broadcasts("aten::add.Tensor") and budget_plan.broadcasts("aten::no_such_op")
    assert call_budget.tensor_elements((x, w, b), broadcast=False) == x.numel()
    # what the conv counted before: each dimension's largest size, the bias [256] set against the width
    assert call_budget.tensor_elements((x, w, b)) == 256 * 256 * 64 * 256
    col, row = torch.randn(300, 1), torch.randn(1, 200)
    assert call_budget.tensor_elements((col, row)) == 300 * 200   # [n, 1] + [1, m]: the broadcast stays


def test_the_traced_count_and_the_calls_count_agree_for_a_convolution():
    graph = tracejit.trace(nn.Conv2d(64, 128, 1), torch.randn(1, 64, 32, 32)).graph
    conv = next(n for n in graph.nodes if isinstance(n.op, str) and "conv" in n.op)
    step = budget_plan.node_step(conv)
    outputs = 128 * 32 * 32
    assert traced_work.element_work(conv, step, budget_plan.broadcasts(conv.op)) == step * (64 * 32 * 32 + outputs)


@pytest.mark.parametrize("op", ["aten::conv2d", "aten::matmul", "aten::addmm"])
def test_contractions_have_a_work_rule(op):
    """broadcasts() reads the size rule's flops: an op whose rule lost them would count the broadcast again."""
    assert not budget_plan.broadcasts(op)
