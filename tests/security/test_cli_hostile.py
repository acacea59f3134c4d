"""``tracejit inspect`` and ``tracejit run`` on hostile files: no code runs, no control character from
a file reaches the terminal, every rejection is one ``tracejit: error:`` line."""
from __future__ import annotations

import json
import os
import subprocess
import sys

from security_testlib import HERE, ROOT, module, node, rewrite, run_cli
from catalogue import code_cases

CONTROL = ["\x1b", "\x07", "\x08", "\r", "\u202e", "\u2066", "\x9b"]
EVIL = "Evil\x1b[31mRED\x07\u202eesrever\x9b2J\r"


def _escape_file(raw):
    def edit(doc):
        module(doc, "block")["type"] = EVIL
        m = module(doc, "fc")
        m["parameters"] = [[EVIL if n == "weight" else n, p] for n, p in m["parameters"]]
        for g in doc["program"]["graphs"]:
            for n in g["nodes"]:
                if n["op"] == "tracejit::get_attr" and n["attrs"]["path"] == "weight" and g["module_type"] == "Linear":
                    n["attrs"]["path"] = EVIL
        doc["program"]["ledger"] = [{"kind": "branch", "message": EVIL, "source": [EVIL, 3, EVIL], "value": EVIL}]
        node(doc, "aten::relu")["source"] = [EVIL, 7, EVIL]
    return rewrite(raw, edit_doc=edit)


def _run_children(tmp_path, runs, canary):
    spec = tmp_path / "runs.json"
    spec.write_text(json.dumps({"canary": canary, "runs": runs}))
    report = tmp_path / "cli_report.json"
    env = dict(os.environ, PYTHONPATH=ROOT, OMP_NUM_THREADS="1")
    proc = subprocess.run([sys.executable, os.path.join(HERE, "cli_child.py"), str(spec), str(report)], env=env,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, f"the CLI child died ({proc.returncode}): {proc.stderr[-2000:]}"
    return json.loads(report.read_text())


def test_cli_on_hostile_files(bases, tmp_path):
    canary = str(tmp_path / "canary")
    evil = tmp_path / "evil.tjit"
    evil.write_bytes(_escape_file(bases["net"][1]))
    runs = [["inspect", str(evil), "--graph", "--code"], ["run", str(evil), "-i", "float32[2,2,5,5]", "-n", "2"]]
    rejected = [c for c in code_cases(bases, canary) if c[2] == "reject"][::4]
    for i, (name, raw, _) in enumerate(rejected):
        path = tmp_path / f"hostile{i}.tjit"
        path.write_bytes(raw)
        runs += [["inspect", str(path), "--graph", "--code"], ["run", str(path), "-i", "float32[2,2,5,5]", "-n", "1"]]
    bad_name = tmp_path / "bad_name.tjit"      # a LoadError message that quotes a name with escapes
    bad_name.write_bytes(rewrite(bases["net"][1], edit_doc=lambda d: module(d, "block").__setitem__(
        "methods", [["\x1b[2Jforward", 1]])))
    runs.append(["inspect", str(bad_name)])
    results = _run_children(tmp_path, runs, canary)
    assert not os.path.exists(canary)
    inspect_evil, run_evil = results[0], results[1]
    assert inspect_evil["code"] == 0, inspect_evil["stderr"]
    assert "Evil" in inspect_evil["stdout"] and "\\x1b[31mRED" in inspect_evil["stdout"]
    assert run_evil["code"] == 0, run_evil["stderr"]
    for r in results:
        for c in CONTROL:
            assert c not in r["stdout"] and c not in r["stderr"], (r["argv"], repr(c))
        assert not r["canary"], r["argv"]
    for r in results[2:]:
        assert r["code"] == 1, r
        assert r["stderr"].startswith("tracejit: error: ") and r["stderr"].count("\n") == 1, r["stderr"]
    assert "\\x1b[2Jforward" in results[-1]["stderr"]


def test_console_entry_point_escapes(bases, tmp_path):
    """The real ``python -m tracejit`` process, once."""
    evil = tmp_path / "evil.tjit"
    evil.write_bytes(_escape_file(bases["net"][1]))
    proc = run_cli("inspect", str(evil))
    assert proc.returncode == 0, proc.stderr
    assert b"Evil" in proc.stdout
    for c in CONTROL:
        assert c.encode() not in proc.stdout and c.encode("utf-8") not in proc.stdout
