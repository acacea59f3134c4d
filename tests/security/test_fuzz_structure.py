"""Hypothesis fuzz of the program's call structure and string fields (issue #21, items 4-6; the
op-name and enum fuzz is test_fuzz_ops.py's): children pointed at other modules (ancestors,
themselves, many times the same), methods added under any name and pointing at any graph, calls
redirected to other paths and methods, and every string a tool shows replaced by HTML breakers,
terminal escapes and code. Each file goes through load, call, ``inspect --graph --code`` and
``view`` in one capped child (tools_child.py): no crash, nothing but LoadError at load, no raw
control character printed, the viewer's page intact, every load and tool under 2 CPU seconds.

``TRACEJIT_FUZZ_EXAMPLES`` sets the number of files (default 60).
"""
from __future__ import annotations

import copy
import json
import os
import subprocess
import sys

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from security_testlib import HERE, ROOT, assemble, injections, parse
from catalogue_tools import HTML_BREAKERS, POSITIONS, SHADOWED, TERMINAL, tools_base
from test_tool_files import page_data

EXAMPLES = int(os.environ.get("TRACEJIT_FUZZ_EXAMPLES", 60))
CPU_S = 2.0


def _structure_edit(doc, kind: str, a: int, b: int, name: str) -> None:
    mods, graphs = doc["program"]["modules"], doc["program"]["graphs"]
    m, other = mods[a % len(mods)], mods[b % len(mods)]
    calls = [n for g in graphs for n in g["nodes"] if n["op"] == "tracejit::call_module"]
    if kind == "child_to" and m.get("children"):
        m["children"][0][1] = other["path"]               # a shared module, an ancestor or itself
    elif kind == "child_add":
        m.setdefault("children", []).append([name, other["path"]])
    elif kind == "method_add":
        m.setdefault("methods", []).append([name, b % len(graphs)])
    elif kind == "method_graph" and m.get("methods"):
        m["methods"][0][1] = b % (len(graphs) + 1)        # also one past the table
    elif kind == "call_path" and calls:
        calls[a % len(calls)]["attrs"]["path"] = name if b % 2 else other["path"] or "inner"
    elif kind == "call_method" and calls:
        calls[a % len(calls)]["attrs"]["method"] = name


def _names():
    return st.sampled_from(SHADOWED + ["forward", "encode", "c", "lin", "inner", "inner.lin", "", "l", "x" * 250]
                           + HTML_BREAKERS + TERMINAL)


def _strings(canary):
    return st.sampled_from(HTML_BREAKERS + TERMINAL + injections(canary) + ["", "a" * 5000, "\x00", "\ud7ff\ufeff"])


def test_fuzzed_structure_and_strings_never_crash_any_tool(tmp_path):
    canary = str(tmp_path / "fuzz-canary")
    bases = tools_base()
    parsed = [parse(raw) for raw in bases]
    files = []
    structure = st.tuples(st.sampled_from(["child_to", "child_add", "method_add", "method_graph", "call_path",
                                           "call_method"]), st.integers(0, 99), st.integers(0, 99), _names())
    strings = st.tuples(st.sampled_from(sorted(POSITIONS)), _strings(canary))

    @settings(max_examples=EXAMPLES, deadline=None, derandomize=not os.environ.get("TRACEJIT_FUZZ_RANDOM"),
              database=None, suppress_health_check=list(HealthCheck))
    @given(base=st.integers(0, 1), edits=st.lists(structure, max_size=3), texts=st.lists(strings, max_size=3))
    def make(base, edits, texts):
        doc, tensors = parsed[base]
        doc = copy.deepcopy(doc)
        for edit in edits:
            _structure_edit(doc, *edit)
        for where, text in texts:
            try:
                POSITIONS[where](doc, text)
            except (KeyError, IndexError, StopIteration, TypeError):
                pass   # the chain base has no such field
        files.append(assemble(doc, tensors))

    make()
    assert len(files) > EXAMPLES // 2
    print(f"{len(files)} fuzzed files")
    jobs = []
    for i, raw in enumerate(files):
        path = tmp_path / f"fuzz{i}.tjit"
        path.write_bytes(raw)
        jobs.append({"name": f"fuzz{i}", "path": str(path), "verbs": ["load", "inspect", "view"],
                     "out": str(tmp_path / f"out{i}")})
    spec = tmp_path / "jobs.json"
    spec.write_text(json.dumps({"canary": canary, "mem_mb": 1500, "cpu_s": 900,
                                "jobs": [dict(jobs[0], name="warmup")] + jobs}))
    report = tmp_path / "report.jsonl"
    env = dict(os.environ, PYTHONPATH=ROOT, OMP_NUM_THREADS="1")
    proc = subprocess.run([sys.executable, os.path.join(HERE, "tools_child.py"), str(spec), str(report)], env=env,
                          capture_output=True, text=True, timeout=1800)
    lines = [json.loads(x) for x in report.read_text().splitlines()]
    started = [x["start"] for x in lines if "start" in x]
    assert proc.returncode == 0, f"the child died in {started[-1]}: {proc.stderr[-2000:]}"
    done = {tuple(x["done"]): x for x in lines if "done" in x}
    assert not os.path.exists(canary), "code from a fuzzed file ran"
    problems, loaded = [], 0
    for job in jobs:
        name = job["name"]
        load = done[(name, "load")]
        if load["outcome"] == "error":
            problems.append(f"{name}: load raised {load['message']}")
        loaded += load["outcome"] == "loaded"
        for verb in job["verbs"]:
            r = done[(name, verb)]
            if r["cpu_s"] > CPU_S:
                problems.append(f"{name} / {verb}: {r['cpu_s']:.2f} CPU seconds")
            if verb == "load":
                continue
            if r["raised"] or r["controls"]:
                problems.append(f"{name} / {verb}: {r['raised'] or r['controls']}")
            elif r["code"] != 0 and not (r["stderr"].startswith("tracejit: error: ") and r["stderr"].count("\n") == 1):
                problems.append(f"{name} / {verb}: {r['stderr'][-300:]!r}")
            elif verb == "view" and r["code"] == 0:
                with open(os.path.join(job["out"], "page.html"), encoding="utf-8") as f:
                    page_data(f.read())
    assert not problems, "\n".join(problems)
    assert 0 < loaded < len(jobs)   # the edits reach both the checks and the tools
