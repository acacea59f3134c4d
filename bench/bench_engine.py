"""Inference-engine benchmark: tracejit.freeze, optimize_for_inference (torch and onnxruntime
backends) beside eager, torch.jit.trace + freeze + optimize_for_inference and onnxruntime through
torch.onnx. Same workloads, method and helpers as bench_peers.py (interleaved rounds, medians,
ratios to eager, outputs checked against eager before timing); torch.compile is left to
bench_peers.py.

Also measured: the per-call overhead of tracejit's onnxruntime wrapper over a bare
``session.run`` of the same session (same feed), and build time (export + session creation)
against torch.onnx.export + session creation.

Usage::

    python bench/bench_engine.py [--rounds R] [--only mlp,elementwise,...] [--no-write]

The table is printed and written into bench/RESULTS.md between the ``bench_engine`` markers
(the rest of the file, bench_peers.py's tables, is kept).
"""
from __future__ import annotations

import argparse
import datetime
import os
import platform
import sys
import time
from typing import Any, Callable

import torch

_BENCH_DIR = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [p for p in (_BENCH_DIR, os.path.dirname(_BENCH_DIR)) if p not in sys.path]

import bench_peers as bp  # noqa: E402
import tracejit  # noqa: E402

BEGIN, END = "<!-- bench_engine: begin -->", "<!-- bench_engine: end -->"
PEERS = ("eager", "jit.trace+freeze+OFI", "ONNX Runtime (torch.onnx)", "tracejit", "tracejit.freeze",
         "tracejit OFI (torch)", "tracejit OFI (onnxruntime)")
LOOSE = {"ONNX Runtime (torch.onnx)", "tracejit OFI (onnxruntime)"}
# conv+BN folding, channels-last convs and numpy kernels change float rounding: the passes' own
# standard (rtol 1e-4), between bench_peers' TIGHT (1e-5) and LOOSE (1e-3)
PASS_TOL = {"tracejit OFI (torch)": 1e-4}


def _traced(fn, args):
    with bp._Quiet(), torch.no_grad():
        return tracejit.trace(bp._as_module(fn).eval() if not isinstance(fn, torch.nn.Module) else fn, args)


def make_freeze(fn, args):
    return tracejit.freeze(_traced(fn, args)), args


def make_ofi(fn, args):
    return tracejit.optimize_for_inference(_traced(fn, args)), args


def make_ofi_ort(fn, args):
    program = tracejit.optimize_for_inference(_traced(fn, args), backend="onnxruntime", threads=bp.NUM_THREADS)
    make_ofi_ort.last = program  # type: ignore[attr-defined]
    return program, args


BUILDERS: dict[str, Callable] = {
    "jit.trace+freeze+OFI": bp.make_jit_frozen,
    "ONNX Runtime (torch.onnx)": bp.make_ort,
    "tracejit": bp.make_tracejit,
    "tracejit.freeze": make_freeze,
    "tracejit OFI (torch)": make_ofi,
    "tracejit OFI (onnxruntime)": make_ofi_ort,
}


CLOCKS = {"wall": time.perf_counter, "cpu": time.process_time}
CLOCK = {"name": "wall"}


