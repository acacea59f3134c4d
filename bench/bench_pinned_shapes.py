"""What a shape other than the traced one costs in the onnxruntime (or OpenVINO) backend: the dynamic model against the
session pinned to that shape (backends/pinned_shapes.py), side by side with eager, interleaved rounds, medians.

    OMP_NUM_THREADS=1 python bench/bench_pinned_shapes.py --models bert,gpt2,resnet18 --rounds 7

Each model is traced on its bench_zoo example (batch 1) and called on bench_zoo's new input (another length or
image size): ``dynamic`` is the program's call before that shape has its own session, ``pinned`` after; the two
run interleaved in the same process (the pinned session stays open while the dynamic model runs).
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import tracejit  # noqa: E402
import zoo_models  # noqa: E402
from tracejit.backends import pinned_shapes  # noqa: E402


def _time(fn, n: int) -> float:
    start = time.perf_counter()
    for _ in range(n):
        fn()
    return (time.perf_counter() - start) / n * 1e6


def measure(name: str, rounds: int, batch: int, backend: str = "onnxruntime") -> dict:
    model, make = zoo_models.ZOO[name]()
    example, new = make(batch), make(batch, new=True)
    with torch.no_grad():
        program = tracejit.optimize_for_inference(tracejit.trace(model, example), backend=backend)
        pinned_shapes.PIN_AFTER = 1
        dynamic = program(*new)   # this call asks for the shape's session
        program.pins.wait()
        assert program.pins.pinned, "no pinned session opened"
        pinned_shapes.PIN_AFTER = 10 ** 9   # from here on no other session opens
        pins, want = program.pins._runs, model(*new)
        pinned = program(*new)
        n = max(3, int(0.2e6 / _time(lambda: program(*new), 3)))
        times = {"eager": [], "dynamic": [], "pinned": []}

        def run(runs):
            program.pins._runs = runs   # {}: the dynamic model runs; pins: the pinned session
            return program(*new)
        for _ in range(rounds):   # interleaved: eager, the dynamic model, the pinned session
            times["eager"].append(_time(lambda: model(*new), n))
            times["dynamic"].append(_time(lambda: run({}), n))
            times["pinned"].append(_time(lambda: run(pins), n))
        leaves = [(torch.as_tensor(a), torch.as_tensor(b)) for a, b in zip(_flat(pinned), _flat(want))]
        err = max(float((a - b).abs().max()) for a, b in leaves)
        err_dyn = max(float((torch.as_tensor(a) - torch.as_tensor(b)).abs().max())
                      for a, b in zip(_flat(pinned), _flat(dynamic)))
    med = {k: statistics.median(v) for k, v in times.items()}
    return dict(model=name, batch=batch, **{f"{k}_us": round(v, 1) for k, v in med.items()},
                pinned_over_dynamic=round(med["pinned"] / med["dynamic"], 3),
                pinned_over_eager=round(med["pinned"] / med["eager"], 3), err_vs_eager=err, pinned_vs_dynamic=err_dyn)


def _flat(out):
    if isinstance(out, (tuple, list)):
        return [x for o in out for x in _flat(o)]
    if isinstance(out, dict):
        return [x for o in out.values() for x in _flat(o)]
    return [out]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="bert,distilbert,gpt2,vit_hf,resnet18")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--backend", default="onnxruntime", choices=("onnxruntime", "openvino"))
    args = parser.parse_args()
    print(f"load {os.getloadavg()[0]:.2f}, threads {torch.get_num_threads()}, backend {args.backend}")
    print("| model | eager us | dynamic us | pinned us | pinned / dynamic | pinned / eager | err vs eager | "
          "pinned vs dynamic |")
    print("|---|---|---|---|---|---|---|---|")
    for name in args.models.split(","):
        r = measure(name, args.rounds, args.batch, args.backend)
        print(f"| {r['model']} b{r['batch']} | {r['eager_us']} | {r['dynamic_us']} | {r['pinned_us']} | "
              f"{r['pinned_over_dynamic']} | {r['pinned_over_eager']} | {r['err_vs_eager']:.1e} | "
              f"{r['pinned_vs_dynamic']:.1e} |", flush=True)


if __name__ == "__main__":
    main()
