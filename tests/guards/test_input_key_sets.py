"""Input dicts whose key set forward reads (trace/input_keys.py, hunt20 B).

Traced with ``{"a": ...}`` and called with ``{"a": ..., "b": ...}``: where forward iterates the dict, len()s it,
asks ``in`` / ``.get`` for a key it lacked or unpacks it, eager's answer follows the new keys; torch.jit.trace's
program (and tracejit's before) accepted the superset and silently gave the trace's answer. Now a GuardError names
the line that read the key set, live, saved and loaded. Indexing by name only keeps torch.jit's superset rule.
"""
from __future__ import annotations

import inspect
import io
import warnings

import pytest
import torch

import tracejit
from tracejit.errors import GuardError
from trace_testlib import marker_lines

LINE = marker_lines(inspect.getsourcefile(inspect.currentframe()))


class SumValues(torch.nn.Module):
    def forward(self, d):
        return sum(d.values())  # @values


class LoopKeys(torch.nn.Module):
    def forward(self, d):
        return torch.stack([d[k] * (i + 1) for i, k in enumerate(d)]).sum(0)  # @loop


class Length(torch.nn.Module):
    def forward(self, d):
        return d["a"] * len(d)  # @len


class Contains(torch.nn.Module):
    def forward(self, d):
        if "b" in d:  # @in
            return d["a"] + d["b"]
        return d["a"]


class GetAbsent(torch.nn.Module):
    def forward(self, d):
        bias = d.get("bias")  # @get
        return d["a"] if bias is None else d["a"] + bias


def _splat(a, **rest):
    return a + len(rest)


class Unpack(torch.nn.Module):
    def forward(self, d):
        return _splat(**d)  # @splat


class IndexOnly(torch.nn.Module):
    def forward(self, d):
        return d["a"] * 2 if "a" in d else d["a"]


CASES = [(SumValues, "values"), (LoopKeys, "loop"), (Length, "len"), (Contains, "in"), (GetAbsent, "get"),
         (Unpack, "splat")]


def _example():
    return {"a": torch.randn(3)}


def _more():
    return {"a": torch.randn(3), "b": torch.randn(3)}


def _jit(m):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return torch.jit.trace(m, (_example(),), strict=False, check_trace=False)


def _saved(traced):
    buf = io.BytesIO()
    tracejit.save(traced, buf)
    buf.seek(0)
    return tracejit.load(buf)


@pytest.mark.parametrize("cls, marker", CASES, ids=[c[1] for c in CASES])
def test_a_superset_of_keys_is_refused_where_forward_reads_the_key_set(cls, marker):
    m = cls().eval()
    traced = tracejit.trace(m, (_example(),))
    same = _example()
    torch.testing.assert_close(traced(same), m(same), rtol=0, atol=0)
    more = {"a": torch.randn(3), "bias": torch.randn(3)} if marker == "get" else _more()
    eager = m(more)
    jit = _jit(m)(more)                      # torch.jit: the trace's answer, silently
    assert not torch.equal(jit, eager)
    for program in (traced, _saved(traced)):
        with pytest.raises(GuardError, match=rf"test_input_key_sets.py:{LINE(marker)}\b"):
            program(more)


def test_keys_in_another_order_are_refused_where_forward_iterates():
    m = LoopKeys().eval()
    d = {"a": torch.randn(3), "b": torch.randn(3)}
    traced = tracejit.trace(m, (d,))
    swapped = {"b": d["b"], "a": d["a"]}
    assert not torch.equal(m(swapped), m(d))
    with pytest.raises(GuardError, match="exactly these keys, in this order"):
        traced(swapped)


def test_indexing_by_name_keeps_torch_jit_s_superset_rule():
    m = IndexOnly().eval()
    traced = tracejit.trace(m, (_example(),))
    more = _more()
    for program in (traced, _saved(traced)):
        torch.testing.assert_close(program(more), m(more), rtol=0, atol=0)


def test_a_nested_dict_s_path_is_checked():
    class Nested(torch.nn.Module):
        def forward(self, batch):
            return batch["x"] + sum(batch["extra"].values())
    m = Nested().eval()
    traced = tracejit.trace(m, ({"x": torch.randn(3), "extra": {"a": torch.randn(3)}},))
    call = {"x": torch.randn(3), "extra": {"a": torch.randn(3), "b": torch.randn(3)}}
    with pytest.raises(GuardError, match=r"argument 'batch\['extra'\]'"):
        traced(call)
    bigger_outer = {"x": torch.randn(3), "extra": {"a": torch.randn(3)}, "unused": 1}
    torch.testing.assert_close(traced(bigger_outer), m(bigger_outer), rtol=0, atol=0)

