"""Round 28's files (catalogue_round28.py): left-out methods (a module entry's ``left_out``) and the op-name facts a
load now reads once per file. Each file loaded and its root called in a capped child: no crash, no canary, within
2 CPU seconds; a refused file is a LoadError from a check that names the problem; a well-formed ``left_out`` loads,
the root answers as the unedited program, and the left-out method called directly raises a LoadError whose
message holds no control character of the file; the viewer renders each file or refuses it."""
from __future__ import annotations

import io

import pytest

import tracejit
from catalogue_round28 import INPUTS, LeftOutModel, Shared, cases, expected_model
from security_testlib import cost_and_canary, output_sum, run_child
from tracejit.serialize import read_program
from tracejit.viewer import program_document, render_html

LAST_RESORT = "the program is malformed ("


@pytest.fixture(autouse=True)
def _no_cache(monkeypatch):
    monkeypatch.setenv("TRACEJIT_CACHE_DIR", "")


def test_left_out_entries_and_shared_op_facts_never_crash_run_code_or_answer_otherwise(tmp_path):
    want = {"left": output_sum(expected_model(LeftOutModel), INPUTS), "shared": output_sum(expected_model(Shared), INPUTS)}
    all_cases = cases()
    jobs = []
    for name, raw, spec, expect in all_cases:
        total = want["shared" if name.startswith(("shared", "graph_reused", "left_out_on_shared")) else "left"]
        jobs.append({"name": name, "raw": raw, "inputs": spec, "expect_sum": total})
        if expect == "stub":
            jobs.append({"name": name + "/method", "raw": raw, "inputs": spec, "method": "layer.forward"})
    report = run_child(tmp_path, jobs, str(tmp_path / "canary"), mem_mb=400, cpu_s=120)
    problems = []
    for name, raw, spec, expect in all_cases:
        r = report.get(name)
        if r is None or "outcome" not in r:
            problems.append(f"{name}: no report (the child crashed at it?)")
            continue
        got = f"{r['outcome']} {r.get('message', '')[:160]!r} call={r.get('call')} {r.get('call_message', '')[:160]!r}"
        if expect == "load_error":
            if r["outcome"] != "load_error" or r.get("message", "").startswith(LAST_RESORT):
                problems.append(f"{name}: expected a LoadError from a check, got {got}")
        elif r["outcome"] != "loaded" or r.get("call") != "same":
            problems.append(f"{name}: expected it to load and answer as the unedited program, got {got}")
        if expect == "stub":
            m = report.get(name + "/method", {})
            if m.get("call") != "raised LoadError" or "not in this file" not in m.get("call_message", ""):
                problems.append(f"{name}: the left-out method answered or raised otherwise: {m}")
            if any(ord(ch) < 32 for ch in m.get("call_message", "")):
                problems.append(f"{name}: the left-out method's message holds a control character of the file")
        problems += cost_and_canary(name, r, 2.0)
    assert not problems, "\n".join(problems)


def test_the_viewer_renders_every_round28_file_or_refuses_it():
    for name, raw, _, _ in cases():
        try:
            html = render_html(program_document(read_program(io.BytesIO(raw), map_location="meta")))
        except tracejit.LoadError:
            continue
        assert len(html) <= 64 * len(raw) + 4_000_000, name
        assert "\x1b" not in html, name
