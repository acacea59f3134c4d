"""First load + first call: ``tracejit.load`` against ``torch.jit.load``, fresh processes, on more models (session 30).

The four models of bench_load.py (ResNet-50, BERT-base, GPT-2, Mask R-CNN at 320 x 320) and the zoo's
(bench/zoo_models.py: ``fasterrcnn_mobilenet``, ``retinanet_resnet50``, ``swin_tv``, ``t5``, ``whisper_encoder``, ...)
are traced once with ``tracejit.trace`` and ``torch.jit.trace`` and saved, with the example inputs, to ``--files DIR``
(kept, so another tree or another run measures the same files; ``--save-only`` stops there). Then, ``--runs`` rounds,
one fresh process per peer in turn (one thread, bytecode cached as pip leaves it: PYTHONDONTWRITEBYTECODE is unset
for the children, files warm in the page cache, torchvision's ops registered before the clock): each times the load
(tracejit's import counted in it) and then the first call on the example inputs (CPU and wall). Peers:
``torch.jit.load``; for each ``--trees`` source tree, ``tracejit`` with an empty code cache (a file's first load on a
machine) and, with ``--cached``, with the cache an untimed run wrote. Prints medians and ratios to torch.jit.load,
with the median load average (a shared machine: say what ran beside it). ``--no-call``: the load alone.

Usage::

    python bench/bench_load_call.py --files /tmp/f [--runs N] [maskrcnn t5 ...] [--trees A B] [--cached]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import warnings

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)

CHILD = r"""
import json, os, sys, time
import torch
torch.set_num_threads(1)
if os.environ.get("BENCH_VISION"):   # torchvision's ops registered first (tests/models/torchvision_ops.py), untimed
    sys.path.insert(0, os.environ["BENCH_VISION"])
    from torchvision_ops import import_torchvision
    import_torchvision()
args = torch.load(sys.argv[3])
t0, c0 = time.perf_counter(), time.process_time()
if sys.argv[1] == "jit":
    m = torch.jit.load(sys.argv[2])
else:
    import tracejit
    m = tracejit.load(sys.argv[2])
t1, c1 = time.perf_counter(), time.process_time()
if sys.argv[4] == "call":
    with torch.no_grad():
        m(*args)
