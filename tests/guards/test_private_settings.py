"""A private attribute forward reads (``self._k``, torchvision's ``self._post_nms_top_n["testing"]``) is a setting
like a public one: changed on the original after the trace, eager reads the new value. Before hunt29 private names
were left out of both checks (the user's classes: trace/global_reads.py; installed libraries' classes:
trace/module_config.py, which also left out dicts and lists of settings), so the live program kept the traced
value, silently (torch.jit.trace too). torchvision's detectors: ``model.rpn._post_nms_top_n = dict(testing=5, ..)``
kept 1000 proposals."""
from __future__ import annotations

import importlib
import sys
import textwrap
import warnings

import pytest
import torch
from torch import nn

import tracejit

_SOURCE = textwrap.dedent('''
    import torch
    from torch import nn

    class TopN(nn.Module):
        """Keeps the top rows, as torchvision's RPN keeps its top proposals (a private dict of settings)."""
        def __init__(self):
            super().__init__()
            self._top_n = dict(training=5, testing=4)
            self._scale = 2.0

        def top_n(self):
            return self._top_n["training" if self.training else "testing"]

        def forward(self, x):
            return x.sort(0, descending=True)[0][: self.top_n()] * self._scale
''')

CHANGES = {
    "private float replaced": lambda m: setattr(m, "_scale", 3.0),
    "private dict replaced": lambda m: setattr(m, "_top_n", dict(training=5, testing=2)),
    "private dict item written": lambda m: m._top_n.__setitem__("testing", 1),
}


@pytest.fixture(params=["user", "installed"])
def top_n_class(request, tmp_path, monkeypatch):
    """TopN from a user's file, and from a file under site-packages (an installed library's class)."""
    root = tmp_path / ("site-packages" if request.param == "installed" else "project")
    root.mkdir()
    name = f"tj_private_settings_{request.param}"
    (root / f"{name}.py").write_text(_SOURCE)
    monkeypatch.syspath_prepend(str(root))
    try:
        yield importlib.import_module(name).TopN
    finally:
        sys.modules.pop(name, None)


class Holder(nn.Module):
    def __init__(self, inner):
        super().__init__()
        self.inner = inner

    def forward(self, x):
        return self.inner(x) + 1


@pytest.mark.parametrize("change", sorted(CHANGES))
def test_a_private_setting_changed_after_the_trace_gives_eagers_answer(top_n_class, change):
    model = Holder(top_n_class()).eval()
    x = torch.randn(6, 3)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        traced = tracejit.trace(model, x)
        CHANGES[change](model.inner)
        new = torch.randn(7, 3)
        expected = model(new)
        torch.testing.assert_close(traced(new), expected)
        unchanged = Holder(top_n_class()).eval()
        unchanged.load_state_dict(model.state_dict())
        frozen = unchanged(new)   # what the program answered before the fix (torch.jit.trace answers it too)
    assert frozen.shape != expected.shape or not torch.allclose(frozen, expected)   # the change moves the answer


def test_an_unchanged_private_setting_retraces_nothing(top_n_class):
    model = Holder(top_n_class()).eval()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        traced = tracejit.trace(model, torch.randn(6, 3))
    with warnings.catch_warnings():
        warnings.simplefilter("error")   # a retrace warns
        new = torch.randn(7, 3)
        torch.testing.assert_close(traced(new), model(new))


class SortsThenScales(nn.Module):
    """``x.sort(...)`` / ``x.add(...)`` are tensor methods named like list / set mutators: before hunt29 every
    attribute loaded on such a line counted as container state forward writes, and was left unguarded."""

    def __init__(self):
        super().__init__()
        self.scale = 2.0
        self.offset = 1.0

    def forward(self, x):
        y = x.sort(0)[0] * self.scale
        return y.add(self.offset)


@pytest.mark.parametrize("attr", ["scale", "offset"])
def test_a_setting_read_beside_a_tensor_method_named_like_a_mutator_is_checked(attr):
    model = SortsThenScales()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        traced = tracejit.trace(model, torch.randn(4, 3))
        setattr(model, attr, 5.0)
        x = torch.randn(6, 3)
        torch.testing.assert_close(traced(x), model(x))
