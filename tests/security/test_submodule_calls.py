"""Every entry point into a loaded program sets its call's budget from its own inputs (issue 21, call-time
budgets): a submodule method called directly (``loaded.sub.forward(y)``, ``loaded.encoder.layer[0].forward(h)``)
is held to what ``y`` allows, not to the budget the last root call left in this thread; a submodule call made
inside a call keeps the outer call's budget. The crafted files that would blow up
(catalogue_growth.direct_call_cases) run in test_growth_files.py's capped child with the other growth files."""
from __future__ import annotations

import io
import threading
import warnings

import pytest
import torch

import tracejit
from catalogue_growth import SUB_FACTOR, Caller, caller_file
from tracejit.support import call_budget


def _load(raw: bytes):
    return tracejit.load(io.BytesIO(raw))


def test_nested_calls_keep_the_outer_budget_and_direct_calls_count_their_own_inputs():
    """One file: the submodule makes 8 x 2^23 = 2^26 bools. Inside ``slice_then_grow`` on 2^20 elements (budget
    64 x 2^20 = 2^26) that is allowed, though the submodule's own input is 8 elements; the same submodule
    called directly on 8 elements right after is refused (its own budget: the file's 2^25)."""
    loaded = _load(caller_file(2 ** 23))
    y = torch.randn(2 ** 20)
    assert loaded.slice_then_grow(y).shape == (2 ** 26,)
    with pytest.raises(tracejit.BudgetError, match=r"aten::ones at .*catalogue_growth.py:\d+ would allocate "
                                                   r"67108864 elements.*64 x the call's input tensors"):
        loaded.sub.forward(torch.randn(8))
    with pytest.raises(tracejit.BudgetError):   # by __call__ too
        loaded.sub(torch.randn(8))


def test_a_legit_direct_submodule_call_computes_what_eager_and_jit_compute():
    """The unedited file: a direct call on a big input of its own is within its own budget (2^22 x 16 bools
    = 2^26 > the file's 2^25), whatever the last root call was, in this thread or a fresh one."""
    loaded = _load(caller_file())
    module = Caller()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        jit = torch.jit.trace_module(module, {"forward": (torch.randn(3),), "slice_then_grow": (torch.randn(8),)})
    with pytest.raises(RuntimeError, match="Trace submodules cannot be called"):   # torch.jit: not an entry point
        jit.sub.forward(torch.randn(5))
    torch.testing.assert_close(jit.slice_then_grow(torch.randn(20)), module.slice_then_grow(torch.randn(20)))
    loaded(torch.randn(3))   # a small root call: its budget must not hold the direct call below
    for n in (5, 2 ** 22):
        y = torch.randn(n)
        want = module.sub(y)
        assert want.shape == (n * SUB_FACTOR,)
        torch.testing.assert_close(loaded.sub.forward(y), want)
    got = []
    thread = threading.Thread(target=lambda: got.append(loaded.sub(torch.randn(2 ** 22)).shape))
    thread.start()
    thread.join()
    assert got == [(2 ** 26,)]


def test_a_real_models_submodule_called_directly_runs_like_eager():
    transformers = pytest.importorskip("transformers")
    cfg = transformers.BertConfig(vocab_size=100, hidden_size=32, num_hidden_layers=1, num_attention_heads=4,
                                  intermediate_size=64, max_position_embeddings=64, pad_token_id=0)
    model = transformers.BertModel(cfg).eval()
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")
        traced = tracejit.trace(model, (torch.randint(1, 100, (2, 7)),), strict=False)
        buf = io.BytesIO()
        tracejit.save(traced, buf)
        loaded = _load(buf.getvalue())
        layer = loaded.encoder.layer._modules["0"]
        assert "_tj_budget_inputs(_tj_budget_allow, hidden_states)" in layer._traced_methods["forward"].code
        # a Linear's only check is gated: it counts its inputs inside the gate, not on every call
        dense = layer.intermediate.dense._traced_methods["forward"].code
        assert "_tj_budget_inputs(_tj_budget_allow, input); _tj_budget" in dense and "\n    _tj_budget_inputs" not in dense
        h = torch.randn(3, 5, 32)   # another batch and length than traced
        want = model.encoder.layer[0](h)
        want = want[0] if isinstance(want, tuple) else want
        got = layer.forward(h, None, None, encoder_attention_mask=None, past_key_values=None, position_ids=None)
        torch.testing.assert_close(got, want)
        torch.testing.assert_close(layer.intermediate.forward(h), model.encoder.layer[0].intermediate(h))


def test_the_entry_test_reads_the_callers_globals():
    """``enter_call`` counts the inputs unless its caller is a loaded program's own generated code (whose
    globals hold ``enter_call`` as ``_tj_budget_inputs``)."""
    def functions(marked: bool) -> dict:
        ns = {"_tj_budget_inputs": call_budget.enter_call, "_tj_budget_allow": call_budget.Allowance(0, (), 0, 0)}
        exec("def generated(*xs):\n    _tj_budget_inputs(_tj_budget_allow, *xs)\n", ns)   # a generated method's first statement
        caller = dict(ns) if marked else {}
        caller["generated"] = ns["generated"]
        exec("def caller(*xs):\n    generated(*xs)\n", caller)
        return caller

    functions(marked=False)["caller"](torch.ones(5), torch.ones(2, 3))   # the user's code calls it: an entry
    assert call_budget._CALL.elements == 11
    functions(marked=True)["caller"](torch.ones(7))   # a generated method calls it: nested
    assert call_budget._CALL.elements == 11
