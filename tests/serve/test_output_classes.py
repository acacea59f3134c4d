"""Outputs come back as the model returned them (issue #22 item 3, tracejit/pytree.py, serialize/encode.py):
a transformers ModelOutput, a dataclass registered with torch's pytree and a namedtuple keep their
class in memory, after save / load, after optimize_for_inference and through onnxruntime and
openvino; a class this process has not registered comes back as a read-only Record with attribute,
key and index access in the original order. A file that names ``os.system`` or any unregistered
class as its output class gets a Record: nothing is imported, nothing called."""
from __future__ import annotations

import collections
import dataclasses
import json
import os
import subprocess
import sys

import pytest
import torch
from torch.utils import _pytree as torch_pytree

transformers = pytest.importorskip("transformers")
from transformers.modeling_outputs import BaseModelOutputWithPooling  # noqa: E402

import filesurgery  # noqa: E402
import tracejit  # noqa: E402
from tracejit.pytree import Record  # noqa: E402


@dataclasses.dataclass
class Scores:
    best: torch.Tensor
    extra: torch.Tensor | None = None


torch_pytree.register_dataclass(Scores)
Pair = collections.namedtuple("Pair", "low high")


class Structured(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(3, 4)

    def forward(self, x):
        h = self.lin(x)
        return {"mo": BaseModelOutputWithPooling(last_hidden_state=h.relu(), pooler_output=h.sum(1)),
                "scores": Scores(h * 2), "pair": Pair(h.min(1).values, h.max(1).values)}


def _assert_structure(out, expected):
    mo, emo = out["mo"], expected["mo"]
    assert type(mo) is BaseModelOutputWithPooling and list(mo.keys()) == list(emo.keys())
    torch.testing.assert_close(mo.last_hidden_state, emo.last_hidden_state)
    torch.testing.assert_close(mo["pooler_output"], emo.pooler_output)
    torch.testing.assert_close(mo[0], emo[0])
    assert type(out["scores"]) is Scores and out["scores"].extra is None
    torch.testing.assert_close(out["scores"].best, expected["scores"].best)
    pair = out["pair"]
    assert pair._fields == ("low", "high") and type(pair).__name__ == "Pair"
    torch.testing.assert_close(pair.high, expected["pair"].high)
    torch.testing.assert_close(pair[0], expected["pair"].low)


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    model = Structured().eval()
    traced = tracejit.trace(model, (torch.randn(2, 3),), strict=False)
    path = tmp_path_factory.mktemp("out") / "s.tjit"
    tracejit.save(traced, path)
    return model, traced, path


def test_same_classes_in_memory_after_load_and_optimize(saved):
    model, traced, path = saved
    x = torch.randn(5, 3)   # another batch size: the outputs' values move with it
    expected = model(x)
    _assert_structure(traced(x), expected)
    loaded = tracejit.load(path)
    _assert_structure(loaded(x), expected)
    _assert_structure(tracejit.optimize_for_inference(loaded)(x), expected)


@pytest.mark.parametrize("backend", ["onnxruntime", "openvino"])
def test_same_classes_through_the_backends(saved, backend):
    pytest.importorskip(backend)
    model, _, path = saved
    x = torch.randn(4, 3)
    optimized = tracejit.optimize_for_inference(tracejit.load(path), backend=backend)
    with torch.no_grad():
        _assert_structure(optimized(x), model(x))


_FRESH = """
import json, sys, torch, tracejit
from tracejit.pytree import Record
out = tracejit.load(sys.argv[1])(torch.ones(2, 3))
mo = out["mo"]
print(json.dumps({"transformers": "transformers" in sys.modules, "mo": type(mo).__name__,
                  "record": isinstance(mo, Record), "keys": list(mo.keys()),
                  "same": [bool(torch.equal(mo.pooler_output, mo["pooler_output"])),
                           bool(torch.equal(mo[1], mo.pooler_output))],
                  "scores": type(out["scores"]).__name__, "scores_keys": list(out["scores"].keys())}))
"""


def test_a_process_without_the_classes_gets_records(saved):
    """A server that never imported transformers nor registered Scores: read-only records, same access."""
    _, _, path = saved
    done = subprocess.run([sys.executable, "-c", _FRESH, str(path)], capture_output=True, text=True, timeout=120,
                          env=dict(os.environ, PYTHONPATH=os.getcwd()))
    assert done.returncode == 0, done.stderr[-2000:]
    seen = json.loads(done.stdout)
    assert seen == {"transformers": False, "mo": "BaseModelOutputWithPooling", "record": True,
                    "keys": ["last_hidden_state", "pooler_output"], "same": [True, True],
                    "scores": "Scores", "scores_keys": ["best"]}


def test_a_record_is_read_only_and_ordered():
    r = tracejit.pytree.record_type("Out")({"a": 1, "b": 2})
    assert (r.a, r["b"], r[1], r[-1], list(r), r.to_tuple()) == (1, 2, 2, 2, ["a", "b"], (1, 2))
    with pytest.raises(AttributeError, match="read-only"):
        r.a = 3
    with pytest.raises(AttributeError, match="has no field 'c'; fields: a, b"):
        r.c
    with pytest.raises(KeyError):
        r["c"]
    assert tracejit.pytree.record_type("Keys")({0: "x", "y": 1})[0] == "x"   # an int key wins over the position


HOSTILE = [("os", "system"), ("subprocess", "Popen"), ("builtins", "eval"), ("tj_never_imported", "Boom"),
           (__name__, "Unregistered")]


@pytest.mark.parametrize("module,qualname", HOSTILE)
def test_a_file_naming_any_class_imports_and_calls_nothing(saved, tmp_path, monkeypatch, module, qualname):
    _, _, path = saved

    renamed = []

    def edit(node):   # every structure that names the ModelOutput class names the hostile one instead
        if isinstance(node, dict):
            if node.get("qualname") == "BaseModelOutputWithPooling":
                node["module"], node["qualname"] = module, qualname
                renamed.append(node)
            for v in node.values():
                edit(v)
        elif isinstance(node, list):
            for v in node:
                edit(v)

    hostile = tmp_path / "h.tjit"
    hostile.write_bytes(filesurgery.rewrite(path.read_bytes(), edit_doc=edit))
    assert renamed
    imported = []
    real_import = __import__

    def watch(name, *args, **kwargs):
        imported.append(name)
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr("builtins.__import__", watch)
    for name in ("system", "Popen"):
        monkeypatch.setattr(f"{'os' if name == 'system' else 'subprocess'}.{name}",
                            lambda *a, **k: pytest.fail("called a function the file named"))
    loaded = tracejit.load(hostile)
    out = loaded(torch.randn(2, 3))["mo"]
    monkeypatch.undo()
    assert isinstance(out, Record) and type(out).__name__ == "BaseModelOutputWithPooling"
    assert list(out.keys()) == ["last_hidden_state", "pooler_output"] and out[1] is out.pooler_output
    assert "tj_never_imported" not in imported and "tj_never_imported" not in sys.modules
