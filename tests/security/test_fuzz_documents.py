"""Hypothesis fuzz of program-document edits aimed at what reaches code and allocation: names,
attributes, argument types and sizes replaced by hostile values (code in every quoting, NFKC
look-alikes, dunders, builtins, terminal escapes, huge and non-finite numbers, sparse layouts,
bad references), with the CRC recomputed. All files are then loaded and called in one child
process under memory and CPU limits: 0 code executions, 0 crashes, 0 exceptions other than
LoadError at load, 0 loads over 1 CPU second.
"""
from __future__ import annotations

import collections
import copy
import os

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from security_testlib import assemble, injections, parse, run_child

EXAMPLES = int(os.environ.get("TRACEJIT_FUZZ_EXAMPLES", 120))
CANARY_NAME = "fuzz-canary"

NAMES = ["ｔｏｒｃｈ", "torch", "slice", "Tensor", "self", "__class__", "__call__", "__init__", "train", "to",
         "_tj_k0", "_input_error", "float", "isinstance", "forward", "forward_1", "x", "0", "", "a.b",
         "\x1b[31m", "\u202e", "a" * 300, "import", "None", "True", "ｆｏｒｗａｒｄ", "ｓｅｌｆ"]
NUMBERS = [0, 1, -1, 7, 2, 10 ** 7, 2 ** 31, 2 ** 63, -2 ** 63 - 1, 10 ** 30, 7.0, -0.0, 1e308, 0.5]
TAGGED = [{"layout": "sparse_coo"}, {"layout": "strided"}, {"dtype": "float32"}, {"dtype": "object"},
          {"device": "cuda:99"}, {"device": "meta"}, {"v": 0}, {"v": 1}, {"v": 10 ** 9}, {"v": -1},
          {"float": "inf"}, {"float": "nan"}, {"float": "1e5"}, {"slice": [0, None, 1]}, {"tuple": [1, 2]},
          {"tuple": [{"v": 0}]}, {"complex": [1, "x"]}, {"ellipsis": True}, {"memory_format": "channels_last"},
          {"inplace": "add_"}, {"unpack": 3}, {"graph": 0}, {"const": None}, {"kind": "leaf"},
          {"kind": "namedtuple", "name": "ｔｕｐｌｅ", "fields": ["a"], "children": [{"kind": "leaf"}]}]


def _locations(doc):
    """Every (container, key) pair in the document, paths as lists."""
    out = []
    stack = [[]]
    while stack:
        path = stack.pop()
        x = _get(doc, path)
        keys = list(x) if isinstance(x, dict) else range(len(x)) if isinstance(x, list) else []
        for k in keys:
            out.append(path + [k])
            stack.append(path + [k])
    return out


def _get(doc, path):
    for k in path:
        doc = doc[k]
    return doc


def _values(canary):
    strings = injections(canary) + NAMES
    return st.one_of(st.sampled_from(strings), st.sampled_from(NUMBERS), st.sampled_from(TAGGED),
                     st.sampled_from([True, False, None, [], [0] * 70, [[[[0]]]], {}]),
                     st.lists(st.sampled_from(NUMBERS + [None]), max_size=6))


def _apply(doc, locations, choice, action, value, canary):
    path = locations[choice % len(locations)]
    parent, key = _get(doc, path[:-1]), path[-1]
    if action == "replace":
        parent[key] = value
    elif action == "delete":
        del parent[key]
    elif action == "insert" and isinstance(parent, list):
        parent.insert(key, value)
    elif action == "rename" and isinstance(parent, dict):
        parent[value if isinstance(value, str) else str(value)] = parent.pop(key)
    elif isinstance(parent, list) and isinstance(key, int) and isinstance(parent[key], list) and parent[key] \
            and isinstance(parent[key][0], str):
        parent[key][0] = value if isinstance(value, str) else injections(canary)[0]   # a [name, value] pair
    else:
        parent[key] = value


def test_fuzzed_documents_never_run_code_or_crash(bases, tmp_path):
    canary = str(tmp_path / CANARY_NAME)
    parsed = {k: parse(v[1]) for k, v in bases.items()}
    locations = {k: _locations(doc) for k, (doc, _) in parsed.items()}
    files = []

    edit = st.tuples(st.integers(0, 2 ** 31), st.sampled_from(["replace", "replace", "delete", "insert", "rename",
                                                                "pair_name"]), _values(canary))

    @settings(max_examples=EXAMPLES, deadline=None, derandomize=not os.environ.get("TRACEJIT_FUZZ_RANDOM"),
              database=None, suppress_health_check=list(HealthCheck))
    @given(base=st.sampled_from(sorted(bases)), edits=st.lists(edit, min_size=1, max_size=3))
    def make(base, edits):
        doc, tensors = parsed[base]
        doc = copy.deepcopy(doc)
        for choice, action, value in edits:
            try:
                _apply(doc, locations[base], choice, action, copy.deepcopy(value), canary)
            except (KeyError, IndexError, TypeError):
                pass   # the path no longer exists after an earlier edit
        try:
            raw = assemble(doc, tensors)
        except (ValueError, TypeError, RecursionError):
            return     # the document no longer serializes (the CRC field was edited away)
        files.append({"name": f"fuzz{len(files)}", "raw": raw, "inputs": bases[base][2]})

    make()
    assert len(files) > EXAMPLES // 2
    report = run_child(tmp_path, files, canary)
    assert not os.path.exists(canary), "code from a fuzzed file ran"
    errors = {n: r["message"] for n, r in report.items() if r["outcome"] == "error"}
    slow = {n: r["load_cpu_s"] for n, r in report.items() if r["load_cpu_s"] > 1.0}
    net_caught = {n: r["message"] for n, r in report.items()
                  if r["outcome"] == "load_error" and r["message"].startswith("the program is malformed (")}
    assert not errors, errors
    assert not slow, slow
    assert not net_caught, net_caught
    outcomes = [r["outcome"] for r in report.values()]
    calls = collections.Counter(r.get("call", "") for r in report.values() if r["outcome"] == "loaded")
    worst = max(r["load_cpu_s"] + r.get("call_cpu_s", 0.0) for r in report.values())
    print(f"document-edit fuzz: {len(files)} files from {EXAMPLES} examples:",   # the counts a long run reports
          dict(collections.Counter(outcomes)), "calls:", dict(calls), f"max load + call CPU {worst:.2f} s")
    assert outcomes.count("load_error") > len(outcomes) // 4   # the edits reach the checks
