"""The time one call of a crafted file takes before its budget stops it (docs/SECURITY.md, round 27): the worst
catalogued attacks on a call's total work (round 25's ``work_chain``: ten 4096^3 products of the file's zeros;
round 26's chains of sines / digammas / sorts of a legal 2**25 - 1 element factory, its conv1d of 1.9e11
multiply-adds), each loaded in a fresh process and called once on a 3 x 8 input; prints the outcome (LoadError,
BudgetError, or an answer) and the seconds of load + call.

Run it with this tree and with another (``--tree DIR``, e.g. /work/main) to compare before / after::

    python bench/bench_crafted_calls.py [--tree DIR] [name ...]
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

CHILD = r"""
import io, json, resource, sys, time, torch
torch.set_num_threads(1)
import tracejit
raw = open(sys.argv[1], "rb").read()
t0, c0 = time.perf_counter(), time.process_time()
try:
    loaded = tracejit.load(io.BytesIO(raw))
    loaded(torch.randn(3, 8))
    outcome = "answered"
except Exception as e:
    outcome = f"{type(e).__name__}: {str(e).splitlines()[0][:150]}"
print(json.dumps({"outcome": outcome, "wall_s": time.perf_counter() - t0, "cpu_s": time.process_time() - c0,
                  "tracejit": tracejit.__file__}))
"""


def crafted() -> dict:
    """name -> file bytes, made with the test suite's catalogues (tests/security) and this tree's tracejit."""
    sys.path[:0] = [ROOT, os.path.join(ROOT, "tests"), os.path.join(ROOT, "tests", "security")]
    import importlib.util
    import torch
    spec = importlib.util.spec_from_file_location("security_testlib",
                                                  os.path.join(ROOT, "tests", "security", "conftest.py"))
    sys.modules["security_testlib"] = lib = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(lib)
    from catalogue_round25 import work_chain
    from catalogue_round26 import conv, conv_sized, elementwise_chain, sized
    from security_testlib import traced_bytes
    x = (torch.randn(3, 8),)
    return {"work_chain_mm_10": traced_bytes(work_chain(10), x),
            "sin_chain_400": sized(traced_bytes(elementwise_chain(400), x)),
            "digamma_chain_40": sized(traced_bytes(elementwise_chain(40, "digamma"), x)),
            "conv1d_1.9e11": conv_sized(traced_bytes(conv, x)),
            # made for round 27's allowance: a factory small enough that the traced call's claim passes at load
            "sin_chain_400_2^22": sized(traced_bytes(elementwise_chain(400), x), 2 ** 22),
            "sin_chain_400_2^20": sized(traced_bytes(elementwise_chain(400), x), 2 ** 20)}


def main(argv: list) -> None:
    tree = ROOT
    if argv[:1] == ["--tree"]:
        tree, argv = argv[1], argv[2:]
    files = crafted()
    env = dict(os.environ, PYTHONPATH=tree, OMP_NUM_THREADS="1", TRACEJIT_CACHE_DIR="")
    with tempfile.TemporaryDirectory() as d:
        for name, raw in files.items():
            if argv and name not in argv:
                continue
            path = os.path.join(d, name)
            with open(path, "wb") as f:
                f.write(raw)
            try:
                out = subprocess.run([sys.executable, "-c", CHILD, path], env=env, capture_output=True, text=True,
                                     timeout=300, cwd=d)
                lines = out.stdout.strip().splitlines()
                r = json.loads(lines[-1]) if lines else {"outcome": f"child failed: {out.stderr[-300:]!r}",
                                                         "wall_s": float("nan"), "cpu_s": float("nan")}
            except subprocess.TimeoutExpired:
                r = {"outcome": "still running after 300 s", "wall_s": 300.0, "cpu_s": float("nan")}
            print(f"{name:18s} {len(raw):7d} B  {r['wall_s']:7.2f} s wall  {r['cpu_s']:7.2f} s CPU  {r['outcome']}",
                  flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
