"""A file holds every specialization (issue #22.1): written by save, chosen per call after load
(in a fresh process, from 8 threads), listed by inspect; older files still load; a malformed
table is refused clearly."""
from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import warnings

import pytest
import torch
from torch import nn

import tracejit
from serialize_testlib import expect_load_error, load_bytes, rewrite, to_bytes


class Pooled(nn.Module):
    """Two size branches (one in a submodule) and a loop over the batch: several specializations."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.head = Head()

    def forward(self, x):
        y = self.conv(x).relu()
        if y.size(-1) > 6:
            y = nn.functional.max_pool2d(y, 2)
        return self.head(y.mean((2, 3)))


class Head(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 2)

    def forward(self, h):
        if h.size(0) > 1:
            return self.lin(h).softmax(-1)
        return self.lin(h)


SHAPES = [(1, 3, 8, 8), (3, 3, 8, 8), (1, 3, 5, 5), (2, 3, 6, 6)]


def _model():
    torch.manual_seed(0)
    return Pooled().eval()


def _traced(model):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return tracejit.trace(model, torch.randn(*SHAPES[0]), specialize_for=[torch.randn(*s) for s in SHAPES[1:]])


def test_every_shape_moves_eager_down_another_path():
    m = _model()
    x = torch.randn(3, 3, 8, 8)
    assert not torch.allclose(m(x), m.head.lin(m.conv(x).relu().mean((2, 3))))      # pooling moves it
    assert not torch.allclose(m(x[:1]), m(x[:1]).softmax(-1))                       # the head's branch


def test_specialize_for_makes_one_per_path_and_calls_never_retrace():
    m = _model()
    traced = _traced(m)
    assert len(traced.specializations) == 4 and traced._specializations.traces == 3
    with torch.no_grad():
        for s in SHAPES + [(5, 3, 9, 9), (1, 3, 4, 4)]:
            x = torch.randn(*s)
            torch.testing.assert_close(traced(x), m(x))
    assert traced._specializations.traces == 3
    # an input set the traces made so far already fit makes none
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        again = tracejit.trace(m, torch.randn(*SHAPES[0]), specialize_for=[torch.randn(1, 3, 9, 9)])
    assert len(again.specializations) == 1


def test_specialize_for_must_be_a_list_of_input_sets():
    with pytest.raises(tracejit.ArgumentTypeError, match="specialize_for should be a list"):
        tracejit.trace(_model(), torch.randn(*SHAPES[0]), specialize_for=torch.randn(1, 3, 8, 8))


def test_file_with_every_specialization_serves_8_threads_in_a_fresh_process(tmp_path):
    m = _model()
    traced = _traced(m)
    path = tmp_path / "pooled.tjit"
    tracejit.save(traced, path)
    gen = torch.Generator().manual_seed(5)
    inputs = [torch.randn(*s, generator=gen) for s in SHAPES + [(4, 3, 7, 7), (1, 3, 3, 3)]]
    with torch.no_grad():
        expected = [m(x) for x in inputs]
    torch.save({"inputs": inputs, "expected": expected}, tmp_path / "cases.pt")
    script = textwrap.dedent(f"""
        import threading, torch, tracejit
        program = tracejit.load({str(path)!r})
        cases = torch.load({str(tmp_path / 'cases.pt')!r})
        assert len(program.specializations) == 4, program.specializations
        wrong, errors = [], []
        def worker(i):
            try:
                for rep in range(200):
                    k = (i + rep) % len(cases["inputs"])
                    with torch.no_grad():
                        out = program(cases["inputs"][k])
                    if not torch.allclose(out, cases["expected"][k], atol=1e-6):
                        wrong.append((i, rep, k))
            except BaseException as e:
                errors.append(repr(e))
        threads = [threading.Thread(target=worker, args=(i,)) for i in range(8)]
        for t in threads: t.start()
        for t in threads: t.join()
        print("wrong", len(wrong), "errors", errors[:1])
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "wrong 0 errors []" in done.stdout, done.stdout


