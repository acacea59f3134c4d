"""Child process of the CLI tests: runs ``tracejit.cli.main`` on a list of argument lists.

    python cli_child.py RUNS.json REPORT.json

Each run's exit status and what it wrote to stdout / stderr go to REPORT.json, plus whether the
canary file appeared. The child is limited in memory and CPU time like sandbox_child.py.
"""
from __future__ import annotations

import contextlib
import io
import json
import os
import resource
import sys


def main(runs_path: str, report_path: str) -> None:
    import warnings
    warnings.simplefilter("ignore")
    from tracejit import cli
    spec = json.load(open(runs_path))
    resource.setrlimit(resource.RLIMIT_CPU, (300, 305))
    results = []
    for argv in spec["runs"]:
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code = cli.main(argv)
            except SystemExit as e:
                code = e.code
        results.append({"argv": argv, "code": code, "stdout": out.getvalue(), "stderr": err.getvalue(),
                        "canary": os.path.exists(spec["canary"])})
    with open(report_path, "w") as f:
        json.dump(results, f)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
