"""Round 27's files (catalogue_round27.py): a call's work is held to its traced call's (support/call_budget.Allowance):
a tiny file's call stops after about 0.05 s of work instead of 20 s, a file whose traced call alone claims more
than its tensors and inputs allow is refused at load, and real patterns called on larger inputs than traced (a
longer attention, a bigger batch) answer as eager well within their allowance. Then allow-listed ops with odd
arguments, claimed dtypes, input names that collide with generated code's, dead graphs and a contradicting
specialization: none crashes, reads outside a storage or answers otherwise than the unedited program; the viewer
renders each or refuses it."""
from __future__ import annotations

import io
import os

import pytest
import torch
from torch import nn

import tracejit
from catalogue_round26 import elementwise_chain, sized
from catalogue_round27 import KEY_EDITS, _flat, _Ops, attention, dict_io, odd_cases, products, structure_cases
from security_testlib import (CheapSin, cost_and_canary, load_bytes, output_sum, rewrite, run_child, to_bytes,
                              traced_bytes)
from tracejit.serialize import read_program
from tracejit.support import call_budget
from tracejit.viewer import program_document, render_html


@pytest.fixture(autouse=True)
def _no_cache(monkeypatch):
    monkeypatch.setenv("TRACEJIT_CACHE_DIR", "")


_CheapSin, _load = CheapSin, load_bytes   # (security_testlib: conftest.py)


def _call_work(loaded, *args):
    """(the call's answer, its counted work, its allowance)."""
    out = loaded(*args)
    return out, call_budget._CALL.work, call_budget.call_limit()


def test_a_tiny_files_call_stops_at_the_floor_not_the_cap():
    """400 sines of a factory edited to 2^22 elements behind a traced type of 8: loads, and each call stops with a
    BudgetError within ALLOWANCE_FLOOR (before: the cap, 8 x 4096 x 2^25, let about 128 sines run, 5 s a call)."""
    loaded = _load(sized(traced_bytes(elementwise_chain(400), (torch.randn(3, 8),)), 2 ** 22))
    for shape in ((3, 8), (5, 4)):
        _CheapSin.ran = 0
        with _CheapSin(), pytest.raises(tracejit.BudgetError, match="more than the ops of one call"):
            loaded(torch.randn(*shape))
        assert call_budget.call_limit() == call_budget.ALLOWANCE_FLOOR
        ran_before = (call_budget.TOTAL_WORK_FACTOR * call_budget.WORK_FACTOR * 2 ** 25) // (
            tracejit.ops.step_work("aten::sin") * 2 ** 22)
        assert _CheapSin.ran <= call_budget.ALLOWANCE_FLOOR // (tracejit.ops.step_work("aten::sin") * 2 ** 22) + 1
        assert _CheapSin.ran < ran_before // 16


@pytest.mark.parametrize("n,k", [(1024, 3), (2048, 1)])
def test_a_traced_call_claiming_more_than_its_file_allows_is_a_load_error(n, k):
    """k products of an n x n matrix of zeros from a 3 x 8 input and no weights (round 25's work_chain: 4096, 10):
    its own traced call needs more than 16 x 256 x (weights + 24) x 24 (the floor): a LoadError naming the work,
    before any call (before: it loaded and each call ran the products)."""
    raw = traced_bytes(products(n, k), (torch.randn(3, 8),))
    with pytest.raises(tracejit.LoadError, match=r"its traced call would compute \d+ multiply-adds"):
        _load(raw)
    small = traced_bytes(products(64, 2), (torch.randn(3, 8),))   # the same program at a size it may claim
    x = torch.randn(4, 2)
    torch.testing.assert_close(_load(small)(x), products(64, 2)(x))


@pytest.mark.parametrize("length", [8, 96, 384])
def test_attention_longer_than_traced_answers_as_eager_well_within_its_allowance(length):
    """An attention traced at length 16 and called at other lengths: eager's answer, and its counted work a small
    share of the allowance (which grows with the square of the length)."""
    loaded = _load(traced_bytes(attention, (torch.randn(16, 32),)))
    x = torch.randn(length, 32)
    out, work, limit = _call_work(loaded, x)
    torch.testing.assert_close(out, attention(x))
    assert work <= limit / 8


class _Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.fc = nn.Linear(8, 4)

    def forward(self, x):
        return self.fc(self.conv(x).relu().mean(dim=(2, 3))).sin().cumsum(-1)


@pytest.mark.parametrize("shape", [(1, 3, 16, 16), (8, 3, 16, 16), (2, 3, 64, 48)])
def test_a_model_at_other_batches_and_sizes_answers_as_eager(shape):
    """A conv net traced at batch 1, 16 x 16, called at batch 8 and at a larger image: eager's (and
    torch.jit.trace's) answer; its work within its allowance."""
    model = _Net().eval()
    loaded = _load(traced_bytes(model, (torch.randn(1, 3, 16, 16),)))
    x = torch.randn(*shape)
    with torch.no_grad():
        want = model(x)
        jit = torch.jit.trace(model, (torch.randn(1, 3, 16, 16),))(x)
        got = loaded(x)
    torch.testing.assert_close(got, want)
    torch.testing.assert_close(jit, want)