def test_loaded_program_without_a_fitting_specialization_lists_every_requirement():
    m = _model()
    loaded = load_bytes(to_bytes(_traced(m)))
    loaded.train()
    with pytest.raises(tracejit.GuardError) as info:
        loaded(torch.randn(*SHAPES[0]))
    text = str(info.value)
    assert "no specialization fits these inputs (4 tried" in text
    assert text.count("traced in eval mode") == 4 and "specialize_for" in text


def test_weights_shared_across_specializations_are_stored_once():
    m = _model()
    one = to_bytes(tracejit.trace(m, torch.randn(*SHAPES[0])))
    four = to_bytes(_traced(m))
    doc_one, doc_four = _doc(one), _doc(four)
    assert len(doc_four["program"]["specializations"]) == 3 and doc_one["program"]["specializations"] == []
    assert _tensor_names(one) == _tensor_names(four)   # no weight is written twice
    assert all(e["method"] == "forward" and "specialize_for" in e["reason"]
               for e in doc_four["program"]["specializations"])


def test_schema_2_file_without_the_table_loads_its_first_trace():
    m = _model()
    raw = to_bytes(_traced(m))
    old = rewrite(raw, edit_doc=lambda d: (d.update(schema_version=2), d["program"].pop("specializations")))
    loaded = load_bytes(old)
    assert len(loaded.specializations) == 1
    x = torch.randn(*SHAPES[0])
    with torch.no_grad():
        torch.testing.assert_close(loaded(x), m(x))
    with pytest.raises(tracejit.GuardError):
        loaded(torch.randn(*SHAPES[1]))


@pytest.mark.parametrize("edit, needles", [
    (lambda p: p.update(specializations={"forward": 1}), ("specializations table is malformed",)),
    (lambda p: p["specializations"][0].update(method="backward"), ("names method 'backward'", "forward")),
    (lambda p: p["specializations"][0].update(graph=999), ("graph index 999",)),
    (lambda p: p["specializations"][0].update(reason=7), ("reason", "expected a string")),
    (lambda p: p["specializations"][0].update(extra=1), ("malformed entry",)),
    (lambda p: p["specializations"][0].update(source=["f.py", "x", "g"]), ("malformed source",)),
    (lambda p: p.update(specializations=p["specializations"] * 100), ("specializations (at most 256)",)),
])
def test_malformed_specialization_table_is_refused(edit, needles):
    raw = to_bytes(_traced(_model()))
    expect_load_error(rewrite(raw, edit_doc=lambda d: edit(d["program"])), *needles)


def test_a_specialization_that_calls_a_submodule_is_refused():
    raw = to_bytes(_traced(_model()))

    def point_at_root_graph(d):
        root = next(e for e in d["program"]["modules"] if e["path"] == "")
        d["program"]["specializations"][0]["graph"] = dict(root["methods"])["forward"]
    expect_load_error(rewrite(raw, edit_doc=point_at_root_graph), "inlined", "calls a submodule method")


def test_inspect_lists_the_specializations_and_their_guards(tmp_path, capsys):
    from tracejit.cli import main
    path = tmp_path / "p.tjit"
    tracejit.save(_traced(_model()), path)
    assert main(["inspect", str(path)]) == 0
    out = capsys.readouterr().out
    assert "specializations (a call runs the first whose guards hold" in out
    assert out.count("made because specialize_for:") == 3 and "if y.size(-1) > 6:" in out
    assert "if h.size(0) > 1:" in out and "schema 3" in out


def _doc(raw: bytes) -> dict:
    import struct
    n = struct.unpack("<Q", raw[:8])[0]
    return json.loads(json.loads(raw[8:8 + n])["__metadata__"]["tracejit"])


def _tensor_names(raw: bytes) -> set:
    import struct
    n = struct.unpack("<Q", raw[:8])[0]
    return set(json.loads(raw[8:8 + n])) - {"__metadata__"}
