"""How far is the optimized program from eager and from float64, per way of folding a conv's batch norm?
(issue #25 item 3: "no larger than torch.jit's freeze + optimize_for_inference error on the same inputs").

For one zoo model and batch: eager, torch.jit's freeze + optimize_for_inference, and the optimized program
(``optimize_for_inference``, default backend) built with each fold in ``VARIANTS`` (passes/fold_conv_bn.py's
``folded`` swapped in turn), on the zoo's input and on ``--inputs`` more random inputs of the same shape. Prints
the largest error against eager and against the float64 model on the zoo's input, the mean and max over the random
inputs, and on how many inputs each column is bit-identical to torch.jit's.

Usage::

    OMP_NUM_THREADS=1 python bench/fold_exactness.py inception_v3_timm [batch] [--inputs 24] [--time 7]
"""
from __future__ import annotations

import argparse
import copy
import os
import statistics
import sys
import time
import warnings

import torch

_BENCH_DIR = os.path.dirname(os.path.abspath(__file__))
for _p in (_BENCH_DIR, os.path.dirname(_BENCH_DIR)):
    if _p not in sys.path:
        sys.path.insert(0, _p)

import tracejit  # noqa: E402
from peer_builders import make_jit_frozen  # noqa: E402
from tracejit.passes import fold_conv_bn  # noqa: E402
from zoo_models import ZOO  # noqa: E402


def _shaped(t, weight):
    return t.reshape(-1, *([1] * (weight.dim() - 1)))


def fold_float64(weight, bias, gamma, beta, mean, var, eps):
    """The fold of sessions 16-29: scale, weight and bias in float64, rounded once."""
    wide = torch.float64
    scale = gamma.to(wide) / torch.sqrt(var.to(wide) + eps)
    if not torch.isfinite(scale).all():
        return None, None
    new_w = (weight.to(wide) * _shaped(scale, weight)).to(weight.dtype)
    b = bias.to(wide) if bias is not None else torch.zeros_like(scale)
    return new_w, ((b - mean.to(wide)) * scale + beta.to(wide)).to(bias.dtype if bias is not None else weight.dtype)


def fold_like_jit(weight, bias, gamma, beta, mean, var, eps):
    """torch.jit's FoldFrozenConvBatchnorm (computeUpdatedConvWeightAndBias), in the weight's dtype."""
    rsqrt = torch.rsqrt(var + eps)
    scale = gamma * rsqrt
    if not torch.isfinite(scale).all():
        return None, None
    b = bias if bias is not None else torch.zeros(weight.shape[0], dtype=mean.dtype)
    return (weight * _shaped(scale, weight)).to(weight.dtype), ((b - mean) * rsqrt * gamma + beta).to(b.dtype)


def fold_eager_terms(weight, bias, gamma, beta, mean, var, eps):
    """eager's batch-norm terms (alpha = gamma / sqrt(var + eps), beta - mean * alpha) in float32."""
    alpha = gamma * (1 / torch.sqrt(var + eps))
    if not torch.isfinite(alpha).all():
        return None, None
    shift = beta - mean * alpha
    b = bias * alpha + shift if bias is not None else shift
    return (weight * _shaped(alpha, weight)).to(weight.dtype), b


VARIANTS = {"float64 fold": fold_float64, "jit's fold": fold_like_jit, "eager's terms": fold_eager_terms}


def _leaves(out):
    return [out] if isinstance(out, torch.Tensor) else [t for o in out for t in _leaves(o)]


def max_error(out, base) -> float:
    return max((o.double() - b.double()).abs().max().item() for o, b in zip(_leaves(out), _leaves(base)))


def same_bits(out, base) -> bool:
    return all(torch.equal(o, b) for o, b in zip(_leaves(out), _leaves(base)))


def timing(module, columns: dict, args: tuple, rounds: int) -> str:
    """Median per-call time of eager and each optimized column, interleaved (``rounds`` rounds of ~0.2 s each)."""
    fns = {"eager": module, **{c: f for c, f in columns.items() if c.startswith("OFI")}}
    samples = {c: [] for c in fns}
    with torch.no_grad():
        start = time.perf_counter()
        fns["eager"](*args)
        calls = max(1, int(0.2 / max(time.perf_counter() - start, 1e-6)))
        for _ in range(rounds):
            for c, fn in fns.items():
                fn(*args)
                start = time.perf_counter()
                for _ in range(calls):
                    fn(*args)
                samples[c].append((time.perf_counter() - start) / calls)
    eager = statistics.median(samples["eager"])
    return "; ".join(f"{c} {statistics.median(v) * 1e3:.2f} ms ({statistics.median(v) / eager:.3f}x eager)"
                     for c, v in samples.items()) + f"; load {os.getloadavg()[0]:.1f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model")
    parser.add_argument("batch", nargs="?", type=int, default=1)
    parser.add_argument("--inputs", type=int, default=24, help="random inputs besides the zoo's")
    parser.add_argument("--time", type=int, default=0, metavar="ROUNDS",
                        help="also time eager and each optimized program, interleaved, this many rounds (medians)")
    opts = parser.parse_args()
    warnings.simplefilter("ignore")
    torch.set_num_threads(1)
    module, make_inputs = ZOO[opts.model]()
    args = make_inputs(opts.batch)
    module64 = copy.deepcopy(module).double()
    gen = torch.Generator().manual_seed(1234)
    inputs = [args] + [tuple(torch.randn(a.shape, generator=gen) if a.is_floating_point() else a for a in args)
                       for _ in range(opts.inputs)]
    with torch.no_grad():
        columns = {"jit freeze": make_jit_frozen(module, args)[0]}
        traced = tracejit.trace(module, args, check_trace=False)
        original = fold_conv_bn.folded
        for label, fold in VARIANTS.items():
            fold_conv_bn.folded = fold
            try:
                columns["OFI, " + label] = tracejit.optimize_for_inference(traced)
            finally:
                fold_conv_bn.folded = original
        errs = {c: [] for c in ["eager"] + list(columns)}
        for i, call in enumerate(inputs):
            ref = module(*call)
            ref64 = module64(*(a.double() if a.is_floating_point() else a for a in call))
            errs["eager"].append((0.0, max_error(ref, ref64), False, ref.abs().max().item()))
            jit_out = None
            for c, fn in columns.items():
                out = fn(*call)
                jit_out = out if c == "jit freeze" else jit_out
                errs[c].append((max_error(out, ref), max_error(out, ref64), same_bits(out, jit_out),
                                ref.abs().max().item()))
    if opts.time:
        print(timing(module, columns, args, opts.time))
    print(f"{opts.model} b{opts.batch}: the zoo's input and {opts.inputs} random inputs; errors against eager "
          f"and float64 (relative: over the largest |eager output|)")
    print("| column | zoo input: vs eager | vs float64 | random: mean vs eager (rel) | max vs eager (rel) | "
          "mean vs float64 (rel) | max vs float64 (rel) | bits = jit's |")
    print("|---|---|---|---|---|---|---|---|")
    for c, rows in errs.items():
        first, rest = rows[0], rows[1:] or rows[:1]
        rel_e = [r[0] / r[3] for r in rest]
        rel_64 = [r[1] / r[3] for r in rest]
        print(f"| {c} | {first[0]:.3g} | {first[1]:.3g} | {sum(rel_e) / len(rel_e):.3g} | {max(rel_e):.3g} | "
              f"{sum(rel_64) / len(rel_64):.3g} | {max(rel_64):.3g} | {sum(r[2] for r in rows)} of {len(rows)} |")


if __name__ == "__main__":
    main()
