"""Round 26's files (catalogue_round26.py): the total work of a call counts every op of a loaded program whose ops
could together pass it (an element-by-element chain stops with a BudgetError after a bounded total, a real
program's call stays far under it), and convolutions count their multiply-adds."""
from __future__ import annotations

import io
import os
import re

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils.flop_counter import FlopCounterMode

import tracejit
from tracejit import ops
from catalogue_round26 import (NORM_EDITS, NORM_OPS, conv, conv_sized, elementwise_chain, norm_files,
                               diff_sized, diffed, hostile_cases, legit_cases, repeated_specializations, sized)
from security_testlib import CheapSin, load_bytes, rewrite, round_problems, traced_bytes
from tracejit.serialize import size_rules
from tracejit.support import call_budget

F = torch.nn.functional


@pytest.fixture(autouse=True)
def _no_cache(monkeypatch):
    monkeypatch.setenv("TRACEJIT_CACHE_DIR", "")


_CheapSin, _load = CheapSin, load_bytes   # (security_testlib: conftest.py)


def test_an_elementwise_chain_stops_after_a_bounded_total(monkeypatch):
    """400 sines of the file's legal 2**25 - 1 element vector (half a minute a call, more with more nodes: nothing
    counted them): the call raises BudgetError naming the op and its line once the sines' elements times their
    step weight pass the call's total, long before the 400th; the next call starts a new total. (The cap behind
    round 27's allowance, which stops this file at its factory (test_round27_files.py): its floor raised here.)"""
    monkeypatch.setattr(call_budget, "ALLOWANCE_FLOOR", 2 ** 80)
    loaded = _load(sized(traced_bytes(elementwise_chain(400), (torch.randn(3, 8),))))
    runs = []
    for _ in range(2):
        _CheapSin.ran = 0
        with _CheapSin(), pytest.raises(tracejit.BudgetError,
                                        match=r"aten::sin at .*catalogue_round26\.py:\d+ would bring this call's "
                                              r"multiply-adds to \d+, more than the ops of one call"):
            loaded(torch.randn(3, 8))
        runs.append(_CheapSin.ran)
    limit = call_budget.TOTAL_WORK_FACTOR * call_budget.WORK_FACTOR * 2 ** 25
    step = ops.step_work("aten::sin")
    assert runs[0] == runs[1] and 0 < runs[0] < 400
    # the sines that ran, with the factory, add and sum around them (a few ops more), reach the limit
    assert limit - 4 * step * 2 ** 25 < runs[0] * step * (2 ** 25 - 1) <= limit


@pytest.mark.parametrize("k", [20, 400])
def test_a_chain_of_small_tensors_answers_as_eager(k):
    """The same programs on their own 8-element vector, short (no counting: its ops cannot pass the total) and long
    (every op counted), called on other shapes: eager's answer, and the long one counts its ops."""
    fn = elementwise_chain(k)
    loaded = _load(traced_bytes(fn, (torch.randn(3, 8),)))
    for shape in ((5, 4), (2, 2, 2)):
        x = torch.randn(*shape)
        torch.testing.assert_close(loaded(x), fn(x))
    counts = re.findall(r"^\s*_tj_budget\d+\((?!\{)", loaded.code, re.M)   # work counts (a size check takes a dict)
    assert len(counts) == (k + 4 if k == 400 else 0)   # every sin, and the factory, add and the two sums


@pytest.mark.parametrize("op,x_shape,w_shape,kw", [
    ("conv2d", (2, 6, 9, 11), (12, 3, 3, 2), dict(stride=[2, 1], padding=[1, 2], dilation=[1, 2], groups=2)),
    ("conv1d", (3, 4, 20), (8, 4, 5), dict(stride=[1], padding=[0], dilation=[1], groups=1)),
    ("conv3d", (1, 2, 5, 6, 7), (4, 2, 3, 3, 3), dict(stride=[1, 1, 2], padding=[1, 1, 1], dilation=[1, 1, 1],
                                                      groups=1)),
    ("conv_transpose2d", (2, 6, 7, 5), (6, 4, 3, 3), dict(stride=[2, 2], padding=[1, 1], dilation=[1, 1],
                                                          groups=2)),
])
def test_convolution_work_counts_what_torch_counts(op, x_shape, w_shape, kw):
    """The convolutions' work rule (serialize/op_sizes_work.convolution_flops) on shapes, strides, groups and
    transposition: torch's own flop counter's multiply-adds (half its flops)."""
    x, w = torch.randn(*x_shape), torch.randn(*w_shape)
    transposed = op.startswith("conv_transpose")
    with FlopCounterMode(display=False) as counter:
        getattr(F, op)(x, w, **kw)
    bound = {"input": x, "weight": w, "transposed": transposed, **kw}
    assert size_rules.rule(op).flops(bound) == counter.get_total_flops() // 2