def test_the_allowance_rests_on_the_call_and_the_files_tensors_not_on_claims():
    """A traced call's work (``work``) and shapes are what the file's types claim; ``claim(n)`` rests on the real
    input elements and tensors alone, so a file claiming huge traced work gets no more than it for a small call."""
    allow = call_budget.Allowance(10 ** 15, ((3, 8),), 2 ** 25, 0)
    assert allow.limit([(3, 8)], 24) == call_budget.ALLOWANCE_FLOOR
    big = call_budget.Allowance(10 ** 15, ((3, 8),), 2 ** 25, 10 ** 6)   # a file of 10^6 weights
    n = 24
    assert big.limit([(3, 8)], n) == call_budget.ALLOWANCE_FACTOR * call_budget.CLAIM_FACTOR * (
        10 ** 6 + n) * n
    small = call_budget.Allowance(1000, ((3, 8),), 2 ** 25, 10 ** 6)   # growth: 4 x 2 -> 64 x the traced work
    assert small.limit([(12, 16)], 192) == call_budget.ALLOWANCE_FLOOR
    grown = call_budget.Allowance(10 ** 8, ((3, 8),), 2 ** 25, 10 ** 6)
    assert grown.limit([(12, 16)], 192) == call_budget.ALLOWANCE_FACTOR * 10 ** 8 * 64


def test_the_code_cache_keeps_the_allowance(monkeypatch, tmp_path):
    """The allowance is plain data in the code cache: the load made from the entry holds the same."""
    monkeypatch.setenv("TRACEJIT_CACHE_DIR", str(tmp_path))
    raw = traced_bytes(attention, (torch.randn(16, 32),))
    made = []
    for _ in range(2):
        loaded = _load(raw)
        made.append(loaded._fn.__globals__["_tj_budget_allow"].made_of)
        loaded(torch.randn(40, 32))
        made.append(call_budget.call_limit())
        assert [p for p in os.listdir(tmp_path) if p.endswith(".tjc")], "no cache entry written"
    assert made[0] == made[2] and made[1] == made[3]


# ------------------------------------------------------------------------------------------ odd arguments
def _expected_sums() -> dict:
    """What the unedited programs answer on the jobs' input (eager: the module and function the files were made
    from)."""
    torch.manual_seed(0)
    ops = _Ops().eval()
    return {"ops": output_sum(ops, "1:3,8"), "flat": output_sum(_flat, "1:3,8")}


def test_odd_arguments_types_names_and_structure_never_crash_or_read_outside(tmp_path):
    """Every edit of catalogue_round27 (odd dims, strides, offsets, indices, dtypes, input names, dead graphs, a
    contradicting specialization), loaded and called in a capped child: no crash (each job reports), no canary,
    within 2 CPU seconds; a case whose answer would be memory outside a storage never answers (a LoadError, a
    GuardError, or the kernel's own check); renamed inputs answer as the unedited program."""
    want = _expected_sums()
    cases = odd_cases() + structure_cases()
    jobs = []
    for name, raw, spec, kind in cases:
        job = {"name": name, "raw": raw, "inputs": spec}
        if kind == "same":
            job["expect_sum"] = want["flat" if "specialization" in name else "ops"]
        jobs.append(job)
    report = run_child(tmp_path, jobs, str(tmp_path / "canary"), mem_mb=400, cpu_s=120)
    problems = []
    for name, raw, spec, kind in cases:
        r = report.get(name)
        if r is None or "outcome" not in r:
            problems.append(f"{name}: no report (the child crashed at it?)")
            continue
        got = f"{r['outcome']} {r.get('message', '')[:120]} call={r.get('call')} {r.get('call_message', '')[:120]}"
        if r["outcome"] not in ("loaded", "load_error"):
            problems.append(f"{name}: {got}")
        if kind == "read" and r.get("call") == "ok":
            problems.append(f"{name}: answered (memory outside a storage?): {got}")
        if kind == "same" and r.get("call") != "same":
            problems.append(f"{name}: expected the unedited answer, got {got}")
        problems += cost_and_canary(name, r, 2.0)
    assert not problems, "\n".join(problems)


def test_the_viewer_renders_every_round27_file_or_refuses_it():
    """``tracejit view``'s page of each file (read without running it, weights on the meta device): a page no
    bigger than a fixed multiple of the file, or the loader's LoadError; nothing else."""
    for name, raw, _, _ in odd_cases() + structure_cases():
        try:
            html = render_html(program_document(read_program(io.BytesIO(raw), map_location="meta")))
        except tracejit.LoadError:
            continue
        assert len(html) <= 64 * len(raw) + 4_000_000, name


def _dict_file() -> bytes:
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return to_bytes(tracejit.trace(dict_io, ({"p": torch.randn(3), "q": torch.randn(3)},), strict=False))


@pytest.mark.parametrize("name", sorted(KEY_EDITS))
def test_a_dict_structure_whose_keys_repeat_is_a_load_error(name):
    """An output dict {"a": x + 1, "a": x * 2} loaded and answered {"a": x * 2}: one output silently dropped (and
    an input dict of repeated keys would read one argument twice). A trace never writes repeated keys: LoadError."""
    raw = _dict_file()
    x = {"p": torch.randn(5), "q": torch.randn(5)}
    got = _load(raw)(x)
    want = dict_io(x)
    assert got.keys() == want.keys() and all(torch.equal(got[k], want[k]) for k in want)
    with pytest.raises(tracejit.LoadError, match="repeats"):
        _load(rewrite(raw, edit_doc=KEY_EDITS[name]))
