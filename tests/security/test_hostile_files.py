"""Hostile files (tests/security/catalogue.py) loaded and called in a child process with a memory and
CPU limit: no code runs (the canary never appears), the process never dies, every rejection is a
LoadError that comes quickly, and renaming things in a file changes nothing but names."""
from __future__ import annotations

import os

import pytest

from security_testlib import output_sum, run_child
from catalogue import base_of, bound_cases, code_cases, crash_and_schema_cases

# CPU seconds (not wall time: the machine is shared) that rejecting a hostile file may take
REJECT_CPU_S = 1.0


def _check(bases, tmp_path, make_cases):
    canary = str(tmp_path / "canary")
    cases = make_cases(bases, canary) if make_cases is code_cases else make_cases(bases)
    jobs = []
    for name, raw, expect in cases:
        traced, _, inputs = bases[base_of(name)]
        job = {"name": name, "raw": raw, "inputs": inputs}
        if expect == "same":
            job["expect_sum"] = output_sum(traced, inputs)
        jobs.append(job)
    report = run_child(tmp_path, jobs, canary)
    assert not os.path.exists(canary), "code from a file ran"
    problems = []
    for name, _, expect in cases:
        r = report[name]
        if r["canary"]:
            problems.append(f"{name}: the canary appeared")
        if r["outcome"] == "error":
            problems.append(f"{name}: load raised something other than LoadError: {r['message']}")
        elif expect == "reject":
            if r["outcome"] != "load_error":
                problems.append(f"{name}: loaded (call: {r.get('call')}) but must be refused")
            elif "MemoryError" in r["message"] or "malformed (" in r["message"]:
                problems.append(f"{name}: refused only by the last-resort net: {r['message']}")
            elif r["load_cpu_s"] > REJECT_CPU_S:
                problems.append(f"{name}: refusing it took {r['load_cpu_s']:.2f} CPU seconds")
        elif expect == "same":
            if r["outcome"] != "loaded" or r.get("call") != "same":
                problems.append(f"{name}: expected to load and compute the same; {r['outcome']} "
                                f"{r.get('message', '')} call={r.get('call')}")
        elif expect == "loaded" and r["outcome"] != "loaded":
            problems.append(f"{name}: a legitimate file was refused: {r.get('message')}")
    assert not problems, "\n".join(problems)
    return report


def test_nothing_from_a_file_reaches_generated_code(bases, tmp_path):
    _check(bases, tmp_path, code_cases)


def test_loading_is_bounded(bases, tmp_path):
    report = _check(bases, tmp_path, bound_cases)
    assert report["nodes_20k_legit"]["call"] == "ok"


def test_no_crash_and_no_schema_gaps(bases, tmp_path):
    _check(bases, tmp_path, crash_and_schema_cases)


def test_weights_survive_truncation_of_the_file(bases, tmp_path):
    """Weights are read into memory by default: truncating the file after load cannot kill the process."""
    traced, raw, inputs = bases["net"]
    path = tmp_path / "net.tjit"
    path.write_bytes(raw)
    canary = str(tmp_path / "canary")
    report = run_child(tmp_path, [{"name": "truncated", "path": str(path), "inputs": inputs,
                                   "expect_sum": output_sum(traced, inputs), "truncate_after_load": True}], canary)
    assert report["truncated"]["outcome"] == "loaded"
    assert report["truncated"]["call"] == "same"
    assert report["truncated"]["call_after_truncation"] == "same"
    assert os.path.getsize(path) == 64


def test_check_integrity_false_does_not_open_the_door(bases, tmp_path):
    """Skipping the CRC check skips only the CRC check."""
    canary = str(tmp_path / "canary")
    cases = [c for c in code_cases(bases, canary) if c[2] == "reject"][:12]
    jobs = [{"name": name, "raw": raw[:-1] + bytes([raw[-1] ^ 1]), "inputs": bases["net"][2],
             "kw": {"check_integrity": False}} for name, raw, _ in cases]
    report = run_child(tmp_path, jobs, canary)
    assert not os.path.exists(canary)
    for name, *_ in cases:
        assert report[name]["outcome"] == "load_error", (name, report[name])


def test_mmap_is_an_explicit_option(bases, tmp_path):
    """load(..., mmap=True) maps the weights (same results); the default reads them into memory."""
    import tracejit
    traced, raw, inputs = bases["net"]
    path = tmp_path / "net.tjit"
    path.write_bytes(raw)
    want = output_sum(traced, inputs)
    assert output_sum(tracejit.load(path, mmap=True), inputs) == pytest.approx(want)
    assert output_sum(tracejit.load(path), inputs) == pytest.approx(want)
