"""Server start (issue #22 item 4, tracejit/porting.py): what the first ``tracejit.load`` in a process pays.
Not timed here (bench/bench_serialize.py --fresh measures it); the causes are asserted instead: the load
imports none of the optional heavy libraries, and it triggers no garbage collection (the full
collection ``import torch`` leaves due cost 5x the rest of a tiny BERT's first load)."""
from __future__ import annotations

import gc
import json
import os
import subprocess
import sys

import pytest
import torch

import tracejit


class Small(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b = torch.nn.Linear(8, 8), torch.nn.Linear(8, 2)

    def forward(self, x, mask):
        return {"logits": self.b(self.a(x).relu() * mask)}


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    path = tmp_path_factory.mktemp("start") / "small.tjit"
    model = Small().eval()
    tracejit.save(tracejit.trace(model, (torch.randn(2, 8), torch.ones(2, 8)), strict=False), path)
    return model, path


@pytest.mark.parametrize("enabled", [True, False])
def test_no_collection_runs_during_a_load_and_the_collector_is_restored(saved, enabled, monkeypatch):
    model, path = saved
    collections, during = [], []
    build = tracejit.porting.serialize.load

    def building(*args, **kwargs):   # what runs inside the pause: every collection here is one too many
        collections.clear()
        out = build(*args, **kwargs)
        during.extend(collections)
        return out
    monkeypatch.setattr(tracejit.porting.serialize, "load", building)
    gc.callbacks.append(lambda phase, info: collections.append((phase, info["generation"])))
    was, thresholds = gc.isenabled(), gc.get_threshold()
    try:
        gc.enable() if enabled else gc.disable()
        gc.set_threshold(1, 1, 1)   # without the pause, the load's allocations would collect many times
        program = tracejit.load(path)
        gc.set_threshold(*thresholds)
        assert during == [] and gc.isenabled() is enabled
    finally:
        gc.set_threshold(*thresholds)
        gc.callbacks.pop()
        gc.enable() if was else gc.disable()
    x, mask = torch.randn(3, 8), (torch.rand(3, 8) > 0.5).float()   # another batch size, a real mask
    torch.testing.assert_close(program(x, mask)["logits"], model(x, mask)["logits"])


_FRESH = """
import json, sys, torch
before = set(sys.modules)
import tracejit
program = tracejit.load(sys.argv[1])
program(torch.randn(3, 8), torch.ones(3, 8))
heavy = ("onnx", "onnxruntime", "openvino", "transformers", "numexpr", "safetensors", "tqdm", "scipy")
print(json.dumps(sorted(m for m in heavy if m in sys.modules and m not in before)))
"""


def test_a_fresh_load_imports_no_optional_library(saved):
    done = subprocess.run([sys.executable, "-c", _FRESH, str(saved[1])], capture_output=True, text=True, timeout=120,
                          env=dict(os.environ, PYTHONPATH=os.getcwd()))
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout) == []
