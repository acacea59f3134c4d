"""Call-time budgets of programs loaded from a file (tracejit/support/call_budget.py): sizes that follow
the inputs are checked before the op allocates, int arithmetic on traced sizes stays within 64 bits,
legitimate programs compute what eager and torch.jit.trace compute on other inputs, and programs
traced in this process carry no checks at all."""
from __future__ import annotations

import io
import warnings

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import tracejit
from filesurgery import rewrite
from tracejit.support import call_budget


def _traced(fn, *example):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return tracejit.trace(fn, example)


def _roundtrip(traced, edit=None):
    buf = io.BytesIO()
    tracejit.save(traced, buf)
    raw = buf.getvalue() if edit is None else rewrite(buf.getvalue(), edit_doc=edit)
    return tracejit.load(io.BytesIO(raw))


def _grow(x):
    n = x.size(0)
    return torch.zeros([n * 3, 4]) + x.sum(), x.expand(2, -1, -1).contiguous(), F.pad(x, (0, n))


def test_loaded_programs_with_input_dependent_sizes_compute_what_eager_and_jit_compute():
    traced = _traced(_grow, torch.randn(3, 2))
    loaded = _roundtrip(traced)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        reference = torch.jit.trace(_grow, (torch.randn(3, 2),), check_trace=False)
    for shape in ((5, 2), (1, 2), (40, 2)):
        x = torch.randn(*shape)
        want = _grow(x)
        assert want[0].shape[0] != 9   # the new input moves the output's size
        for got in (loaded(x), reference(x)):
            for g, w in zip(got, want):
                torch.testing.assert_close(g, w)


def test_only_loaded_programs_carry_the_checks():
    traced = _traced(_grow, torch.randn(3, 2))
    assert "_tj_int" not in traced.code and "_tj_budget" not in traced.code
    loaded = _roundtrip(traced)
    assert "_tj_int.mul(" in loaded.code
    # one size check before each of zeros, the add of two tensors (a broadcast can outgrow both), expand
    # and pad, and the inputs counted once, first, with the method's work allowance (call_budget.Allowance)
    assert loaded.code.count("_tj_budget") == 6
    first = next(line for line in loaded.code.splitlines()[1:] if not line.lstrip().startswith("if "))
    assert first.strip() == "_tj_budget_root(_tj_budget_allow, x)"


def _edit_mul(right, op="aten::mul.int", target="op:*"):
    def edit(doc):
        for n in (x for g in doc["program"]["graphs"] for x in g["nodes"]):
            if n["op"] == "aten::mul.int":
                n["op"], n["target"], n["args"] = op, target, [n["args"][0], right]
    return edit


def test_an_allocation_over_budget_is_a_budget_error_before_it_happens():
    loaded = _roundtrip(_traced(_grow, torch.randn(3, 2)), _edit_mul(2 ** 40))
    with pytest.raises(tracejit.BudgetError, match=r"aten::zeros at .*test_call_budgets.py:\d+ would allocate "
                                                   r"13194139533312 elements, more than this program loaded from a "
                                                   r"file may allocate"):
        loaded(torch.randn(3, 2))
    assert isinstance(tracejit.BudgetError("x"), RuntimeError)


@pytest.mark.parametrize("op, target, right, message", [
    ("aten::pow.int", "op:**", 10 ** 18, r"3 \*\* 1000000000000000000"),
    ("aten::__lshift__.int", "op:<<", 2 ** 33, r"3 << 8589934592"),
    ("aten::mul.int", "op:*", 2 ** 62, r"\(\*\) leaves 64 bits"),
])
def test_int_arithmetic_on_traced_sizes_stays_within_64_bits(op, target, right, message):
    loaded = _roundtrip(_traced(_grow, torch.randn(3, 2)), _edit_mul(right, op, target))
    with pytest.raises(tracejit.BudgetError, match=message):
        loaded(torch.randn(3, 2))


def test_the_viewers_size_probe_checks_int_arithmetic_too(tmp_path):
    """inspect and view name sizes by running the generated code on meta tensors: a file's `size ** 10**18`
    ran for ever there (the probe's code had no checks); now the probe gives up on that size."""
    from tracejit import cli
    buf = io.BytesIO()
    tracejit.save(_traced(_grow, torch.randn(3, 2)), buf)
    path = tmp_path / "pow.tjit"
    path.write_bytes(rewrite(buf.getvalue(), edit_doc=_edit_mul(10 ** 18, "aten::pow.int", "op:**")))
    assert cli.main(["inspect", str(path), "--graph", "--code"]) == 0
    assert cli.main(["view", str(path), "-o", str(tmp_path / "page.html")]) == 0


@pytest.mark.parametrize("op, target, args", [
    ("aten::pow.int", "op:**", [3, 10 ** 18]),
    ("aten::__lshift__.int", "op:<<", [3, 2 ** 40]),
])
def test_int_arithmetic_on_two_constants_is_checked_too(op, target, args):
    """A file may write both operands as constants (`3 ** 10**18`): generated as a plain `**` it ran for ever
    at the call, and in the viewer's size probe (inspect, view)."""
    def edit(doc):
        for n in (x for g in doc["program"]["graphs"] for x in g["nodes"]):
            if n["op"] == "aten::mul.int":
                n["op"], n["target"], n["args"] = op, target, args
    loaded = _roundtrip(_traced(_grow, torch.randn(3, 2)), edit)
    assert f"_tj_int.{'pow' if target == 'op:**' else 'lshift'}({args[0]}, {args[1]})" in loaded.code
    with pytest.raises(tracejit.BudgetError, match="leaves 64 bits"):
        loaded(torch.randn(3, 2))


