"""Child process of the hostile-file tests: loads (and calls) a list of files under limits.

    python sandbox_child.py JOBS.json REPORT.jsonl

JOBS.json: {"canary": path, "mem_mb": extra address space allowed, "jobs": [{"name", "path",
"inputs": "seed:shape;shape" or null, "kw": {load keyword arguments}, "method": a dotted path such as
"sub.forward" to call that submodule method directly instead of the program, "prime": inputs of one
call of the program made first (its outcome ignored)}]}. For each job the child
writes one JSON line to REPORT.jsonl *before* it starts (``start``) and one after (``done``), so
a crash (a signal) names the file that caused it. ``done`` holds the outcome (``load_error``,
``loaded``, or ``error`` with the exception type), the CPU seconds load took, whether calling the
loaded program raised, and whether the canary file appeared.
"""
from __future__ import annotations

import json
import os
import sys
import time

import child_limits   # this folder: the script's own (sys.path[0])


def _inputs(spec, torch):
    if not spec:
        return None
    seed, _, shapes = spec.partition(":")
    g = torch.Generator().manual_seed(int(seed))
    return [torch.randn(*[int(d) for d in s.split(",")], generator=g) for s in shapes.split(";")]


def main(jobs_path: str, report_path: str) -> None:
    import torch
    import tracejit
    import warnings
    warnings.simplefilter("ignore")
    torch.set_num_threads(1)
    spec = json.load(open(jobs_path))
    child_limits.apply(spec, mem_mb=1024, cpu_s=120)
    canary = spec["canary"]
    with open(report_path, "w", buffering=1) as report:
        for job in spec["jobs"]:
            report.write(json.dumps({"start": job["name"]}) + "\n")
            out = {"done": job["name"]}
            t0 = time.process_time()
            try:
                obj = tracejit.load(job["path"], **job.get("kw", {}))
                out["outcome"] = "loaded"
            except tracejit.LoadError as e:
                obj = None
                out["outcome"] = "load_error"
                out["message"] = str(e)[:300]
            except BaseException as e:   # noqa: BLE001 - any other exception is what we report
                obj = None
                out["outcome"] = "error"
                out["message"] = f"{type(e).__name__}: {str(e)[:300]}"
            out["load_cpu_s"] = time.process_time() - t0
            if obj is not None:
                t1 = time.process_time()
                out["call"] = _call(obj, job, torch, out)
                out["call_cpu_s"] = time.process_time() - t1
                if job.get("truncate_after_load"):
                    with open(job["path"], "r+b") as f:
                        f.truncate(64)
                    out["call_after_truncation"] = _call(obj, job, torch)
            out["canary"] = os.path.exists(canary)
            report.write(json.dumps(out) + "\n")


def _target(obj, job):
    """The callable a job calls: the program, or the submodule method its ``method`` path names."""
    path = job.get("method")
    if not path:
        return obj
    *mods, name = path.split(".")
    for m in mods:
        obj = obj._modules[m]
    return getattr(obj, name)


def _call(obj, job, torch, out=None) -> str:
    inputs = _inputs(job.get("inputs"), torch)
    if inputs is None:
        return "skipped"
    try:
        with torch.no_grad():
            if job.get("prime"):
                try:
                    obj(*_inputs(job["prime"], torch))
                except Exception:   # noqa: BLE001 - the priming call only sets the thread's last budget
                    pass
            res = _target(obj, job)(*inputs)
        if job.get("expect_sum") is not None:
            got = sum(float(t.double().sum()) for t in (res if isinstance(res, (tuple, list)) else [res]))
            return "same" if abs(got - job["expect_sum"]) <= 1e-4 * (1 + abs(got)) else f"differs: {got}"
        return "ok"
    except BaseException as e:   # noqa: BLE001 - calling a hostile program may fail; it must not crash or run code
        if out is not None:
            out["call_message"] = str(e)[:300]
        return f"raised {type(e).__name__}"


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
