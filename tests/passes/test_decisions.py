"""passes/decisions.py: a program that decides on values its weights compute (a threshold, a rounding, a top-k, a
cast to integers, a value read by Python) is optimized with the passes that keep eager's arithmetic only, and
answers eager's bits; a smooth program gets every pass."""
from __future__ import annotations

import pytest
import torch
from torch import nn

import tracejit
from tracejit.passes.decisions import EXACT_PASSES, decision_on_computed_values
from tracejit.backends.torch_program import freeze

pytestmark = pytest.mark.filterwarnings("ignore::tracejit.TracerWarning")


class Backbone(nn.Module):
    """conv + batch norm (random statistics: folding them moves the rounding) + relu, then a linear."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.conv = nn.Conv2d(3, 16, 3, padding=1, bias=False)
        self.bn = nn.BatchNorm2d(16)
        with torch.no_grad():
            self.bn.running_mean.uniform_(-0.5, 0.5)
            self.bn.running_var.uniform_(0.5, 2.0)
            self.bn.weight.uniform_(0.5, 1.5)
        self.head = nn.Linear(16, 8)

    def features(self, x):
        return self.head(torch.relu(self.bn(self.conv(x))).mean((2, 3)))


class Scores(Backbone):
    def forward(self, x):
        return self.features(x)


class Threshold(Backbone):
    def forward(self, x):
        s = self.features(x)
        return s, s > 0.1


class TopK(Backbone):
    def forward(self, x):
        s = self.features(x)
        values, index = s.topk(3, dim=1)
        return values, index


class Rounded(Backbone):
    def forward(self, x):
        s = self.features(x)
        return s, (s * 100).long()


class PythonRead(Backbone):
    def forward(self, x):
        s = self.features(x)
        if float(s.sum()) > 0:     # a value guard on what the weights computed
            return s * 2
        return s


class MetadataOnly(Backbone):
    def forward(self, x):
        s = self.features(x)
        blank = torch.zeros_like(s)          # made "like" s: its values are not read
        return s + (blank != 0).float() + s.new_ones(s.shape[0], 1)


def _program(cls, x):
    """The model and its optimized program, whose traced object then drops its original: a call none of the
    program's guards admits raises GuardError instead of being answered by the traced object."""
    model = cls().eval()
    with torch.no_grad():
        traced = tracejit.trace(model, (x,))
        program = tracejit.optimize_for_inference(traced)
    traced.drop_original()
    return model, program


def _passes(program):
    """The inference and lowering passes that made the program (freezing and inlining come first for every one)."""
    return [name for name, *_ in program.graph.passes if name not in ("inline_calls", "freeze")]


@pytest.mark.parametrize("cls", [Threshold, TopK, Rounded, PythonRead])
def test_a_program_that_decides_on_computed_values_keeps_eagers_arithmetic(cls):
    x = torch.randn(4, 3, 12, 12)
    model, program = _program(cls, x)
    assert decision_on_computed_values(freeze(tracejit.trace(model, (x,)))._method("forward").graph) is not None
    assert set(_passes(program)) <= EXACT_PASSES, _passes(program)
    # PythonRead's guard holds the float it read (``float(s.sum())``): only its example passes it
    inputs = (x.clone(),) if cls is PythonRead else (torch.randn(4, 3, 12, 12), torch.randn(2, 3, 20, 16), x * 3)
    with torch.no_grad():
        for new in inputs:
            want = model(new)
            got = program(new)
            for g, w in zip(got if isinstance(got, tuple) else (got,), want if isinstance(want, tuple) else (want,)):
                assert torch.equal(g, w)   # eager's bits: no fold, no kernel, no other layout


def test_the_same_backbone_without_a_decision_gets_every_pass():
    x = torch.randn(4, 3, 12, 12)
    model, program = _program(Scores, x)
    assert "fold_conv_batch_norm" in _passes(program)
    assert not any(t is not None and t.op == "aten::batch_norm.default" for t in program.graph.nodes)
    with torch.no_grad():
        new = torch.randn(2, 3, 20, 16)
        ref = torch.jit.trace(model, (x,), check_trace=False)
        torch.testing.assert_close(program(new), model(new), rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(program(new), ref(new), rtol=1e-5, atol=1e-6)
        assert not torch.equal(program(new), model(new))   # the fold moved the rounding: the rule above is needed


def test_shape_dtype_and_like_reads_are_not_decisions():
    x = torch.randn(4, 3, 12, 12)
    model, program = _program(MetadataOnly, x)
    assert "fold_conv_batch_norm" in _passes(program)
    with torch.no_grad():
        new = torch.randn(2, 3, 20, 16)
        torch.testing.assert_close(program(new), model(new), rtol=1e-5, atol=1e-6)


def test_a_comparison_of_inputs_alone_is_not_a_decision_on_computed_values():
    def f(x, w):
        keep = x > 0                          # the input's values: no pass changes them
        return torch.conv2d(x * keep, w)
    x, w = torch.randn(1, 3, 8, 8), torch.randn(4, 3, 3, 3)
    assert decision_on_computed_values(tracejit.trace(f, (x, w)).graph) is None


def test_an_integer_tensor_shaped_like_a_computed_one_is_not_a_decision():
    def f(x, w, levels):
        scores = torch.conv2d(x, w).flatten(1)
        return scores * levels.reshape(1, -1).expand_as(scores)   # expand_as reads the scores' shape only
    x, w, levels = torch.randn(2, 3, 8, 8), torch.randn(4, 3, 3, 3), torch.arange(4 * 36)
    assert decision_on_computed_values(tracejit.trace(f, (x, w, levels)).graph) is None
