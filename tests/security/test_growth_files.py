"""Memory grown from small inputs at call time (issue 21: the broadcast gap and chained growth):
crafted files (catalogue_growth.py) loaded and called in a child process whose address space is
capped, each refused with a BudgetError before the op allocates; the same programs unedited compute
what eager and torch.jit.trace compute on other inputs; and, default-deny, every allowed op that
takes two or more tensors is counted by a size rule that bounds eager's output."""
from __future__ import annotations

import io
import warnings

import pytest
import torch
from hypothesis import given, settings, strategies as st

import tracejit
from catalogue_growth import BROADCASTS, DOUBLINGS, _chain, _save, direct_call_cases, growth_cases
from security_testlib import rewrite, run_child
from tracejit.serialize import op_allowlist, size_rules
from tracejit.trace import ops as opnames

CPU_S = 2.0


def test_growing_files_are_refused_before_they_allocate(tmp_path):
    cases = growth_cases()
    assert len(cases) == len(BROADCASTS) + len(DOUBLINGS)
    direct = direct_call_cases()   # submodule methods called directly (test_submodule_calls.py): one child for both
    jobs = [{"name": name, "raw": raw, "inputs": spec} for name, raw, spec in cases] + direct
    # 400 MB of address space beyond torch's: one n x n result (2^48 floats) would need 1 PB; the direct
    # submodule calls ask for 512 MB (after a root call whose budget would have allowed it) and 8 TB
    report = run_child(tmp_path, jobs, str(tmp_path / "canary"), mem_mb=400, cpu_s=120)
    problems = []
    for name in [c[0] for c in cases] + [j["name"] for j in direct]:
        r = report[name]
        if r["outcome"] == "load_error" and "its traced call would compute" in r.get("message", "") \
                and name.startswith("chain_"):   # round 27: a chain whose traced shapes already grow past the cap
            pass
        elif r["outcome"] != "loaded" or r.get("call") != "raised BudgetError":
            problems.append(f"{name}: {r['outcome']} {r.get('message', '')} call={r.get('call')} "
                            f"{r.get('call_message', '')}")
        elif "would allocate" not in r["call_message"] or "catalogue_growth.py:" not in r["call_message"]:
            problems.append(f"{name}: the message names neither the allocation nor the line: {r['call_message']}")
        if r["load_cpu_s"] + r.get("call_cpu_s", 0.0) > CPU_S:
            problems.append(f"{name}: {r['load_cpu_s'] + r.get('call_cpu_s', 0.0):.2f} CPU seconds")
    assert not problems, "\n".join(problems)


def _load(raw: bytes):
    return tracejit.load(io.BytesIO(raw))


@pytest.mark.parametrize("name", sorted(BROADCASTS))
def test_the_unedited_programs_compute_what_eager_and_jit_compute(name):
    fn = BROADCASTS[name]
    loaded = _load(_save(fn))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        reference = torch.jit.trace(fn, (torch.randn(8),), check_trace=False)
    for n in (3, 21, 150):   # other lengths: other output sizes (n^2 grows past 64 x the input at 150)
        x = torch.randn(n)
        want = fn(x)
        assert want.shape != fn(torch.randn(8)).shape or want.dim() == 0
        torch.testing.assert_close(loaded(x), want)
        torch.testing.assert_close(reference(x), want)


@pytest.mark.parametrize("name", sorted(DOUBLINGS))
def test_a_chain_of_doublings_within_the_budget_runs_like_eager(name):
    step = DOUBLINGS[name]
    loaded = _load(rewrite(_save(step), edit_doc=lambda d: _chain(d, 12)))
    for n in (8, 5):
        x = want = torch.randn(n)
        for _ in range(12):
            want = step(want)
        assert want.numel() == n * 2 ** 12
        torch.testing.assert_close(loaded(x), want)


def test_the_budget_is_the_calls_not_each_ops():
    """At a call an op is held to the call's budget (here 2^18 from the file, or 64 x the 8 input
    elements), not to 64 x its own argument as at load, so doubling step by step stops there."""
    loaded = _load(rewrite(_save(DOUBLINGS["cat"]), edit_doc=lambda d: _chain(d, 16)))
    from tracejit.support import call_budget
    why = call_budget.over_budget(size_rules.SEVERAL_TENSORS, {"tensors": [torch.ones(2 ** 18)] * 2}, 2 ** 18, 8)
    assert why is not None and "64 x the call's input tensors" in why
    assert call_budget.over_budget(size_rules.SEVERAL_TENSORS, {"tensors": [torch.ones(2 ** 18)] * 2}, 2 ** 18) \
        is None   # at load (traced sizes) an op may still make 64 x its largest argument
    torch.testing.assert_close(loaded(torch.ones(8)), torch.ones(8 * 2 ** 16))   # 2^19: within 2^25


