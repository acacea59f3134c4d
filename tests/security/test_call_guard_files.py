"""A file's call guards (trace/boundary.py) may repeat only reviewed reads: tensor metadata, comparisons
and formatting. A crafted file that names a method that writes, a private helper, or a format spec asking
for a huge text is refused at load (default-deny), and save refuses what load would."""
from __future__ import annotations

import io

import pytest
import torch

import tracejit
from filesurgery import rewrite


def _branch_on_layout(x):
    return x * 2 if x.is_contiguous() else x * 3


def _saved(fn, example) -> bytes:
    buf = io.BytesIO()
    tracejit.trace(fn, example, check_trace=False).save(buf)
    return buf.getvalue()


def _call_guards(doc):
    for graph in doc["program"]["graphs"] if "graphs" in doc["program"] else [doc["program"]["graph"]]:
        for node in graph["nodes"]:
            if node.get("attrs", {}).get("test") == "call":
                yield node


def _with_call(raw: bytes, call: str, extra_args=None) -> bytes:
    def edit(doc):
        nodes = list(_call_guards(doc))
        assert nodes, "the example must record a call guard"
        for node in nodes:
            node["attrs"]["call"] = call
            if extra_args is not None:
                node["args"] = node["args"][:1] + extra_args
    return rewrite(raw, edit_doc=edit)


def test_the_reviewed_read_loads_and_guards():
    raw = _saved(_branch_on_layout, torch.randn(3, 4))
    loaded = tracejit.load(io.BytesIO(raw))
    x = torch.randn(3, 4)
    torch.testing.assert_close(loaded(x), x * 2)
    with pytest.raises(tracejit.GuardError):
        loaded(torch.randn(4, 3).t())   # not contiguous: the trace's branch does not hold


@pytest.mark.parametrize("call", ["method:resize_", "method:set_", "method:fill_", "method:copy_",
                                  "fn:torch._cummax_helper", "fn:torch._sobol_engine_draw", "fn:torch.empty",
                                  "attr:data", "builtin:eval", "builtin:exec", "method:__setitem__",
                                  "fn:os.system", "module:os"])
def test_a_call_guard_naming_anything_else_is_refused_at_load(call):
    raw = _with_call(_saved(_branch_on_layout, torch.randn(3, 4)), call)
    with pytest.raises(tracejit.LoadError, match="may not call|names a call 'kind:name'"):
        tracejit.load(io.BytesIO(raw))


def test_a_format_spec_asking_for_a_huge_text_is_refused():
    def fmt(x):
        return x * 2 if f"{x.sum():.1f}" == "1.0" else x
    raw = _saved(fmt, torch.ones(1))
    tracejit.load(io.BytesIO(raw))   # the spec the trace wrote loads
    crafted = _with_call(raw, "builtin:format", extra_args=[{"const": "999999999.1f"}])
    with pytest.raises(tracejit.LoadError):
        tracejit.load(io.BytesIO(crafted))


def test_save_refuses_a_guard_a_file_may_not_repeat():
    def shallow(x):
        return x + 1 if torch._has_compatible_shallow_copy_type(x, x) else x - 1
    traced = tracejit.trace(shallow, torch.randn(3), check_trace=False)
    with pytest.raises(tracejit.SaveError, match="_has_compatible_shallow_copy_type"):
        traced.save(io.BytesIO())
    x = torch.randn(5)
    torch.testing.assert_close(traced(x), x + 1)   # in memory the guard holds and the program runs
