"""Two builds of the optimized program side by side on zoo models, against eager, float64 and torch.jit's freeze
(issue #25 item 3): ``--survey fold``, the batch-norm fold's two roundings (bench/fold_exactness.py) on the conv
models; ``--survey linear``, with and without oneDNN's linear (passes/linear_kernels.py) on the transformers.

For each model and batch, in one process: eager, its float64 answer, torch.jit's freeze +
optimize_for_inference, and the optimized program (default backend) built once per variant of ``SURVEYS``.
Each column's largest error against eager and against float64 on the
zoo's input, whether it is bit-identical to torch.jit's, and whether bench_zoo's rule (``EXACT_SLACK`` against
jit freeze's error) flags it. Rows go to ``--rows`` as JSON lines; a markdown table is printed at the end.

Usage::

    OMP_NUM_THREADS=1 python bench/exactness_survey.py --survey fold --models resnet18,inception_v3_timm \\
        --rows bench/rows/fold30.jsonl
"""
from __future__ import annotations

import argparse
import gc
import json
import os
import sys
import time
import warnings

import torch

_BENCH_DIR = os.path.dirname(os.path.abspath(__file__))
for _p in (_BENCH_DIR, os.path.dirname(_BENCH_DIR)):
    if _p not in sys.path:
        sys.path.insert(0, _p)

import tracejit  # noqa: E402
from bench_zoo import EXACT_SLACK, _float64_answer, _leaves, max_error  # noqa: E402
from fold_exactness import fold_float64, fold_like_jit  # noqa: E402
from peer_builders import _Quiet, make_jit_frozen  # noqa: E402
from tracejit.passes import fold_conv_bn  # noqa: E402
from zoo_models import ZOO  # noqa: E402


from tracejit.passes import pipeline  # noqa: E402


def _with_fold(fold):
    """A variant: the optimized program built with ``fold`` as passes/fold_conv_bn.py's ``folded``."""
    def build(traced):
        original, fold_conv_bn.folded = fold_conv_bn.folded, fold
        try:
            return tracejit.optimize_for_inference(traced)
        finally:
            fold_conv_bn.folded = original
    return build


def _without_lowering(name):
    """A variant: the optimized program built without the lowering pass ``name`` (pipeline.IN_MEMORY_PASSES)."""
    def build(traced):
        original = pipeline.IN_MEMORY_PASSES
        pipeline.IN_MEMORY_PASSES = tuple(p for p in original if p[0] != name)
        try:
            return tracejit.optimize_for_inference(traced)
        finally:
            pipeline.IN_MEMORY_PASSES = original
    return build


SURVEYS = {
    "fold": {"float64 fold": _with_fold(fold_float64), "jit's fold": _with_fold(fold_like_jit)},
    "linear": {"default": tracejit.optimize_for_inference,
               "no oneDNN linear": _without_lowering("fuse_linear_kernels")},
}
VARIANTS = SURVEYS["fold"]


def flagged(err, jit_err, scale) -> bool | None:
    """bench_zoo's rule: an error beyond jit freeze's by ``EXACT_SLACK``."""
    if not isinstance(err, float) or not isinstance(jit_err, float):
        return None
    factor, ulps = EXACT_SLACK
    return err > jit_err * factor + ulps * torch.finfo(torch.float32).eps * scale


def survey(name: str, batch: int, variants: dict) -> dict:
    row = {"model": name, "batch": batch, "err": {}, "err64": {}, "jit_bits": {}}
    module, make_inputs = ZOO[name]()
    args = make_inputs(batch)
    with torch.no_grad(), _Quiet():
        ref = module(*args)
        ref64 = _float64_answer(module, args)
        row["scale"] = max(t.abs().max().item() for t in _leaves(ref) if t.is_floating_point() and t.numel())
        outs = {}
        try:
            outs["jit freeze"] = make_jit_frozen(module, args)[0](*args)
        except Exception as exc:  # noqa: BLE001  (jit freeze fails on a few zoo models)
            row["err"]["jit freeze"] = f"error: {type(exc).__name__}"
        traced = tracejit.trace(module, args, check_trace=False)
        for label, build in variants.items():
            outs["OFI, " + label] = build(traced)(*args)
    jit_out = outs.get("jit freeze")
    for col, out in outs.items():
        row["err"][col] = max_error(out, ref)
        if ref64 is not None:
            row["err64"][col] = max_error(out, ref64)
        if jit_out is not None:
            row["jit_bits"][col] = all(torch.equal(a, b) for a, b in zip(_leaves(out), _leaves(jit_out)))
    if ref64 is not None:
        row["err64"]["eager"] = max_error(ref, ref64)
    row["flagged"] = {c: flagged(row["err"][c], row["err"].get("jit freeze"), row["scale"]) for c in outs
                      if c != "jit freeze"}
    del module, traced, outs
    gc.collect()
    return row


def _fmt(v) -> str:
    return f"{v:.2e}" if isinstance(v, float) else str(v)


def table(rows: list) -> str:
    cols = ["jit freeze"] + sorted({c for r in rows for c in r["err"] if c != "jit freeze"})
    head = ("| model | batch | " + " | ".join(f"{c}: vs eager / vs float64" for c in cols)
            + " | eager vs float64 | flagged | = jit's bits |")
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for r in rows:
        cells = [f"{_fmt(r['err'].get(c))} / {_fmt(r['err64'].get(c))}" for c in cols]
        flags = ", ".join(c.removeprefix("OFI, ") for c, f in r["flagged"].items() if f) or "-"
        same = ", ".join(c.removeprefix("OFI, ") for c, f in r["jit_bits"].items() if f and c != "jit freeze") or "-"
        lines.append(f"| {r['model']} | {r['batch']} | " + " | ".join(cells)
                     + f" | {_fmt(r['err64'].get('eager'))} | {flags} | {same} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", required=True)
    parser.add_argument("--batches", default="1,8")
    parser.add_argument("--survey", default="fold", choices=sorted(SURVEYS),
                        help="fold: the two batch-norm folds; linear: with and without oneDNN's linear")
    parser.add_argument("--rows", default=None, help="append each row to this JSON-lines file")
    parser.add_argument("--from-rows", default=None, help="render these JSON-lines files instead of measuring")
    opts = parser.parse_args()
    warnings.simplefilter("ignore")
    torch.set_num_threads(1)
    if opts.from_rows:
        rows = [json.loads(line) for path in opts.from_rows.split(",") for line in open(path) if line.strip()]
        print(table(rows))
        return
    rows = []
    for name in opts.models.split(","):
        for batch in (int(b) for b in opts.batches.split(",")):
            start = time.time()
            try:
                row = survey(name, batch, SURVEYS[opts.survey])
            except Exception as exc:  # noqa: BLE001
                print(f"{name} b{batch}: {type(exc).__name__}: {str(exc)[:200]}", flush=True)
                continue
            rows.append(row)
            print(f"[{time.strftime('%H:%M:%S')}] {name} b{batch} {time.time() - start:.0f}s "
                  + " ".join(f"{c}={_fmt(e)}" for c, e in row["err"].items()), flush=True)
            if opts.rows:
                with open(opts.rows, "a") as f:
                    f.write(json.dumps(row) + "\n")
    print(table(rows))


if __name__ == "__main__":
    main()
