"""The onnxruntime backend's per-call time over its own session, on bench_zoo models (issue #25, ortgap8).

bench_ort_overhead.py times small workloads without size guards; a transformer's call also checks the guards
ONNX cannot (backends/onnx_call.with_size_guards) and may check its float inputs for NaN. For each
``model:batch`` this times, interleaved in one process (15 rounds of 40 calls, which one goes first alternating):
``wrapper`` (``optimize_for_inference(traced, backend="onnxruntime")(*args)``) and the same session's C++ run with
a numpy feed built per call (``_sess.run(names, {n: x.numpy()}, None)``: what a caller of the bare session pays),
and prints the minimum and median per call and the minimum's difference. Run it with OMP_NUM_THREADS=1, the trees
to compare in alternating fresh processes.

Usage: ``python bench/bench_ort_wrapper_zoo.py bert:1 vit_tv:1 llama:1 t5:1``
"""
from __future__ import annotations

import os
import statistics
import sys
import time
import warnings

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

ROUNDS, CALLS = 15, 40


def main(specs: list[str]) -> None:
    import torch
    import tracejit
    from zoo_models import ZOO

    torch.set_num_threads(1)
    warnings.simplefilter("ignore")
    for spec in specs:
        name, batch = spec.split(":")
        module, make_inputs = ZOO[name]()
        args = make_inputs(int(batch))
        program = tracejit.optimize_for_inference(tracejit.trace(module, args), backend="onnxruntime")
        session = program.session
        run, out_names = session._sess.run, [o.name for o in session.get_outputs()]
        in_names = [i.name for i in session.get_inputs()]
        calls = {"wrapper": lambda: program(*args),
                 "bare": lambda: run(out_names, {n: a.numpy() for n, a in zip(in_names, args)}, None)}
        times: dict[str, list[float]] = {k: [] for k in calls}
        for _ in range(5):
            for call in calls.values():
                call()
        for r in range(ROUNDS):
            for key in (list(calls) if r % 2 else list(reversed(calls))):
                t0 = time.perf_counter()
                for _ in range(CALLS):
                    calls[key]()
                times[key].append((time.perf_counter() - t0) / CALLS * 1e6)
        w, b = times["wrapper"], times["bare"]
        print(f"{name} b{batch}: wrapper min {min(w):.1f} med {statistics.median(w):.1f} | _sess.run + x.numpy() "
              f"min {min(b):.1f} med {statistics.median(b):.1f} | overhead (min) {min(w) - min(b):.1f} us", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:] or ["bert:1", "vit_tv:1", "llama:1", "t5:1"])
