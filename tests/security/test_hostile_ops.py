"""The issue-21 catalogue of hostile ops (catalogue_ops.py), loaded and called in a child process with a
memory and CPU limit: no crash, no unwritten memory returned, every file refused at load (LoadError
naming the reason) or at call (BudgetError / GuardError before the op allocates), each within 2 CPU
seconds."""
from __future__ import annotations

import pytest

from catalogue_ops import all_cases, saved_bases
from security_testlib import run_child

CPU_S = 2.0


@pytest.fixture(scope="module")
def op_bases():
    return saved_bases()


def test_hostile_ops_are_refused_at_load_or_at_call(op_bases, tmp_path):
    cases = all_cases(op_bases)
    assert len(cases) >= 80
    jobs = [{"name": name, "raw": raw, "inputs": op_bases[base][2]} for name, raw, _, base, _ in cases]
    canary = str(tmp_path / "canary")
    report = run_child(tmp_path, jobs, canary, mem_mb=400, cpu_s=120)
    problems = []
    for name, _, expect, base, fragment in cases:
        r = report[name]
        spent = r["load_cpu_s"] + r.get("call_cpu_s", 0.0)
        if spent > CPU_S:
            problems.append(f"{name}: {spent:.2f} CPU seconds")
        if expect == "reject":
            if r["outcome"] != "load_error" or fragment not in r["message"]:
                problems.append(f"{name}: expected a LoadError with {fragment!r}; {r['outcome']} "
                                f"{r.get('message', '')} call={r.get('call')} {r.get('call_message', '')}")
            elif "MemoryError" in r["message"]:
                problems.append(f"{name}: refused only by the memory limit: {r['message']}")
        else:
            if r["outcome"] != "loaded" or r.get("call") != f"raised {fragment}":
                problems.append(f"{name}: expected to load and raise {fragment} when called; {r['outcome']} "
                                f"{r.get('message', '')} call={r.get('call')} {r.get('call_message', '')}")
            elif "elements" not in r["call_message"] and "64 bits" not in r["call_message"] \
                    and "list" not in r["call_message"]:
                problems.append(f"{name}: unclear message {r['call_message']!r}")
    assert not problems, "\n".join(problems)


def test_the_unedited_bases_load_and_compute_what_they_traced(op_bases):
    """The catalogue's starting points are legitimate: the checks refuse the edits, not the programs."""
    import io

    import torch

    import tracejit
    from catalogue_ops import _shapes
    for name, (traced, raw, spec) in op_bases.items():
        loaded = tracejit.load(io.BytesIO(raw))
        inputs = [torch.randn(*s) for s in _shapes(spec)]
        torch.testing.assert_close(loaded(*inputs), traced(*inputs), msg=name)
