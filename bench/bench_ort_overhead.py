"""Per-call overhead of tracejit's onnxruntime backend over bare onnxruntime calls on the SAME session.

``tracejit.optimize_for_inference(traced, backend="onnxruntime")`` (an OrtProgram) is timed
beside the ways one can call its InferenceSession directly, in one process, interleaved rounds,
medians (microseconds per call):

- ``wrapper``: ``program(x)`` (a torch tensor in, a torch tensor out);
- ``session.run, feed prepared``: ``session.run(None, feed)`` with the numpy feed built once
  (the floor: no per-call conversion at all, numpy out);
- ``_sess.run, feed prepared``: the C++ binding's ``run`` with that feed (the true floor the
  wrapper can reach: it calls this binding);
- ``session.run, x.numpy() per call``: the feed dict built per call from a numpy view;
- ``_sess.run, x.numpy()``: the C++ binding's ``run`` (skips InferenceSession.run's Python checks);
- ``_sess.run + from_numpy``: the same, outputs wrapped in torch tensors (what the wrapper must do);
- ``run_with_ort_values (numpy)``: OrtValues made by ``OrtValue.ortvalue_from_numpy(x.numpy())``,
  outputs converted with ``OrtValue.numpy()``;
- ``run_with_ort_values (dlpack)``: OrtValues from DLPack capsules in and out (zero-copy both ways);
- ``run_with_iobinding``: inputs bound by data pointer, outputs bound to CPU, copied out.

Two clocks per batch: wall time (``perf_counter``) and the calling thread's CPU time
(``thread_time``). The wrapper's work is all on the calling thread, so the CPU-time difference
measures its overhead even when other processes load the machine (wall-clock differences of a
few microseconds drown in scheduling noise at a load above the core count).

Usage: ``python bench/bench_ort_overhead.py [--rounds R] [--workloads mlp,elementwise,...]``.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

import numpy as np
import torch

_BENCH_DIR = os.path.dirname(os.path.abspath(__file__))
for _p in (_BENCH_DIR, os.path.dirname(_BENCH_DIR)):
    if _p not in sys.path:
        sys.path.insert(0, _p)

import onnxruntime as ort  # noqa: E402

import tracejit  # noqa: E402
from bench_core import build_mlp, elementwise_chain  # noqa: E402

C = ort.capi._pybind_state


def _small_linear():
    return torch.nn.Linear(4, 4).eval(), (torch.randn(1, 4),)


WORKLOADS = {
    "mlp": build_mlp,
    "elementwise": lambda: (elementwise_chain, (torch.randn(16),)),
    "linear4": _small_linear,
}


def variants(program, args):
    """name -> zero-argument callable; all use program.session."""
    sess = program.session
    raw = sess._sess
    in_names = [i.name for i in sess.get_inputs()]
    out_names = [o.name for o in sess.get_outputs()]
    feed = {n: a.numpy() for n, a in zip(in_names, args)}
    run_opts = C.RunOptions()
    cpu = C.OrtDevice(C.OrtDevice.cpu(), C.OrtDevice.default_memory(), 0)
    binding = sess.io_binding()

    def iobinding():
        for n, a in zip(in_names, args):
            binding.bind_input(n, "cpu", 0, np.float32, list(a.shape), a.data_ptr())
        for n in out_names:
            binding.bind_output(n, "cpu")
        sess.run_with_iobinding(binding)
        return [torch.from_numpy(o) for o in binding.copy_outputs_to_cpu()]

    return {
        "wrapper": lambda: program(*args),
        "session.run, feed prepared": lambda: sess.run(None, feed),
        "_sess.run, feed prepared": lambda: raw.run(out_names, feed, None),
        "session.run, x.numpy() per call": lambda: sess.run(None, {n: a.numpy() for n, a in zip(in_names, args)}),
        "_sess.run, x.numpy()": lambda: raw.run(out_names, {n: a.numpy() for n, a in zip(in_names, args)}, None),
        "_sess.run + from_numpy": lambda: [torch.from_numpy(r) for r in
                                           raw.run(out_names, {n: a.numpy() for n, a in zip(in_names, args)}, None)],
        "run_with_ort_values (numpy)": lambda: [torch.from_numpy(v.numpy()) for v in raw.run_with_ort_values(
            {n: C.OrtValue.ortvalue_from_numpy(a.numpy(), cpu) for n, a in zip(in_names, args)},
            out_names, run_opts)],
        "run_with_ort_values (dlpack)": lambda: [torch.from_dlpack(v.to_dlpack()) for v in raw.run_with_ort_values(
            {n: C.OrtValue.from_dlpack(torch.utils.dlpack.to_dlpack(a), False) for n, a in zip(in_names, args)},
            out_names, run_opts)],
        "run_with_iobinding": iobinding,
    }


def bench(name, rounds, target_s):
    torch.manual_seed(0)
    fn, args = WORKLOADS[name]()
    with torch.no_grad():
        traced = tracejit.trace(fn, args)
        program = tracejit.optimize_for_inference(traced, backend="onnxruntime")
        expected = fn(*args)
    calls = variants(program, args)
    for label, call in calls.items():    # each variant gives eager's answer before it is timed
        out = call()
        out = out[0] if isinstance(out, list) else out
        torch.testing.assert_close(torch.as_tensor(out), expected, rtol=1e-4, atol=1e-4, msg=lambda m: f"{label}: {m}")
        for _ in range(200):
            call()
    t0 = time.perf_counter()
    n = 0
    while time.perf_counter() - t0 < target_s:
        calls["wrapper"]()
        n += 1
    wall = {label: [] for label in calls}
    cpu = {label: [] for label in calls}
    for _ in range(rounds):
        for label, call in calls.items():
            c, t = time.thread_time(), time.perf_counter()
            for _ in range(n):
                call()
            wall[label].append((time.perf_counter() - t) / n * 1e6)
            cpu[label].append((time.thread_time() - c) / n * 1e6)
    return {label: (statistics.median(wall[label]), statistics.median(cpu[label])) for label in calls}, n


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--workloads", default=",".join(WORKLOADS))
    ns = parser.parse_args(argv)
    torch.set_num_threads(2)
    print(f"onnxruntime {ort.__version__}, torch {torch.__version__}, load avg {os.getloadavg()[0]:.2f}, "
          f"{ns.rounds} interleaved rounds, medians (us per call)")
    for name in ns.workloads.split(","):
        times, n = bench(name, ns.rounds, target_s=0.05)
        floor_wall, floor_cpu = times["session.run, feed prepared"]
        print(f"\n{name} ({n} calls per round): wall clock, calling thread's CPU time; each with its "
              "difference to session.run(None, feed) with the feed prepared")
        for label, (wall, cpu) in times.items():
            print(f"  {label:34s} {wall:8.2f} {wall - floor_wall:+7.2f}   {cpu:8.2f} {cpu - floor_cpu:+7.2f}")
    print(f"\nload avg at end {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
