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

Many short batches (50 calls) per variant, interleaved; per variant the median and the MINIMUM
wall time per call over the rounds, and the median of the calling thread's CPU time
(``thread_time``). Differences of a few microseconds drown in scheduling noise when other
processes load the machine; the minimum is what that noise disturbs least (it only ever adds).

Usage: ``python bench/bench_ort_overhead.py [--rounds R] [--workloads mlp,elementwise,...]
[--write-results]`` (the last: the report also goes into bench/RESULTS.md between the
``bench_ort_overhead`` markers, the rest of the file kept).
"""
from __future__ import annotations

import argparse
import datetime
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

import peer_report  # noqa: E402
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
            {n: _ortvalue_from_dlpack(C, torch.utils.dlpack.to_dlpack(a)) for n, a in zip(in_names, args)},
            out_names, run_opts)],
        "run_with_iobinding": iobinding,
    }


def _ortvalue_from_dlpack(C, capsule):
    """``OrtValue.from_dlpack``: onnxruntime 1.31 took ``(capsule, is_bool_tensor)``, later builds take the capsule
    alone (the two-argument call raised TypeError before reading the capsule)."""
    try:
        return C.OrtValue.from_dlpack(capsule, False)
    except TypeError:
        return C.OrtValue.from_dlpack(capsule)


BATCH = 50   # calls per timed batch: short batches, many rounds, so that the minimum is meaningful


def bench(name, rounds):
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
    wall = {label: [] for label in calls}
    cpu = {label: [] for label in calls}
    for _ in range(rounds):
        for label, call in calls.items():
            c, t = time.thread_time(), time.perf_counter()
            for _ in range(BATCH):
                call()
            wall[label].append((time.perf_counter() - t) / BATCH * 1e6)
            cpu[label].append((time.thread_time() - c) / BATCH * 1e6)
    return {label: (statistics.median(wall[label]), min(wall[label]), statistics.median(cpu[label]))
            for label in calls}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--rounds", type=int, default=200)
    parser.add_argument("--workloads", default=",".join(WORKLOADS))
    parser.add_argument("--write-results", action="store_true")
    ns = parser.parse_args(argv)
    torch.set_num_threads(2)
    lines = ["## onnxruntime backend: per-call overhead (bench/bench_ort_overhead.py)", "",
             f"- date: {datetime.datetime.now(datetime.timezone.utc).strftime('%Y-%m-%d %H:%M UTC')}; "
             f"onnxruntime {ort.__version__}, torch {torch.__version__}; {ns.rounds} interleaved rounds, medians; "
             f"load average at start {os.getloadavg()[0]:.2f}",
             "- microseconds per call on one session; `diff`: minus `session.run(None, feed)` with the feed "
             "prepared once; wall clock median and minimum over the rounds (the minimum is what other processes "
             "on the machine disturb least), and the calling thread's CPU time", ""]
    for name in ns.workloads.split(","):
        times = bench(name, ns.rounds)
        floor = times["session.run, feed prepared"]
        lines += [f"{name} ({ns.rounds} rounds of {BATCH} calls):", "",
                  "| call | wall median | diff | wall min | diff | thread CPU median | diff |",
                  "|---|---|---|---|---|---|---|"]
        lines += ["| " + label + " | " + " | ".join(f"{v:.2f} | {v - f:+.2f}" for v, f in zip(values, floor)) + " |"
                  for label, values in times.items()]
        lines.append("")
    lines.append(f"- load average at end {os.getloadavg()[0]:.2f}")
    text = "\n".join(lines) + "\n"
    print(text)
    if ns.write_results:
        peer_report.write_results(os.path.join(_BENCH_DIR, "RESULTS.md"), text,
                                  "<!-- bench_ort_overhead: begin -->", "<!-- bench_ort_overhead: end -->")
    return 0


if __name__ == "__main__":
    sys.exit(main())