def test_the_budget_grows_with_the_inputs():
    """A factory sized from the input: refused beyond the file's budget for a small input, allowed when the
    call's inputs are big enough to make it proportionate (64 elements per input element)."""
    traced = _traced(lambda x: torch.ones([x.size(0) * 64]) + 1, torch.randn(3))
    loaded = _roundtrip(traced)
    n = call_budget.CALL_FACTOR
    big = torch.randn((1 << 25) // n + 1)       # asks for 64 x (2^25 / 64 + 1) > 2^25 elements: proportionate
    assert loaded(big).shape == (big.numel() * n,)
    small = torch.randn(3)
    # the same program, with the multiplier raised in the file: 3 x 2^30 elements for a 3-element input
    loaded = _roundtrip(traced, _edit_mul(2 ** 30))
    with pytest.raises(tracejit.BudgetError):
        loaded(small)


class _Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.rnn = nn.LSTM(3, 4, num_layers=2)

    def forward(self, x, h, c):
        return self.rnn(x, (h, c))[0]


def test_a_loaded_lstm_refuses_hidden_states_of_the_wrong_size_instead_of_corrupting_the_heap():
    net = _Net().eval()
    example = (torch.randn(5, 2, 3), torch.zeros(2, 2, 4), torch.zeros(2, 2, 4))
    loaded = _roundtrip(_traced(net, *example))
    x = torch.randn(7, 3, 3)
    h = torch.randn(2, 3, 4)
    torch.testing.assert_close(loaded(x, h, h), net(x, h, h))
    bad = torch.zeros(2, 1, 4)   # batch 1 for an input of batch 3: eager's nn.LSTM refuses it in Python
    with pytest.raises(RuntimeError):
        net(x, bad, h)
    with pytest.raises(tracejit.GuardError, match="rnn.py"):   # the trace's own guard on nn.LSTM's check
        loaded(x, bad, h)

    def drop_guards(doc):   # a hostile file without that guard: the kernel would read past the hidden state
        for g in doc["program"]["graphs"]:
            g["nodes"] = [n for n in g["nodes"] if n["op"] != "tracejit::guard"]
    buf = io.BytesIO()
    tracejit.save(_traced(net, *example), buf)
    unguarded = tracejit.load(io.BytesIO(rewrite(buf.getvalue(), edit_doc=drop_guards)))
    torch.testing.assert_close(unguarded(x, h, h), net(x, h, h))
    with pytest.raises(tracejit.GuardError, match=r"aten::lstm at .*: a hidden state of shape \[2, 1, 4\], expected "
                                                  r"\[2, 3, 4\]"):
        unguarded(x, bad, h)


def test_run_without_input_refuses_to_make_the_huge_inputs_a_file_declares(tmp_path):
    from security_testlib import run_cli
    traced = _traced(lambda x: x.relu() * 2, torch.randn(3, 4))
    buf = io.BytesIO()
    tracejit.save(traced, buf)

    def declare_4g(doc):   # the input's traced type, as the file states it: 2^32 float32 elements (16 GiB)
        doc["program"]["graphs"][0]["inputs"][0]["type"]["shape"] = [2 ** 20, 2 ** 12]

    huge, fine = tmp_path / "huge.tjit", tmp_path / "fine.tjit"
    huge.write_bytes(rewrite(buf.getvalue(), edit_doc=declare_4g))
    fine.write_bytes(buf.getvalue())
    ok = run_cli("run", str(fine), "--repeat", "1")
    assert ok.returncode == 0 and b"float32[3, 4]" in ok.stdout, ok.stderr
    refused = run_cli("run", str(huge), "--repeat", "1")
    assert refused.returncode != 0
    assert b"inputs of 4294967296 elements in all" in refused.stderr and b"pass --input" in refused.stderr


def _products(x):
    """Six products of a 256 x 256 matrix the program makes (each 256^3 multiply-adds, legal on its own)."""
    a = torch.full((256, 256), 1e-3) + x.sum()
    for _ in range(6):
        a = (a @ a).clamp(-1, 1)
    return a.sum()


def test_the_contractions_of_one_call_are_held_to_a_total(monkeypatch):
    """Every product is within one op's budget; their sum is held to TOTAL_WORK_FACTOR times it (round 25: ten
    4096^3 products from a 5 KB file ran 14 s a call, and more nodes ran longer). Here the factor is made small
    enough that four products pass and the fifth is refused, before it runs; the next call starts a new total."""
    x = torch.randn(3)
    loaded = _roundtrip(_traced(_products, x))
    torch.testing.assert_close(loaded(x), _products(x))   # the real factor: far from this program's total
    one_op = call_budget.WORK_FACTOR * 2 ** 25   # a 3-element input: the file's floor sets the budget
    monkeypatch.setattr(call_budget, "TOTAL_WORK_FACTOR", 4.5 * 256 ** 3 / one_op)
    loaded = _roundtrip(_traced(_products, x))   # its allowance's limit at the traced shapes is fixed at load
    with pytest.raises(tracejit.BudgetError, match="this call's multiply-adds to 83886080, more than the ops of "
                                                   "one call"):
        loaded(x)
    with pytest.raises(tracejit.BudgetError, match="83886080"):   # a new call: a new total, refused at the same op
        loaded(x)
    monkeypatch.setattr(call_budget, "TOTAL_WORK_FACTOR", 6 * 256 ** 3 / one_op)
    loaded = _roundtrip(_traced(_products, x))
    torch.testing.assert_close(loaded(x), _products(x))
