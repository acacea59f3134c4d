"""Guards in files: saved with their values and source line, checked on load (schema 2)."""
from __future__ import annotations

import warnings

import pytest
import torch

import tracejit
from serialize_testlib import expect_load_error, graphs, load_bytes, rewrite, to_bytes


def branchy(x, m):
    if x.size(0) > 3:
        return x[: int(m.sum())] * 2
    return x - 1


@pytest.fixture(scope="module")
def saved():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        traced = tracejit.trace(branchy, (torch.randn(5, 2), torch.tensor([1, 1, 0])))
    return traced, to_bytes(traced)


def guard_nodes(doc):
    return [n for g in graphs(doc) for n in g["nodes"] if n["op"] == "tracejit::guard"]


def edit_guard(raw, fn):
    def edit(doc):
        fn(guard_nodes(doc))
    return rewrite(raw, edit_doc=edit)


def test_guards_round_trip_and_fail_on_load(saved):
    traced, raw = saved
    loaded = load_bytes(raw)
    assert str(loaded.graph) == str(traced.graph)
    x = torch.randn(6, 2)
    m = torch.tensor([1, 1, 0])
    torch.testing.assert_close(loaded(x, m), branchy(x, m))
    with pytest.raises(tracejit.GuardError, match="value now: 3"):
        loaded(x, torch.tensor([1, 1, 1]))
    with pytest.raises(tracejit.GuardError, match="value now: 2"):
        loaded(torch.randn(2, 2), m)


@pytest.mark.parametrize("edit, needles", [
    (lambda gs: gs[0]["attrs"].update(test="exec"), ("guard test",)),
    (lambda gs: gs[0]["attrs"].update(kind="whatever"), ("guard kind",)),
    (lambda gs: gs[0]["attrs"].update(expected="__import__('os')"), ("numbers, bools or lists",)),
    (lambda gs: gs[0]["attrs"].update(extra=1), ("unknown node attribute", "tracejit::guard")),
    (lambda gs: gs[0]["attrs"].update(line="x" * 600), ("at most 500",)),
    (lambda gs: gs[0]["args"].append(1), ("operand",)),
    (lambda gs: gs[0]["attrs"].pop("expected"), ("expected",)),
    (lambda gs: gs[1]["args"].__setitem__(0, 3), ("needs a tensor",)),
    # a guard on a Python global (trace/global_reads.py) is in memory only: a file naming one is refused
    (lambda gs: gs[0].update(args=[]) or gs[0]["attrs"].update(kind="global", test="global"), ("Python global",)),
    (lambda gs: gs[0].update(args=[]) or gs[0]["attrs"].update(kind="global", test="global", module="os",
                                                                  name="environ"), ("unknown node attribute 'module'",)),
], ids=["test", "kind", "expected-text", "extra-attr", "long-line", "arity", "missing", "operand-kind",
        "global", "global-named"])
def test_bad_guards_are_refused(saved, edit, needles):
    expect_load_error(edit_guard(saved[1], edit), *needles)


def test_schema_1_file_without_guards_still_checks_the_training_flag():
    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Linear(3, 3), torch.nn.Dropout(0.5)).eval()
    raw = to_bytes(tracejit.trace(m, torch.randn(2, 3)))

    def as_schema_1(doc):
        doc["schema_version"] = 1
        for g in graphs(doc):
            g["nodes"] = [n for n in g["nodes"] if n["op"] != "tracejit::guard"]
    loaded = load_bytes(rewrite(raw, edit_doc=as_schema_1))
    # the decoder upgrades the file: its Program holds the guard node a trace makes today, codegen adds none
    assert [n.attrs["test"] for n in loaded.graph.nodes if n.op == "tracejit::guard"] == ["training"]
    assert "if self.training: _tj_guard(0, self.training)" in loaded.code
    x = torch.randn(4, 3)
    torch.testing.assert_close(loaded(x), m(x))
    with pytest.raises(tracejit.GuardError, match="traced in eval mode"):
        loaded.train()(x)
