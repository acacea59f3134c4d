"""Which inference pass moves a zoo model's answer? Errors against eager AND against the float64 model
(issue #25 item 3): eager, torch.jit freeze + optimize_for_inference, the traced program, the optimized
program with every pass, with none, without each pass in turn and with each pass alone.

A pass whose absence brings the optimized program back to eager's answer, while its presence leaves
the error against float64 no larger than eager's, reassociates; one that moves the float64 error is a bug.

Usage (torchvision models need it on the path)::

    OMP_NUM_THREADS=1 python bench/pass_error_bisect.py maskrcnn_resnet50 [batch]
"""
from __future__ import annotations

import copy
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
from tracejit.passes import pipeline  # noqa: E402
from zoo_models import ZOO  # noqa: E402


def _leaves(out):
    return [out] if isinstance(out, torch.Tensor) else [t for o in out for t in _leaves(o)]


def errors(out, base) -> str:
    """Largest absolute difference per output tensor."""
    return " ".join(f"{(o.double() - b.double()).abs().max().item():.1e}" if o.shape == b.shape and o.numel()
                    else f"shape{tuple(o.shape)}" for o, b in zip(_leaves(out), _leaves(base)))


def main(name: str, batch: int = 1) -> None:
    warnings.simplefilter("ignore")
    module, make_inputs = ZOO[name]()
    args = make_inputs(batch)
    with torch.no_grad():
        ref = module(*args)
        ref64 = copy.deepcopy(module).double()(*(a.double() if a.is_floating_point() else a for a in args))
        print("outputs", [tuple(t.shape) for t in _leaves(ref)])
        print(f"{'eager':40s} vs float64 {errors(ref, ref64)}")
        frozen, _ = make_jit_frozen(module, args)
        out = frozen(*args)
        print(f"{'jit freeze':40s} vs float64 {errors(out, ref64)} | vs eager {errors(out, ref)}")
        traced = tracejit.trace(module, args, check_trace=False)
        every, in_memory = pipeline.INFERENCE_PASSES, pipeline.IN_MEMORY_PASSES

        def run(label, passes, memory_passes):
            pipeline.INFERENCE_PASSES, pipeline.IN_MEMORY_PASSES = passes, memory_passes
            try:
                got = tracejit.optimize_for_inference(traced)(*args)
                print(f"{label:40s} vs float64 {errors(got, ref64)} | vs eager {errors(got, ref)}", flush=True)
            finally:
                pipeline.INFERENCE_PASSES, pipeline.IN_MEMORY_PASSES = every, in_memory

        run("every pass", every, in_memory)
        run("no pass", (), ())
        for i, (pass_name, _) in enumerate(every):
            run(f"without {pass_name}", every[:i] + every[i + 1:], in_memory)
        for i, (pass_name, _) in enumerate(in_memory):
            run(f"without {pass_name}", every, in_memory[:i] + in_memory[i + 1:])
        for i, (pass_name, _) in enumerate(every):
            run(f"only {pass_name}", every[i:i + 1], ())


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 1)
