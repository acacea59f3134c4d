"""Hypothesis fuzz of the ops a file names and their int arguments (issue 21): an ATen node of a real save
gets another op (from the allow-list, off it, or made up, its call target to match) and some of its
int arguments, positional or keyword, replaced by enum-like and huge values, and its string arguments
(the string enums: reduction, rounding and padding modes, approximations, indexing, norms) by other
modes, made-up ones and terminal escapes, with the CRC recomputed. All files are then
loaded and called in one child process under memory and CPU limits: 0 crashes, 0 exceptions other
than LoadError at load, load and call under 2 CPU seconds each file.

TRACEJIT_FUZZ_EXAMPLES sets the number of files (default 150), TRACEJIT_FUZZ_RANDOM=1 a random seed.
"""
from __future__ import annotations

import copy
import os

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from catalogue_ops import OFF_LIST, saved_bases
from security_testlib import assemble, parse, run_child
from tracejit.serialize import op_allowlist

EXAMPLES = int(os.environ.get("TRACEJIT_FUZZ_EXAMPLES", 150))
OP_NAMES = sorted(op_allowlist.ALLOWED) + OFF_LIST + ["definitely_not_an_op", "add_", "expand_", "_softmax"]
INTS = [-1, 0, 1, 2, 3, 4, 7, 9, 64, 100, 4096, 2 ** 20, 2 ** 25, 2 ** 31, 2 ** 33, 2 ** 62, 10 ** 18]
STRINGS = ["none", "mean", "sum", "tanh", "floor", "trunc", "same", "valid", "ij", "xy", "bilinear", "nearest",
           "bicubic", "reflect", "circular", "fro", "nuc", "left", "right", "amax", "bogus", "", "\x1b[2J",
           "a" * 300]


@pytest.fixture(scope="module")
def op_bases():
    return saved_bases()


def _aten_nodes(doc):
    return [n for g in doc["program"]["graphs"] for n in g["nodes"] if n["op"].startswith("aten::")]


def _replace(x, ints, strings):
    """x with its ints (not bools, not value references) and strings replaced from ``ints`` / ``strings``
    in turn."""
    if isinstance(x, bool) or x is None:
        return x
    if isinstance(x, int):
        return next(ints, x)
    if isinstance(x, str):
        return next(strings, x)
    if isinstance(x, list):
        return [_replace(v, ints, strings) for v in x]
    if isinstance(x, dict) and "tuple" in x:
        return {"tuple": _replace(x["tuple"], ints, strings)}
    return x


def test_fuzzed_ops_and_int_arguments_never_crash_or_run_long(op_bases, tmp_path):
    parsed = {k: parse(v[1]) for k, v in op_bases.items()}
    files = []

    @settings(max_examples=EXAMPLES, deadline=None, derandomize=not os.environ.get("TRACEJIT_FUZZ_RANDOM"),
              database=None, suppress_health_check=list(HealthCheck))
    @given(base=st.sampled_from(sorted(op_bases)), which=st.integers(0, 50),
           op=st.one_of(st.none(), st.sampled_from(OP_NAMES)), ints=st.lists(st.sampled_from(INTS), max_size=4),
           strings=st.lists(st.sampled_from(STRINGS), max_size=2),
           overload=st.sampled_from([None, "default", "int", "Tensor"]))
    def make(base, which, op, ints, strings, overload):
        doc, tensors = parsed[base]
        doc = copy.deepcopy(doc)
        nodes = _aten_nodes(doc)
        n = nodes[which % len(nodes)]
        if op is not None:
            n["op"] = f"aten::{op}" + (f".{overload}" if overload else "")
            n["target"] = f"fn:torch.{op}"
        ints, strings = iter(ints), iter(strings)
        n["args"] = _replace(n["args"], ints, strings)
        n["kwargs"] = [[k, _replace(v, ints, strings)] for k, v in n.get("kwargs", [])]
        files.append({"name": f"fuzz{len(files)}", "raw": assemble(doc, tensors), "inputs": op_bases[base][2]})

    make()
    report = run_child(tmp_path, files, str(tmp_path / "canary"), mem_mb=400, cpu_s=600)
    errors = {n: r["message"] for n, r in report.items() if r["outcome"] == "error"}
    slow = {n: r["load_cpu_s"] + r.get("call_cpu_s", 0.0) for n, r in report.items()
            if r["load_cpu_s"] + r.get("call_cpu_s", 0.0) > 2.0}
    assert not errors, errors
    assert not slow, slow
    outcomes = [r["outcome"] for r in report.values()]
    calls = [r.get("call", "") for r in report.values() if r["outcome"] == "loaded"]
    print(f"{len(outcomes)} files: {outcomes.count('load_error')} refused at load, {len(calls)} loaded; calls: "
          f"{calls.count('ok')} ok, {sum(c.startswith('raised') for c in calls)} raised "
          f"({sorted(set(c for c in calls if c.startswith('raised')))}); max load + call CPU "
          f"{max(r['load_cpu_s'] + r.get('call_cpu_s', 0.0) for r in report.values()):.2f} s")
    assert outcomes.count("load_error") > len(outcomes) // 4   # the edits reach the checks
    assert outcomes.count("loaded") > 0                         # and not every edit is refused