def test_a_convolution_past_the_work_budget_is_refused_before_it_runs(monkeypatch):
    """A conv1d of the file's zeros, input [1, 5792, 5792] by weight [5792, 5792, 1]: every tensor within the
    element budget, 1.9e11 multiply-adds (4 s a call on one core, nothing counted them): BudgetError naming the op
    and its work, before the kernel; the unedited program answers as eager on another input. (Round 27's claim
    refuses this file at load, test_round27_files.py: lifted here to test the per-op check behind it.)"""
    monkeypatch.setattr(call_budget, "CLAIM_FACTOR", 2 ** 62)
    raw = traced_bytes(conv, (torch.randn(3, 8),))
    with pytest.raises(tracejit.BudgetError, match=r"aten::conv1d at .* would compute \d+ multiply-adds"):
        _load(conv_sized(raw))(torch.randn(3, 8))
    x = torch.randn(2, 5)
    torch.testing.assert_close(_load(raw)(x), conv(x))


@pytest.fixture(scope="module")
def norms():
    return norm_files()


@pytest.mark.parametrize("name,op,edit,what", [e for e in NORM_EDITS if e[3] is not None], ids=lambda v: str(v)[:30])
def test_norm_constants_the_kernel_refuses_are_a_load_error(norms, name, op, edit, what):
    """A layer_norm / rms_norm normalized_shape that is not the input's last sizes, a group_norm num_groups that
    does not divide the channels, a fold output_size whose sliding blocks are not the input's: each loaded and
    raised the kernel's RuntimeError at the first call; now a LoadError naming the node and what disagrees."""
    with pytest.raises(tracejit.LoadError, match=rf"node \d+ \(aten::\w+\.default\): aten::\w+: .*{what}"):
        _load(rewrite(norms[op], edit_doc=edit))


def test_a_group_count_that_divides_loads_and_checks_the_weight_at_the_call(norms):
    """num_groups 3 divides 6 channels: the file loads and answers as eager would with 3 groups; an input of 9
    channels (divisible by 3, but the weight holds 6) is a GuardError naming the line where eager's kernel fails."""
    loaded = _load(rewrite(norms["group_norm"], edit_doc=NORM_EDITS[3][2]))
    x = torch.randn(3, 6, 7)
    torch.testing.assert_close(loaded(x), F.group_norm(x, 3, torch.ones(6), torch.zeros(6)))
    with pytest.raises(RuntimeError):
        F.group_norm(torch.randn(3, 9, 7), 3, torch.ones(6), torch.zeros(6))
    with pytest.raises(tracejit.GuardError, match=r"aten::group_norm at .*catalogue_round26\.py:\d+: weight of "
                                                  r"shape \[6\] must hold one value per channel"):
        loaded(torch.randn(3, 9, 7))


@pytest.mark.parametrize("op,bad", [("layer_norm", (5, 4)), ("rms_norm", (3, 8, 4)), ("group_norm", (3, 9, 7)),
                                    ("fold", (2, 12, 10))])
def test_a_shape_the_norm_refuses_at_the_call_is_a_guard_error_naming_the_line(norms, op, bad):
    """The unedited programs on a legit other shape: eager's answer; on a shape the kernel refuses (eager raises its
    RuntimeError): a GuardError naming the op and the traced line, before the kernel."""
    fn, _, good = NORM_OPS[op]
    loaded = _load(norms[op])
    x = torch.randn(*good)
    torch.testing.assert_close(loaded(x), fn(x))
    x = torch.randn(*bad)
    with pytest.raises(RuntimeError):
        fn(x)
    aten = "col2im" if op == "fold" else op
    with pytest.raises(tracejit.GuardError, match=rf"aten::{aten} at .*catalogue_round26\.py:\d+: .*cannot run on "
                                                  r"these inputs"):
        loaded(x)


