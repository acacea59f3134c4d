"""A submodule may have any name without a dot (``nn.Module.add_module``): torchvision's RegNet names its
blocks ``block4-8``. Its training-flag guards are saved and loaded (before: SaveError, found tracing the zoo's
RegNets on a GPU machine), and still guard: the loaded program's answer is eager's, or GuardError."""
from __future__ import annotations

import io

import pytest
import torch
from torch import nn

import tracejit


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.add_module("block4-8", nn.Sequential(nn.Linear(4, 4), nn.Dropout(0.5)))
        self.add_module("it's", nn.Linear(4, 2))

    def forward(self, x):
        return self._modules["it's"](self._modules["block4-8"](x))


def test_a_hyphenated_submodule_saves_loads_and_keeps_its_training_guard():
    torch.manual_seed(0)
    net = Net().eval()
    traced = tracejit.trace(net, (torch.randn(2, 4),))
    buf = io.BytesIO()
    tracejit.save(traced, buf)
    buf.seek(0)
    loaded = tracejit.load(buf)
    x = torch.randn(5, 4)
    torch.testing.assert_close(loaded(x), net(x))
    loaded._modules["block4-8"].train()   # dropout would now drop: the traced eval path no longer holds
    with pytest.raises(tracejit.GuardError, match="block4-8"):
        loaded(x)