def time_interleaved(peers: dict, rounds: int, warmup: int, target_s: float):
    """bench_peers.time_interleaved with the clock chosen by ``--clock``: ``cpu`` (process CPU time)
    is what a loaded, shared machine cannot steal from a single-threaded call; ``wall`` is the default."""
    if CLOCK["name"] == "wall":
        return bp.time_interleaved(peers, rounds, warmup=warmup, target_s=target_s)
    clock = CLOCKS[CLOCK["name"]]

    def batch(fn, args, n):
        t0 = clock()
        for _ in range(n):
            fn(*args)
        return clock() - t0

    for fn, args in peers.values():
        for _ in range(warmup):
            fn(*args)
    n = bp.calibrate(*peers["eager"], target_s=target_s)
    samples: dict[str, list[float]] = {name: [] for name in peers}
    for _ in range(rounds):
        for name, (fn, args) in peers.items():
            samples[name].append(batch(fn, args, n) / n)
    return {name: sorted(v)[len(v) // 2] for name, v in samples.items()}, n


def bench_workload(key: str, rounds: int) -> dict[str, Any]:
    label, builder, large = bp.WORKLOADS[key]
    torch.manual_seed(0)
    fn, args = builder()
    row: dict[str, Any] = {"workload": label, "status": {}, "build_s": {}}
    peers: dict[str, tuple[Callable, tuple]] = {"eager": (fn, args)}
    for name, make in BUILDERS.items():
        bp.log(f"{key}: building {name}")
        t0 = time.perf_counter()
        try:
            with torch.no_grad():
                peers[name] = make(fn, args)
        except Exception as exc:  # noqa: BLE001
            row["status"][name] = f"error: {bp._short(exc)}"
            continue
        row["build_s"][name] = time.perf_counter() - t0
    with bp._Quiet(), torch.no_grad():
        ref = fn(*args)
        for name, (pfn, pargs) in list(peers.items())[1:]:
            tol = bp.LOOSE_TOL if name in LOOSE else PASS_TOL.get(name, bp.TIGHT_TOL)
            try:
                out = bp._to_tensor(pfn(*pargs))
                torch.testing.assert_close(out, ref, rtol=tol, atol=tol)
            except Exception as exc:  # noqa: BLE001
                row["status"][name] = f"WRONG/error: {bp._short(exc, 60)}"
                del peers[name]
    program = getattr(make_ofi_ort, "last", None)
    if "tracejit OFI (onnxruntime)" in peers and program is not None:
        feed = {n: a.numpy() for n, a in zip(program._names, args)}
        peers["bare session.run (same session)"] = (program.session.run, (None, feed))
    bp.log(f"{key}: timing {len(peers)} peers")
    row["load"] = bp._loadavg()
    with torch.no_grad():
        times, n = time_interleaved(peers, rounds, warmup=3 if large else 20, target_s=0.5 if large else 0.1)
    row["load"] += f" -> {bp._loadavg()}"
    row["times"] = times
    row["n"] = n
    make_ofi_ort.last = None  # type: ignore[attr-defined]
    return row


def render(rows, rounds: int, seconds: float) -> str:
    lines = [BEGIN, "", "## Inference engine (bench/bench_engine.py)", "",
             f"- date: {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC; {bp.cpu_model()}; "
             f"torch threads {bp.NUM_THREADS}; python {platform.python_version()}, torch {torch.__version__}",
             f"- command: `python bench/bench_engine.py --clock {CLOCK['name']}` ({rounds} interleaved rounds, "
             f"medians, {CLOCK['name']} clock); {seconds:.0f} s",
             "- onnxruntime peers: CPU provider, 2 intra-op threads, spinning off. tracejit OFI (onnxruntime) = "
             "`tracejit.optimize_for_inference(traced, backend=\"onnxruntime\")`: tracejit's own ONNX export "
             "(onnxscript torch_lib) in an InferenceSession behind the traced call signature.",
             "- wrapper overhead = tracejit OFI (onnxruntime) minus a bare `session.run(None, feed)` on the same "
             "session with a prepared numpy feed.",
             "- tracejit OFI (torch) = freeze + the passes of tracejit/passes/pipeline.py: conv+BN folding, constant "
             "folding, CSE, DCE, linear weights stored transposed, conv weights channels-last (where no op reads "
             "strides), then in memory small float32 elementwise/linear runs as numpy kernels; a lean `__call__`.", "",
             "Microseconds per call, median, ratio to eager (lower is better).", ""]
    head = list(PEERS) + ["bare session.run (same session)"]
    lines.append("| workload | " + " | ".join(head) + " | wrapper overhead (us) |")
    lines.append("|---" * (len(head) + 2) + "|")
    for row in rows:
        eager = row["times"].get("eager")
        cells = []
        for name in head:
            t = row["times"].get(name)
            if t is None:
                cells.append(row["status"].get(name, "-"))
            else:
                cells.append(f"{t * 1e6:.1f} ({t / eager:.2f}x)")
        ort_t, bare = row["times"].get("tracejit OFI (onnxruntime)"), row["times"].get("bare session.run (same session)")
        over = f"{(ort_t - bare) * 1e6:.1f}" if ort_t and bare else "-"
        lines.append(f"| {row['workload']} | " + " | ".join(cells) + f" | {over} |")
    lines += ["", "Build seconds (tracejit OFI (onnxruntime): trace + export + session; ONNX Runtime (torch.onnx): "
              "export + session), and load average while timing.", "",
              "| workload | " + " | ".join(BUILDERS) + " | calls/round | load avg |",
              "|---" * (len(BUILDERS) + 3) + "|"]
    for row in rows:
        cells = [f"{row['build_s'][n]:.2f}" if n in row["build_s"] else "-" for n in BUILDERS]
        lines.append(f"| {row['workload']} | " + " | ".join(cells) + f" | {row['n']} | {row['load']} |")
    lines += ["", END]
    return "\n".join(lines) + "\n"


def write(section: str) -> None:
    path = bp.RESULTS_PATH
    text = open(path).read() if os.path.exists(path) else ""
    if BEGIN in text and END in text:
        text = text[:text.index(BEGIN)] + section + text[text.index(END) + len(END) + 1:]
    else:
        text = text.rstrip("\n") + "\n\n" + section
    with open(path, "w") as f:
        f.write(text)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--only", action="append", default=[])
    parser.add_argument("--no-write", action="store_true")
    parser.add_argument("--clock", choices=sorted(CLOCKS), default="wall",
                        help="wall (default) or cpu: process CPU time, steadier on a loaded machine for "
                             "single-threaded calls (it counts both threads' spinning for large models)")
    opts = parser.parse_args(argv)
    CLOCK["name"] = opts.clock
    torch.set_num_threads(bp.NUM_THREADS)
    keys = [k for item in opts.only for k in item.split(",")] or list(bp.WORKLOADS)
    start = time.perf_counter()
    rows = [bench_workload(k, opts.rounds) for k in keys]
    section = render(rows, opts.rounds, time.perf_counter() - start)
    print(section)
    if not opts.no_write:
        write(section)
    return 0


if __name__ == "__main__":
    sys.exit(main())
