"""Fixtures and parametrization for the real-model corpus; the models and checks are in model_corpus.py.

Each test module lists its models in ``MODELS``; tests taking ``model`` run once per model,
``model, alt`` once per ALT input set and ``model, specialization`` once per expected size
specialization. Models are built and traced once per session (``model_corpus.traced_case``).
A test listed in a model's ``Spec.known_bugs`` is marked ``xfail(strict=True)`` for that model.
Without transformers or safetensors (the ``test`` extras) the corpus is not collected.
"""
from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
import textwrap

import pytest

import tracejit

if any(importlib.util.find_spec(m) is None for m in ("transformers", "safetensors")):
    collect_ignore_glob = ["test_*.py"]
else:
    from model_corpus import SPECS, flatten_groups, traced_case, unflatten_groups


def pytest_generate_tests(metafunc):
    models = getattr(metafunc.module, "MODELS", None)
    if models is None:
        return
    names = metafunc.fixturenames
    test = metafunc.function.__name__

    def param(model, *rest, id):
        reason = SPECS[model].known_bugs.get(test)
        marks = [pytest.mark.xfail(strict=True, reason=reason)] if reason else []
        return pytest.param(model, *rest, id=id, marks=marks)

    if "alt" in names:
        metafunc.parametrize("model,alt", [param(m, a, id=f"{m}-{a}") for m in models for a in SPECS[m].alts])
    elif "specialization" in names:
        metafunc.parametrize("model,specialization",
                             [param(m, key, id=f"{m}-{key}") for m in models for key in SPECS[m].specializations])
    elif "model" in names:
        metafunc.parametrize("model", [param(m, id=m) for m in models])


_FRESH_SCRIPT = textwrap.dedent("""
    import json, os, sys
    import torch, tracejit, tracejit.ir
    from safetensors.torch import load_file, save_file
    root = sys.argv[1]
    report = {}
    for name in sorted(os.listdir(root)):
        d = os.path.join(root, name)
        loaded = tracejit.load(os.path.join(d, "traced.tjt"))
        inputs = load_file(os.path.join(d, "inputs.safetensors"))
        groups = {}
        for key in inputs:
            group, index = key.split("::")
            groups.setdefault(group, {})[int(index)] = inputs[key]
        outputs = {}
        with torch.no_grad():
            for group, items in groups.items():
                out = loaded(*[items[i] for i in range(len(items))])
                out = out if isinstance(out, tuple) else (out,)
                for i, t in enumerate(out):
                    outputs[f"{group}::{i}"] = t.contiguous()
        save_file(outputs, os.path.join(d, "outputs.safetensors"))
        todo, seen, impure = [g for _, _, g in loaded.program.graphs()], set(), []
        while todo:   # every graph of the loaded Program and those it calls: node attributes are plain data
            g = todo.pop()
            if id(g) not in seen:
                seen.add(id(g))
                todo += list(g.callees.values())
                impure += [[n.op, k] for n in g.nodes for k, v in n.attrs.items() if not tracejit.ir.is_plain(v)]
        graph_and_ledger = {
            "impure_attrs": impure,
            "inlined_graph": str(loaded.inlined_graph),
            "ledger": [[e.kind, e.message, e.filename, e.lineno, repr(e.value)] for e in loaded.ledger],
        }
        with open(os.path.join(d, "graph_and_ledger.json"), "w") as fh:
            json.dump(graph_and_ledger, fh)
        report[name] = type(loaded).__name__
    report["__transformers_imported__"] = "transformers" in sys.modules
    print(json.dumps(report))
""")


@pytest.fixture(scope="session")
def fresh_process_outputs(request, tmp_path_factory):
    """Every model this session tests with this fixture is saved (tracejit.save) with its example and
    ALT inputs (safetensors); ONE subprocess loads them all (tracejit.load) and writes their outputs.

    Returns ``{"models": {name: {input set: outputs}}, "graphs": {name: {"inlined_graph": text,
    "ledger": entries}}, "report": the subprocess's JSON report}``.
    """
    from safetensors.torch import load_file, save_file

    names = sorted({item.callspec.params["model"] for item in request.session.items
                    if "fresh_process_outputs" in getattr(item, "fixturenames", ())
                    and "model" in getattr(getattr(item, "callspec", None), "params", {})})
    root = tmp_path_factory.mktemp("fresh_process")
    for name in names:
        case = traced_case(name)
        d = root / name
        d.mkdir()
        tracejit.save(case.traced, str(d / "traced.tjt"))
        save_file(flatten_groups({k: case.inputs[k] for k in ("example", *case.spec.alts)}),
                  str(d / "inputs.safetensors"))
    proc = subprocess.run([sys.executable, "-c", _FRESH_SCRIPT, str(root)], capture_output=True, text=True,
                          timeout=600, cwd=str(root))
    assert proc.returncode == 0, f"fresh process failed:\n{proc.stdout}\n{proc.stderr}"
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    models = {name: unflatten_groups(load_file(str(root / name / "outputs.safetensors"))) for name in names}
    graphs = {name: json.loads((root / name / "graph_and_ledger.json").read_text()) for name in names}
    return {"models": models, "graphs": graphs, "report": report}
