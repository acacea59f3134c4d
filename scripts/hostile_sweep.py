"""The full sweep of issue 21's acceptance: every crafted file of tests/security (catalogue.py, catalogue_ops.py,
catalogue_growth.py, catalogue_tools.py, and valid files too big to export quickly) through load, call and every
CLI verb (``inspect --graph --code``, ``run``, ``view``, ``export``, ``export --triton``) in capped child processes
(tests/security/tools_child.py: 1.5 GB of address space beyond torch's, CPU capped), and the submodule methods
called directly (sandbox_child.py, 400 MB). CI runs samples of these (tests/security/test_*_files.py); this
script runs all of them and prints, per class of the issue's table, the files, the most CPU seconds and resident
MB per verb, and the counts that must be 0: crashes, code executions (the canary), exceptions past the CLI's
one error line, raw control characters on a terminal, tools over 2 CPU seconds.

    PYTHONPATH=. python scripts/hostile_sweep.py [--out DIR] [--chunk N]

Slow (a few hundred files x 6 verbs): run it with ``nice``; the numbers are CPU time, not wall time.
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
from collections import defaultdict

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SEC = os.path.join(ROOT, "tests", "security")
VERBS = ("load", "inspect", "run", "view", "export", "triton")
CPU_S = 2.0


def _testlib():
    """tests/security/conftest.py as ``security_testlib`` (how the catalogues import it)."""
    sys.path[:0] = [SEC, os.path.join(ROOT, "tests")]
    spec = importlib.util.spec_from_file_location("security_testlib", os.path.join(SEC, "conftest.py"))
    lib = importlib.util.module_from_spec(spec)
    sys.modules["security_testlib"] = lib
    spec.loader.exec_module(lib)
    return lib


def _tools_class(name: str) -> str:
    for prefix, cls in (("html_", "HTML page broken by a string"), ("terminal_", "terminal escape injection"),
                        ("chain_", "exponential call graphs"), ("paths_", "exponential call graphs"),
                        ("guard_list_expected", "minor (guard expecting a list)"),
                        ("guard_list_", "amplification at load"), ("nodes_1000", "amplification at load"),
                        ("symbolic_sizes", "superlinear inspect / view"), ("dict_outputs", "superlinear inspect / view"),
                        ("root_method_", "documented guarantee (method names)"),
                        ("inner_method", "documented guarantee (method names)"),
                        ("param_method", "documented guarantee (method names)"),
                        ("zip_", "not a LoadError (zip edge cases)"), ("nodes_", "export cost of valid large files")):
        if name.startswith(prefix):
            return cls
    return "tools: other"


def cases() -> list:
    """``(class, name, file bytes)`` for every crafted file, and the direct-call jobs."""
    lib = _testlib()
    import catalogue
    import catalogue_growth
    import catalogue_ops
    import catalogue_tools
    out = []
    bases = lib.make_bases()
    canary = os.path.join(tempfile.gettempdir(), "tracejit-sweep-canary")
    for make, cls in ((lambda: catalogue.code_cases(bases, canary), "code injection (names, quoting, targets)"),
                      (lambda: catalogue.bound_cases(bases), "bounded load (limits)"),
                      (lambda: catalogue.crash_and_schema_cases(bases), "crash / schema gaps / layouts")):
        out += [(cls, name, raw) for name, raw, _ in make()]
    ops = catalogue_ops.saved_bases()
    for make, cls in ((catalogue_ops.off_list_cases, "process crash: ops off the allow-list"),
                      (catalogue_ops.enum_cases, "uninitialised memory: enum arguments"),
                      (catalogue_ops.norm_cases, "process crash: running statistics"),
                      (catalogue_ops.load_budget_cases, "CPU or memory blow-up at load"),
                      (catalogue_ops.call_budget_cases, "CPU or memory blow-up at call"),
                      (catalogue_ops.product_cases, "CPU or memory blow-up at call")):
        out += [(cls, name, raw) for name, raw, *_ in make(ops)]
    out += [("memory growth at call (broadcasts, products, chains)", name, raw)
            for name, raw, _ in catalogue_growth.growth_cases()]
    tools, _ = catalogue_tools.tools_base()
    out += [(_tools_class(name), name, raw) for name, raw, *_ in catalogue_tools.all_cases()]
    for n in (20_000, 40_000):   # one graph near the document's value limit: load ~90 us a node, export refuses
        out.append(("export cost of valid large files", f"nodes_{n}_one_graph",
                    catalogue_tools._edit(tools, lambda d, n=n: catalogue_tools._negations(d, n))))
    return out, catalogue_growth.direct_call_cases(), canary


def _run(script: str, spec: dict, tmp: str) -> list:
    path = os.path.join(tmp, f"jobs{os.getpid()}_{len(os.listdir(tmp))}.json")
    report = path + ".report"
    with open(path, "w") as f:
        json.dump(spec, f)
    env = dict(os.environ, PYTHONPATH=ROOT, OMP_NUM_THREADS="1")
    proc = subprocess.run([sys.executable, os.path.join(SEC, script), path, report], env=env, capture_output=True,
                          text=True)
    lines = [json.loads(x) for x in open(report).read().splitlines()] if os.path.exists(report) else []
    if proc.returncode != 0:
        started = [x["start"] for x in lines if "start" in x]
        lines.append({"crash": started[-1] if started else None, "status": proc.returncode,
                      "stderr": proc.stderr[-500:]})
    return lines


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=None, help="directory for the files and reports (default: a temporary one)")
    ap.add_argument("--chunk", type=int, default=40, help="files per child process")
    args = ap.parse_args()
    tmp = args.out or tempfile.mkdtemp(prefix="tracejit-sweep-")
    os.makedirs(tmp, exist_ok=True)
    files, direct, canary = cases()
    jobs = []
    for i, (cls, name, raw) in enumerate(files):
        path = os.path.join(tmp, f"case{i}.tjit")
        with open(path, "wb") as f:
            f.write(raw)
        jobs.append({"name": name, "path": path, "verbs": list(VERBS), "out": os.path.join(tmp, f"out{i}"), "cls": cls})
    warmup = dict(jobs[0], name="warmup", out=os.path.join(tmp, "warmup"))
    done, crashes = {}, []
    for k in range(0, len(jobs), args.chunk):
        todo = jobs[k:k + args.chunk]
        while todo:   # a child that dies (a crash, or its CPU cap: a verb that never ends) resumes after that file
            cap = 60 + 3 * len(VERBS) * len(todo)
            lines = _run("tools_child.py", {"canary": canary, "mem_mb": 1500, "cpu_s": cap, "jobs": [warmup] + todo},
                         tmp)
            done.update({tuple(x["done"]): x for x in lines if "done" in x and x["done"][0] != "warmup"})
            died = [x for x in lines if "crash" in x]
            crashes += died
            names = [j["name"] for j in todo]
            if not died or not died[0]["crash"] or died[0]["crash"][0] not in names:
                break
            todo = todo[names.index(died[0]["crash"][0]) + 1:]
        print(f"{min(k + args.chunk, len(jobs))} / {len(jobs)} files", file=sys.stderr, flush=True)
    for j in direct:
        j["path"] = os.path.join(tmp, j["name"] + ".tjit")
        with open(j["path"], "wb") as f:
            f.write(j.pop("raw"))
    direct_lines = _run("sandbox_child.py", {"canary": canary, "mem_mb": 400, "cpu_s": 120, "jobs": direct}, tmp)
    crashes += [x for x in direct_lines if "crash" in x]
    report(jobs, done, crashes, [x for x in direct_lines if "done" in x])


def report(jobs, done, crashes, direct) -> None:
    by_class = defaultdict(list)
    for j in jobs:
        by_class[j["cls"]].append(j)
    head = "| class | files | refused at load | " + " | ".join(f"{v} max CPU s / MB" for v in VERBS) + " |"
    print(head)
    print("|" + "---|" * (3 + len(VERBS)))
    totals = defaultdict(int)
    slow = []
    for cls in sorted(by_class):
        js = by_class[cls]
        refused = sum(done.get((j["name"], "load"), {}).get("outcome") == "load_error" for j in js)
        cells = []
        for verb in VERBS:
            rs = [done[(j["name"], verb)] for j in js if (j["name"], verb) in done]
            totals["missing"] += len(js) - len(rs)
            cells.append(f"{max((r['cpu_s'] for r in rs), default=0):.2f} / "
                         f"{max((r.get('rss_mb', 0) for r in rs), default=0):.0f}")
            for r in rs:
                totals["canary"] += bool(r["canary"])
                totals["raised"] += bool(r.get("raised"))
                totals["controls"] += bool(r.get("controls"))
                totals["load errors other than LoadError"] += r.get("outcome") == "error"
                if r["cpu_s"] > CPU_S:
                    slow.append(f"{r['done'][0]} / {verb}: {r['cpu_s']:.2f} s")
        print(f"| {cls} | {len(js)} | {refused} | " + " | ".join(cells) + " |")
    print(f"\n{len(jobs)} files, {len(done)} verb runs; crashes: {len(crashes)}; code executions (canary): "
          f"{totals['canary']}; exceptions past the CLI's error line: {totals['raised']}; raw control characters: "
          f"{totals['controls']}; load errors other than LoadError: {totals['load errors other than LoadError']}; "
          f"runs missing: {totals['missing']}")
    enum = [j for j in jobs if j["cls"].startswith("uninitialised")]
    returned = [j["name"] for j in enum if done.get((j["name"], "load"), {}).get("call") == "ok"
                or done.get((j["name"], "run"), {}).get("code") == 0]
    print(f"uninitialised reads: {len(returned)} of {len(enum)} enum-argument files returned an output {returned}")
    print(f"over {CPU_S} CPU s: {len(slow)}" + "".join(f"\n  {s}" for s in slow))
    for c in crashes:
        print(f"CRASH in {c['crash']}: status {c['status']} {c['stderr']}")
    for r in direct:
        print(f"direct submodule call {r['done']}: {r.get('outcome')}, call {r.get('call')}, "
              f"{r.get('load_cpu_s', 0) + r.get('call_cpu_s', 0):.2f} CPU s")


if __name__ == "__main__":
    main()
