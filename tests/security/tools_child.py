"""Child process of the tool tests (test_tool_files.py): loads, calls and runs every CLI verb on a
list of files under memory and CPU limits.

    python tools_child.py JOBS.json REPORT.jsonl

JOBS.json: {"canary", "mem_mb", "cpu_s", "jobs": [{"name", "path", "verbs": ["load", "inspect", "run",
"view", "export", "triton"], "out": a directory for the verbs' output files}]}. Before each verb the
child writes ``{"start": [name, verb]}``, after it ``{"done": [name, verb], ...}`` with the exit status
(``code``; ``outcome`` for load), the CPU seconds it took, its peak resident memory (``rss_mb``: the peak is
reset before each verb), the raw control characters found in what it
printed (``controls``), its output (``stdout`` / ``stderr``, cut), ``raised`` when something escaped the
CLI's own error handling, whether the canary appeared, and the packages it imported (``imported``: their import
is in its CPU seconds). A crash names the verb and file that caused it.
"""
from __future__ import annotations

import contextlib
import io
import json
import os
import sys
import time
import unicodedata

import child_limits   # this folder: the script's own (sys.path[0])


def controls(text: str) -> list:
    """The raw control / format characters in ``text`` other than a newline (what could drive a terminal)."""
    return sorted({c for c in text if c != "\n" and (not c.isprintable() or unicodedata.category(c) in
                                                     ("Cf", "Zl", "Zp"))})


def _reset_peak_rss() -> None:
    """Start a new peak resident set size (Linux: writing 5 to clear_refs resets VmHWM)."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        pass


def _peak_rss_mb() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return 0.0


def _imported(before: set) -> list:
    """The packages of the modules imported since ``before`` was taken (their import time is in the CPU seconds)."""
    return sorted({name.split(".")[0] if not name.startswith("torch.") else ".".join(name.split(".")[:2])
                   for name in set(sys.modules) - before})


def _argv(verb: str, path: str, out: str) -> list:
    return {"inspect": ["inspect", path, "--graph", "--code"],
            "run": ["run", path, "-n", "1"],
            "view": ["view", path, "-o", os.path.join(out, "page.html")],
            "export": ["export", path, "-o", os.path.join(out, "model.onnx")],
            "triton": ["export", path, "--triton", os.path.join(out, "triton")]}[verb]


def _load(job, torch, tracejit) -> dict:
    try:
        obj = tracejit.load(job["path"])
    except tracejit.LoadError as e:
        return {"outcome": "load_error", "message": str(e)[:300]}
    except BaseException as e:   # noqa: BLE001 - anything else is what the test reports
        return {"outcome": "error", "message": f"{type(e).__name__}: {str(e)[:300]}"}
    out = {"outcome": "loaded"}
    try:   # call it once on the inputs it was traced with, if plain tensors
        from tracejit.cli.run import traced_inputs
        made = traced_inputs(obj, torch.Generator().manual_seed(0), job["path"])
        if made is not None:
            args, kwargs, _ = made
            with torch.no_grad():
                obj(*args, **kwargs)
            out["call"] = "ok"
    except BaseException as e:   # noqa: BLE001 - a hostile program may fail to run; it must not crash
        out["call"] = f"raised {type(e).__name__}"
    return out


def _cli(argv, cli) -> dict:
    out, err = io.StringIO(), io.StringIO()
    raised = None
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = cli.main(argv)
        except SystemExit as e:
            code = e.code
        except BaseException as e:   # noqa: BLE001 - the CLI must turn every error into its one line
            code, raised = None, f"{type(e).__name__}: {str(e)[:300]}"
    o, e = out.getvalue(), err.getvalue()
    return {"code": code, "raised": raised, "controls": controls(o) + controls(e), "stdout": o[:6000],
            "stderr": e[-3000:]}


def main(jobs_path: str, report_path: str) -> None:
    import warnings
    warnings.simplefilter("ignore")
    import torch
    import tracejit
    from tracejit import cli
    torch.set_num_threads(1)
    spec = json.load(open(jobs_path))
    child_limits.apply(spec, mem_mb=1500, cpu_s=300)
    with open(report_path, "w", buffering=1) as report:
        for job in spec["jobs"]:
            os.makedirs(job["out"], exist_ok=True)
            for verb in job["verbs"]:
                report.write(json.dumps({"start": [job["name"], verb]}) + "\n")
                _reset_peak_rss()
                before = set(sys.modules)
                t0 = time.process_time()
                result = _load(job, torch, tracejit) if verb == "load" else _cli(_argv(verb, job["path"], job["out"]),
                                                                                  cli)
                result.update({"done": [job["name"], verb], "cpu_s": time.process_time() - t0, "rss_mb": _peak_rss_mb(),
                               "canary": os.path.exists(spec["canary"]), "imported": _imported(before)})
                report.write(json.dumps(result) + "\n")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