def test_save_refuses_a_header_load_would_refuse():
    """A program whose header (document and extra files) passes the 16 MB a loader reads: ``save`` wrote it and every
    load refused it (Mask R-CNN traced on eight images has an 18 MB document); now a SaveError saying so, and what
    fits still saves and loads."""
    traced = tracejit.trace(lambda x: x + 1, torch.randn(3))
    big = {"notes.txt": b"n" * (17 << 20)}
    with pytest.raises(tracejit.SaveError, match=r"header .* would take \d+ bytes, more than the 16777216"):
        tracejit.save(traced, io.BytesIO(), _extra_files=big)
    buf = io.BytesIO()
    tracejit.save(traced, buf, _extra_files={"notes.txt": b"n" * 1024})
    x = torch.randn(4)
    torch.testing.assert_close(_load(buf.getvalue())(x), x + 1)


def test_save_refuses_a_document_of_more_values_than_load_reads(monkeypatch):
    """The loader bounds the values of a program document (limits.MAX_JSON_ITEMS, counted before parsing); ``save``
    wrote documents over it (Mask R-CNN on eight images: 1.1 million) that every load refused. Here the bound is made
    small: a 40-op program's save is a SaveError naming it; under the bound it saves and loads."""
    from tracejit.serialize import limits
    fn = elementwise_chain(40)
    traced = tracejit.trace(fn, torch.randn(3, 8))
    monkeypatch.setattr(limits, "MAX_JSON_ITEMS", 500)
    with pytest.raises(tracejit.SaveError, match=r"would refuse this program.*holds about \d+ values \(at most 500\)"):
        tracejit.save(traced, io.BytesIO())
    monkeypatch.setattr(limits, "MAX_JSON_ITEMS", 500_000)
    buf = io.BytesIO()
    tracejit.save(traced, buf)
    x = torch.randn(2, 5)
    torch.testing.assert_close(_load(buf.getvalue())(x), fn(x))


def test_a_specialization_table_that_repeats_a_graph_is_refused_fast():
    """256 specializations naming one graph (14 s to load before): a LoadError at the second entry, before any
    graph past the first is decoded; a table naming it once loads and answers as eager on another shape."""
    fn = elementwise_chain(700)
    raw = traced_bytes(fn, (torch.randn(3, 8),))
    with pytest.raises(tracejit.LoadError, match=r"specialization 1 of 'forward': names graph 0, which "
                                                 r"specialization 0 names too"):
        _load(repeated_specializations(raw))
    x = torch.randn(5, 4)
    torch.testing.assert_close(_load(repeated_specializations(raw, n=1))(x), fn(x))


def test_round26_files_are_refused_in_a_capped_child(tmp_path):
    """The catalogue's files that a check refuses before the work (diff of order 2**22 on 2**22 elements: an hour a
    call before; the norm constants; a repeated specialization graph) in a child capped in memory and CPU: each is
    refused within CPU_S; the legitimate programs answer as eager on other shapes."""
    problems = round_problems(tmp_path, hostile_cases(), legit_cases(), 2.0)
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("n,length", [(1, 9), (3, 9), (8, 9), (40, 9), (5, 2)])
def test_diff_work_counts_every_pass(n, length):
    """diff's work rule against the passes eager's kernel makes (a dispatch-level count of its subtractions):
    min(n, the size along dim) passes, each over at most all the elements."""
    class Count(TorchDispatchMode):
        passes = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            if func._schema.name == "aten::sub":
                Count.passes += 1
            return func(*args, **(kwargs or {}))

    x = torch.randn(3, length)
    with Count():
        torch.diff(x, n=n)
    rule = size_rules.rule("diff").flops
    assert rule({"self": x, "n": n, "dim": -1}) >= Count.passes * x.numel() > 0 or Count.passes == 0
    assert rule({"self": x, "n": n, "dim": -1}) == min(n, length) * rule({"self": x, "n": 1, "dim": -1})


def test_the_code_cache_keeps_every_ops_count(monkeypatch, tmp_path):
    """A counting program's methods go to the code cache (their work counts are plain recipes) and the load made
    from the entry stops at the same op as the first (the allowance's floor raised: the cap binds)."""
    monkeypatch.setattr(call_budget, "ALLOWANCE_FLOOR", 2 ** 80)
    monkeypatch.setenv("TRACEJIT_CACHE_DIR", str(tmp_path))
    raw = sized(traced_bytes(elementwise_chain(400), (torch.randn(3, 8),)))
    runs = []
    for _ in range(2):
        loaded = _load(raw)
        _CheapSin.ran = 0
        with _CheapSin(), pytest.raises(tracejit.BudgetError, match="aten::sin at"):
            loaded(torch.randn(3, 8))
        runs.append(_CheapSin.ran)
        assert [p for p in os.listdir(tmp_path) if p.endswith(".tjc")], "no cache entry written"
    assert runs[0] == runs[1] > 0
