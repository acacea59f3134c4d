"""torch's and libraries' module settings changed after the trace (hunt26; trace/module_config.py).

``model.act.negative_slope = 0.2`` or ``model.norm.eps = 1.0`` after tracing: eager's forward reads the attribute
again, the program kept the value the trace read, silently (torch.jit.trace too). Now the scalar attributes of the
hierarchy's torch / library modules are checked in memory: the live and optimized programs trace again, one whose
original was dropped raises GuardError naming the attribute. Setting an equal value again retraces nothing.
"""
from __future__ import annotations

import copy
import warnings

import pytest
import torch
from torch import nn

import tracejit


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)
        self.norm = nn.LayerNorm(4)
        self.act = nn.LeakyReLU(0.01)

    def forward(self, x):
        return self.act(self.norm(self.lin(x)))


def _quiet(fn, *args):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return fn(*args)


@pytest.mark.parametrize("change", [
    lambda m: setattr(m.act, "negative_slope", 0.5),
    lambda m: setattr(m.norm, "eps", 1.0),
], ids=["leaky_slope", "layernorm_eps"])
def test_a_changed_module_setting_gives_eagers_answer(change):
    torch.manual_seed(0)
    model = Block().eval()
    x = torch.randn(3, 4)
    traced = _quiet(tracejit.trace, model, (x,))
    optimized = tracejit.optimize_for_inference(_quiet(tracejit.trace, model, (x,)))
    dropped = _quiet(tracejit.trace, model, (x,))
    dropped.drop_original()
    jit = _quiet(torch.jit.trace, model, (x,))
    new = torch.randn(5, 4)
    before = model(new)
    change(model)
    after = model(new)
    assert not torch.allclose(before, after)
    torch.testing.assert_close(jit(new), before)   # torch.jit.trace: the old setting, silently
    torch.testing.assert_close(_quiet(traced, new), after)
    torch.testing.assert_close(_quiet(optimized, new), after)
    with pytest.raises(tracejit.GuardError, match=r"`(act\.negative_slope|norm\.eps)` \(an attribute of"):
        dropped(new)


def test_an_unchanged_or_equal_setting_retraces_nothing():
    torch.manual_seed(0)
    model = Block().eval()
    x = torch.randn(3, 4)
    traced = _quiet(tracejit.trace, model, (x,))
    model.norm.eps = float("1e-5")   # an equal value, another object
    for _ in range(3):
        torch.testing.assert_close(traced(x), model(x))
    assert len(traced.specializations) == 1


class Scaled(nn.Module):
    """A user class whose forward reads a plain attribute (guarded in the graph) beside torch's modules."""

    def __init__(self):
        super().__init__()
        self.block, self.scale = Block(), 2.0

    def forward(self, x):
        return self.block(x) * self.scale


def test_a_setting_set_on_the_traced_copy_is_refused_not_ignored():
    """torch.jit.trace's module takes ``traced.act.negative_slope = 0.5`` and keeps the traced slope: the answer does not
    move, silently. The traced copy reads the original's settings as they were traced and refuses to set them."""
    model = Scaled().eval()
    x = torch.randn(3, 4)
    traced = _quiet(tracejit.trace, model, (x,))
    assert traced.block.act.negative_slope == 0.01 and traced.scale == 2.0 and traced.block.norm.eps == 1e-5
    for sub, name, value in ((traced.block.act, "negative_slope", 0.5), (traced.block.norm, "eps", 1.0),
                             (traced, "scale", 3.0)):
        with pytest.raises(AttributeError, match=f"`{name}` of the traced .* was .* when it was traced.*original"):
            setattr(sub, name, value)
    torch.testing.assert_close(traced(x), model(x))
    before = copy.deepcopy(model)
    model.block.act.negative_slope = 0.5   # on the original: followed
    model.scale = 3.0
    y = torch.randn(3, 4) - 1
    want = model(y)
    assert not torch.allclose(want, before(y))   # the settings move the answer
    torch.testing.assert_close(_quiet(traced, y), want)
    traced.note = "any new attribute is the user's own"   # names the original did not have stay settable
    assert traced.note.startswith("any") and traced.training is False
    traced.train()   # nn.Module's own flag is not a setting
    assert traced.training is True


def test_only_the_settings_a_forward_reads_are_checked():
    """nn.Linear's forward reads ``weight`` and ``bias`` only: its ``in_features`` is not checked on every call (the
    check cost the bench's MLP 21% of a call); a setting read by a method forward calls (Conv2d's ``_conv_forward``)
    is; where the source cannot tell (``self`` handed on), every setting is."""
    from tracejit.trace.forward_reads import attributes_read
    assert attributes_read(nn.Linear) == {"weight", "bias"}
    assert {"stride", "padding", "dilation", "groups", "padding_mode"} <= attributes_read(nn.Conv2d)

    class Aliased(nn.Module):   # a library-style module whose forward aliases self
        def __init__(self):
            super().__init__()
            self.gain = 2.0

        def forward(self, x):
            me = self
            return x * me.gain
    Aliased.__module__ = "torch.nn.modules.fake"   # not the user's class: module_config's checks apply
    assert attributes_read(Aliased) is None

    model = nn.Sequential(nn.Linear(4, 4), nn.Conv1d(1, 1, 3, padding=1), Aliased()).eval()
    x = torch.randn(2, 1, 4)
    traced = _quiet(tracejit.trace, model, (x,))
    values = {attr for _, attr, _, _ in traced.forward.__func__.memory_checks.values}
    assert "in_features" not in values and "padding" in values and "gain" in values
    model[2].gain = 3.0   # read through the alias: followed
    torch.testing.assert_close(_quiet(traced, x), model(x))
