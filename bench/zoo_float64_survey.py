"""How far is each backend from the float64 answer, next to eager's own distance (issue #25 item 3)?

For a zoo model and batch: eager, torch.jit freeze + optimize_for_inference, and tracejit's candidates
(the default backend, onnxruntime, OpenVINO), each output's largest absolute error against a float64 run
of the original and against eager, with the output's scale. One JSON line per (model, batch) to stdout:
the data against which auto's exactness rule (tracejit/auto_exactness.py) is chosen, offline.

    OMP_NUM_THREADS=1 python bench/zoo_float64_survey.py deit_tiny 8 >> rows.jsonl
    python bench/zoo_float64_survey.py --render rows.jsonl     # the summary for bench/RESULTS.md
"""
from __future__ import annotations

import copy
import json
import os
import sys
import warnings

import torch

_BENCH_DIR = os.path.dirname(os.path.abspath(__file__))
for _p in (_BENCH_DIR, os.path.dirname(_BENCH_DIR)):
    if _p not in sys.path:
        sys.path.insert(0, _p)

import tracejit  # noqa: E402
from peer_builders import make_jit_frozen  # noqa: E402
from torch.utils._pytree import tree_leaves  # noqa: E402
from zoo_models import ZOO  # noqa: E402

BACKENDS = {"OFI": "torch", "onnxruntime": "onnxruntime", "openvino": "openvino"}


def _errors(out, ref) -> list:
    """Per floating output: max |out - ref| (None where the shapes differ)."""
    got = []
    for o, r in zip(tree_leaves(out), tree_leaves(ref)):
        if isinstance(r, torch.Tensor) and r.is_floating_point():
            ok = isinstance(o, torch.Tensor) and o.shape == r.shape
            got.append((o.double() - r.double()).abs().max().item() if ok and r.numel() else None)
    return got


def survey(name: str, batch: int) -> dict:
    module, make_inputs = ZOO[name]()
    args = make_inputs(batch)
    row: dict = {"model": name, "batch": batch, "err64": {}, "err": {}}
    with torch.no_grad():
        ref = module(*args)
        ref64 = copy.deepcopy(module).double()(*(a.double() if a.is_floating_point() else a for a in args))
        row["scale"] = [t.abs().max().item() if t.numel() else 0.0 for t in tree_leaves(ref)
                        if isinstance(t, torch.Tensor) and t.is_floating_point()]
        row["err64"]["eager"] = _errors(ref, ref64)
        peers = {"jit freeze": lambda: make_jit_frozen(module, args)[0]}
        traced = tracejit.trace(module, args, check_trace=False)
        for label, backend in BACKENDS.items():
            peers[label] = lambda backend=backend: tracejit.optimize_for_inference(traced, backend=backend)
        for label, build in peers.items():
            try:
                out = build()(*args)
                row["err64"][label], row["err"][label] = _errors(out, ref64), _errors(out, ref)
            except Exception as e:  # noqa: BLE001  (a peer that fails is a row entry)
                row["err64"][label] = f"error: {type(e).__name__}: {str(e)[:100]}"
    return row


def _worst(v) -> float | None:
    v = [x for x in v if x is not None] if isinstance(v, list) else []
    return max(v) if v else None


def render(path: str) -> str:
    """Per column: the median over rows of its distance to float64 over eager's, and the rows where it is
    further than torch.jit freeze's distance (1.25x + 8 fp32 ulps of the output's scale, bench_zoo's slack)."""
    import statistics
    rows = [r for r in map(json.loads, open(path)) if "err64" in r]
    eps = torch.finfo(torch.float32).eps
    lines = [f"{len(rows)} rows. Distance to the float64 answer (largest over outputs), over eager's:", "",
             "| column | median | max | rows further than jit freeze's (1.25x + 8 ulps) |", "|---|---|---|---|"]
    for col in ("jit freeze", *BACKENDS):
        ratios, further = [], []
        for r in rows:
            e, g, j = _worst(r["err64"]["eager"]), _worst(r["err64"].get(col)), _worst(r["err64"].get("jit freeze"))
            if e and g is not None:
                ratios.append(g / e)
            if col != "jit freeze" and g is not None and j is not None and \
                    g > 1.25 * j + 8 * eps * max(r["scale"] or [1.0]):
                further.append(f"{r['model']} b{r['batch']} ({g:.1e} vs {j:.1e})")
        lines.append(f"| {col} | {statistics.median(ratios):.2f} | {max(ratios):.2f} | "
                     f"{'; '.join(further) if col != 'jit freeze' else '-'} |")
    return "\n".join(lines)


if __name__ == "__main__":
    if sys.argv[1] == "--render":
        print(render(sys.argv[2]))
        sys.exit(0)
    warnings.simplefilter("ignore")
    torch.set_num_threads(1)
    print(json.dumps(survey(sys.argv[1], int(sys.argv[2]))), flush=True)