t2, c2 = time.perf_counter(), time.process_time()
print(json.dumps({"load": c1 - c0, "call": c2 - c1, "load wall": t1 - t0, "call wall": t2 - t1}))
"""
VISION = {"maskrcnn", "fasterrcnn_mobilenet", "retinanet_resnet50", "maskrcnn_resnet50", "swin_tv", "resnet50"}


def _model(name: str):
    """(module, example arguments) of a bench_load model or a zoo model."""
    from bench_call_allowance import MODELS
    if name in MODELS:
        model, traces = MODELS[name]()
        return model, traces[0][0]
    from zoo_models import ZOO
    model, make = ZOO[name]()
    return model, make(1)


def save(name: str, d: str) -> tuple[str, str | None, str]:
    """The files of ``name`` in ``d`` (made once): tracejit's, torch.jit's (None where it cannot), the inputs."""
    tj, jit, inputs = (os.path.join(d, f"{name}{ext}") for ext in (".tj", ".pt", ".inputs"))
    if not os.path.exists(inputs):
        import tracejit
        model, example = _model(name)
        with torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            tracejit.save(tracejit.trace(model, example, check_trace=False), tj)
            try:
                torch.jit.save(torch.jit.trace(model, example, check_trace=False, strict=False), jit)
            except Exception as e:   # noqa: BLE001 - torch.jit cannot trace or save some models
                print(f"{name}: torch.jit.trace / save failed ({type(e).__name__}): tracejit alone", flush=True)
        torch.save(tuple(example), inputs)
    return tj, (jit if os.path.exists(jit) else None), inputs


def _child(kind: str, path: str, inputs: str, env: dict, call: bool = True) -> dict:
    # cwd: the files' folder: ``python -c`` puts the working directory first on sys.path, before PYTHONPATH (run
    # from a checkout, every child would import that checkout's tracejit whatever its tree)
    out = subprocess.run([sys.executable, "-c", CHILD, kind, path, inputs, "call" if call else "-"], env=env,
                         capture_output=True, text=True, timeout=1200, cwd=os.path.dirname(os.path.abspath(path)))
    if out.returncode:
        raise RuntimeError(out.stderr[-2000:])
    return json.loads(out.stdout.strip().splitlines()[-1])


def measure(name: str, d: str, runs: int, trees: list, cached: bool, call: bool = True, warm: bool = True) -> None:
    tj, jit, inputs = save(name, d)

    def env(tree, cache=""):
        e = dict(os.environ, PYTHONPATH=os.path.abspath(tree), OMP_NUM_THREADS="1", TRACEJIT_CACHE_DIR=cache,
                 PYTHONPYCACHEPREFIX=os.path.join(d, "pyc"))
        e.pop("PYTHONDONTWRITEBYTECODE", None)   # bytecode cached, as pip leaves an installed package
        if name in VISION:
            e["BENCH_VISION"] = os.path.join(ROOT, "tests", "models")
        return e
    peers = {}
    if jit is not None:
        peers["torch.jit.load"] = ("jit", jit, env(trees[0]))
    for i, tree in enumerate(trees):
        if not os.path.isdir(os.path.join(tree, "tracejit")):
            raise SystemExit(f"--trees {tree}: no tracejit package there (the models go before --trees)")
        label = os.path.basename(os.path.abspath(tree))
        peers[f"{label} first load"] = ("tj", tj, env(tree))
        if cached:
            peers[f"{label} cached"] = ("tj", tj, env(tree, os.path.join(d, f"cache-{name}-{i}")))
    for p, (kind, path, e) in peers.items():   # untimed: bytecode (and the code caches) written
        if warm or p.endswith("cached"):
            _child(kind, path, inputs, e, call)
    got, loads = {p: [] for p in peers}, []
    for _ in range(runs):
        for p, (kind, path, e) in peers.items():
            got[p].append(_child(kind, path, inputs, e, call))
            loads.append(os.getloadavg()[0])
    ref = got.get("torch.jit.load")
    med = {p: {k: statistics.median(r[k] for r in rows) for k in rows[0]} for p, rows in got.items()}
    both = {p: statistics.median(r["load"] + r["call"] for r in rows) for p, rows in got.items()}
    for p in got:
        m = med[p]
        ratio = (f"  load {m['load'] / med['torch.jit.load']['load']:.2f}x"
                 f"  load+call {both[p] / both['torch.jit.load']:.2f}x") if ref else ""
        print(f"{name:20s} {p:28s} load {m['load']:.3f} s  call {m['call']:.3f} s  load+call {both[p]:.3f} s"
              f"{ratio}  (wall load {m['load wall']:.3f})  load avg {statistics.median(loads):.2f}", flush=True)


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--files", required=True, help="where the saved files are kept (made on first use)")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--trees", nargs="+", default=[ROOT], help="after the models (it takes every name after it)")
    ap.add_argument("--cached", action="store_true", help="also the loads through a warm code cache")
    ap.add_argument("--save-only", action="store_true")
    ap.add_argument("--no-call", action="store_true", help="the load alone (a busy machine: the first call of Mask "
                    "R-CNN is ~6 s of CPU)")
    ap.add_argument("--no-warm", action="store_true", help="no untimed run first (bytecode written by an earlier "
                    "run; a busy machine)")
    ap.add_argument("models", nargs="*")
    a = ap.parse_args()
    os.makedirs(a.files, exist_ok=True)
    for n in a.models or ["maskrcnn", "fasterrcnn_mobilenet", "retinanet_resnet50", "swin_tv", "t5",
                          "whisper_encoder", "resnet50", "bert", "gpt2"]:
        if a.save_only:
            save(n, a.files)
        else:
            measure(n, a.files, a.runs, a.trees, a.cached, not a.no_call, not a.no_warm)