# ----------------------------------------------------------------------------------- default-deny
def _tensor_arguments(schema) -> int:
    n = 0
    for a in schema.arguments:
        t = str(a.type)
        if a.name != "out" and t.startswith("Tensor"):
            n += 2 if t.startswith("Tensor[]") else 1   # a list can hold two
    return n


def test_every_allowed_op_of_several_tensors_is_counted():
    """Default-deny: an allowed op whose schema takes two or more tensors (a list counts as two) gets a
    size rule, its own or the broadcast-or-sum one; one of a single tensor needs its family's reason
    (test_size_rules.py). A new op of several tensors is counted without anyone listing it."""
    uncounted = []
    for op in sorted(op_allowlist.ALLOWED):
        packet = opnames.aten_packet(op)
        for ov in (packet.overloads() if packet is not None else ()):
            schema = getattr(packet, ov)._schema
            if _tensor_arguments(schema) < 2 or schema.is_mutable:
                continue
            bound = {a.name: torch.empty(2, device="meta") for a in schema.arguments
                     if str(a.type).startswith("Tensor") and a.name != "out"}
            if size_rules.rule_for(op, bound) is None:
                uncounted.append(f"aten::{op}.{ov}")
    assert not uncounted, uncounted
    assert size_rules.rule_for("add", {"self": torch.ones(2), "other": 1.0}) is None   # one tensor: bounded by it
    assert size_rules.rule_for("add_", {"self": torch.ones(2), "other": torch.ones(1, 2)}) is None   # into self


_BROADCAST_OPS = {
    "add": torch.add, "mul": torch.mul, "where": lambda a, b: torch.where(a > 0, a, b),
    "addcmul": lambda a, b: torch.addcmul(a, a, b), "lerp": lambda a, b: torch.lerp(a, b, 0.3),
    "masked_fill": lambda a, b: a.masked_fill(b > 0, 0.0), "hypot": torch.hypot, "maximum": torch.maximum,
    "atan2": torch.atan2, "cosine_similarity": lambda a, b: torch.cosine_similarity(a, b, dim=0),
    "pairwise_distance": torch.pairwise_distance, "masked_select": lambda a, b: a.masked_select(b > -9),
    "cat": lambda a, b: torch.cat([a.flatten(), b.flatten()]), "stack": lambda a, b: torch.stack([a, a]),
    "linalg_cross": lambda a, b: torch.linalg.cross(a, b),
}


def _bind(op, a, b):
    return {"cat": {"tensors": [a, b]}, "stack": {"tensors": [a, a]}, "masked_select": {"self": a, "mask": b},
            "masked_fill": {"self": a, "mask": b}, "cosine_similarity": {"x1": a, "x2": b},
            "pairwise_distance": {"x1": a, "x2": b}, "where": {"condition": a, "self": a, "other": b},
            "addcmul": {"self": a, "tensor1": a, "tensor2": b}, "lerp": {"self": a, "end": b},
            "linalg_cross": {"self": a, "other": b}}.get(op, {"self": a, "other": b})


@settings(max_examples=80, deadline=None)
@given(st.sampled_from(sorted(_BROADCAST_OPS)), st.lists(st.integers(1, 5), min_size=1, max_size=4),
       st.data())
def test_the_derived_rule_counts_at_least_what_eager_makes(op, shape, data):
    """Operands that broadcast: each dimension of one is 1 or the other's (so both can grow)."""
    other = [data.draw(st.sampled_from([1, d])) for d in shape]
    mine = [d if o != 1 or data.draw(st.booleans()) else 1 for d, o in zip(shape, other)]
    if op == "linalg_cross":   # vectors of 3 in the last dimension, the batch dimensions broadcast
        mine, other = mine + [3], other + [3]
    a, b = torch.randn(*mine), torch.randn(*other)
    try:
        out = _BROADCAST_OPS[op](a, b)
    except RuntimeError:
        return   # shapes this op refuses (stack: equal shapes)
    rule = size_rules.rule_for(op, _bind(op, a, b))
    assert rule is size_rules.SEVERAL_TENSORS
    assert rule.elements(_bind(op, a, b)) >= out.numel()


def test_ops_that_outgrow_their_broadcast_have_their_own_rule():
    x, q = torch.randn(3, 50), torch.linspace(0, 1, 40)
    for op in ("quantile", "nanquantile"):
        assert size_rules.rule_for(op, {"self": x, "q": q}).elements({"self": x, "q": q}) >= \
            getattr(torch, op)(x, q, dim=0).numel()   # 40 x 50 from 150 + 40
    y = torch.ones(4, 3, 2)
    chained = torch.nonzero(torch.nonzero(y))   # rank x the input at each step
    assert size_rules.rule_for("nonzero", {"self": y}).elements({"self": y}) >= torch.nonzero(y).numel()
    assert chained.numel() > torch.nonzero(y).numel() > y.numel()
