"""Seeding inside forward, side by side with torch.jit.trace (harness.py; issue #20 item 2).

torch.jit.trace does not record ``torch.manual_seed`` or a ``torch.Generator`` made inside forward: its
program draws on from wherever the caller's generator (or the one captured generator) stands, so a second
call gives other numbers than eager's, or it cannot trace the pattern. tracejit records them as the program's
own RNG (trace/rng_record.py) and gives eager's numbers on every call: docs/COMPAT.md, `rng-recorded`.
"""
from pathlib import Path

import pytest
import torch
from torch import nn

from harness import Case, compare, eager_moves, observe, same_call


def _seeded_noise(x):                  # diffusion samplers: torch.manual_seed inside forward
    torch.manual_seed(1234)
    return x + torch.randn(x.shape)


def _own_generator(x):                 # a sampler making its own seeded generator
    g = torch.Generator().manual_seed(7)
    return x + torch.rand(x.shape, generator=g)


class _SeededDropout(nn.Module):       # reproducible dropout masks in training
    def __init__(self):
        super().__init__()
        self.drop = nn.Dropout(0.5)

    def forward(self, x):
        torch.manual_seed(3)
        return self.drop(x) * 2


def R(*shape):
    return torch.randn(*shape)


CASES = [
    Case("seeded_noise", _seeded_noise, R(4), [(R(4),), (R(6),)], trace_kwargs={"check_trace": False},
         deliberate="rng-recorded", source="diffusion samplers (torch.manual_seed in forward)"),
    Case("own_generator", _own_generator, R(4), [(R(4),), (R(3),)], trace_kwargs={"check_trace": False},
         deliberate="rng-recorded", source="a torch.Generator made and seeded in forward"),
    Case("seeded_dropout", lambda: _SeededDropout().train(), R(8), [(R(8),), (R(16),)], module=True,
         trace_kwargs={"check_trace": False}, deliberate="rng-recorded", source="seeded training dropout"),
]


@pytest.mark.parametrize("case", CASES, ids=str)
def test_rng_case_against_torch_jit_trace(case):
    compare(case)


@pytest.mark.parametrize("case", CASES, ids=str)
def test_torch_jit_trace_does_not_reseed(case):
    assert eager_moves(case), case.name
    ref, eager = observe(case, "torch"), observe(case, "eager")
    assert ref.trace_error is not None or any(not same_call(r, e) for r, e in zip(ref.calls, eager.calls))


def test_the_difference_is_documented():
    text = (Path(__file__).resolve().parents[2] / "docs" / "COMPAT.md").read_text()
    assert "`rng-recorded`" in text
