"""Peer benchmark: every engine tracejit offers against the other ways to run a PyTorch model on CPU.

Methodology
-----------
* Environment: ``torch.set_num_threads(2)``, everything under ``torch.no_grad()``, torch seeded so
  inputs/weights are reproducible. Random weights, no downloads.
* Columns, all built once per workload and timed in the same process (builders: peer_builders.py):

  - peers: ``eager``; ``torch.jit.trace``; ``jit.trace+freeze+OFI`` (``torch.jit.trace`` then
    ``torch.jit.freeze`` then ``torch.jit.optimize_for_inference``; a plain function is wrapped in
    a module first); ``torch.compile`` (inductor; compiled and warmed up before timing);
    ``ORT (torch.onnx)``: ``torch.onnx.export`` (legacy exporter, the dynamo one if that fails) in
    an onnxruntime CPU session, timed as ``session.run(None, feed)`` with the numpy feed prepared
    once; ``OpenVINO (tracejit ONNX)``: OpenVINO's CPU plugin on the file ``tracejit.export_onnx``
    writes (``PERFORMANCE_HINT=LATENCY``, ``INFERENCE_PRECISION_HINT=f32`` (the CPU plugin's
    default is bf16 where the CPU has it), 2 threads), timed as ``infer(feed)`` with shared
    input/output memory and the feed prepared once; ``OpenVINO (torch.onnx)``: the same on the ORT
    peer's torch.onnx file (one export per workload), what a user without tracejit runs;
  - tracejit's engines: ``tracejit`` (``tracejit.trace``), ``tracejit.freeze``,
    ``tracejit OFI (torch)`` (``optimize_for_inference``), ``tracejit OFI (onnxruntime)``
    (``backend="onnxruntime"``: torch tensors in and out, the traced call signature),
    ``tracejit OFI (openvino)`` (``backend="openvino"``: the same, OpenVINO's CPU plugin, fp32);
    ``tracejit OFI (openvino, static shapes)`` (the same with ``static_shapes=True``, an opt-in:
    compiled for the call's shapes at the first call with them; fp32, counted in tracejit's best);
  - opt-in lower precision, not counted as an fp32 engine: ``tracejit OFI (onnxruntime, int8)``
    (``quantize="int8"``, onnxruntime's dynamic int8 quantization of the exported model) and
    ``tracejit OFI (openvino, bf16)`` (``precision="bf16"``, where the CPU has native bf16).

  Every onnxruntime session: ORT_ENABLE_ALL, intra-op threads 2, inter-op 1, spinning off (idle
  workers busy-waiting after a run slow the next peer on 2 cores; ORT itself was not faster with
  spinning on here). A column that cannot be built or called says ``error: <message>``.
* Outputs are checked first against eager with ``torch.testing.assert_close``: ``rtol=atol=1e-5``
  for torch.jit.trace, tracejit and tracejit.freeze (same kernels), 1e-3 for the others (they
  fold, fuse or reorder arithmetic); the int8 and bf16 columns must be within 10% relative L2 error. A
  column that fails is ``WRONG`` (largest absolute error) and is not timed. The largest absolute
  and the relative L2 error of the onnxruntime / OpenVINO / int8 / bf16 columns are tabulated.
* Per-call time: warm-up (20 calls per column, 3 for the large models), then the number N of calls
  per batch is calibrated on eager (a batch takes about 0.1 s, 0.5 s for ResNet-50 and BERT-base);
  for R rounds each column in turn runs a batch of N calls (``time.perf_counter``), rounds
  *interleaved* so drift of the machine affects all alike, each round starting one column later
  (no column always runs right after the same one). Reported: the MEDIAN per-call time in
  microseconds and its ratio to eager; the fastest peer, tracejit's fastest fp32 engine, and
  whether it beats that peer.
* Build time per column, and export + session creation: ``torch.onnx.export`` + session against
  ``tracejit`` export + session (``optimize_for_inference(backend="onnxruntime")`` on a traced
  program) and tracejit export + OpenVINO compile.
* Tracing time (ResNet-50, BERT-base): ``torch.jit.trace`` and ``tracejit.trace`` (defaults),
  interleaved, 3 rounds each; medians in seconds.

Workloads: ``mlp`` (3x Linear(64), batch 1), ``elementwise`` (60 chained elementwise ops on 16
elements, from ``bench_core.py``), ``transformer`` (``nn.TransformerEncoder``, d_model 256, 4 heads,
4 layers, ff 1024, batch_first, seq 64, batch 1), ``resnet50`` (``transformers``
``ResNetModel(ResNetConfig())``, 224x224, batch 1, pooled output), ``bert`` (``BertConfig()``
defaults, seq 128, batch 1, attention mask, first output).

Usage::

    python bench/bench_peers.py [--rounds R] [--quick] [--workloads mlp,bert,...] [--write-results]

``--quick``: only MLP, elementwise chain and TransformerEncoder (3 rounds unless ``--rounds``).
``--workloads`` (or ``--only``) picks workloads by name. The report is printed; with
``--write-results`` it also goes into bench/RESULTS.md between the ``bench_peers`` markers (the
rest of the file, bench_engine.py's section and notes, is kept).
"""

from __future__ import annotations

import argparse
import datetime
import gc
import os
import platform
import statistics
import sys
import time
from typing import Any, Callable

import torch
from torch import nn

_BENCH_DIR = os.path.dirname(os.path.abspath(__file__))
_REPO_ROOT = os.path.dirname(_BENCH_DIR)
for _p in (_BENCH_DIR, _REPO_ROOT):  # bench_core, the builders, and the in-repo package
    if _p not in sys.path:
        sys.path.insert(0, _p)

import bench_core  # noqa: E402
import peer_report  # noqa: E402
from bench_core import ELEMENTWISE_OPS, build_bert, build_mlp, cpu_model, elementwise_chain  # noqa: E402,F401
from peer_builders import (  # noqa: E402,F401  (bench_engine.py reads these through this module)
    BUILD_NOTES,
    NUM_THREADS,
    ORT_IMPORT_EXC,
    TRACEJIT_IMPORT_EXC,
    FnModule,
    _as_module,
    _Quiet,
    _short,
    _to_tensor,
    log,
    make_compile,
    make_jit_frozen,
    make_jit_trace,
    make_openvino,
    make_openvino_torch_onnx,
    make_ort,
    make_tracejit,
    make_tracejit_freeze,
    make_tracejit_ofi,
    make_tracejit_openvino,
    make_tracejit_openvino_static,
    make_tracejit_ort,
    make_tracejit_ort_int8,
    make_tracejit_openvino_bf16,
)

RESULTS_PATH = os.path.join(_BENCH_DIR, "RESULTS.md")
TIGHT_TOL = 1e-5  # traced TorchScript/tracejit programs run the same kernels as eager
LOOSE_TOL = 1e-3  # compiled / frozen / ONNX engines fold, fuse and reorder arithmetic
LOW_PRECISION_MAX_REL_ERR = 0.1   # garbage guard only: the accuracy table gives the real figures
TRACING_ROUNDS = 3

PEER_BUILDERS: dict[str, Callable[[Any, tuple], tuple[Callable, tuple]]] = {
    "torch.jit.trace": make_jit_trace,
    "jit.trace+freeze+OFI": make_jit_frozen,
    "torch.compile": make_compile,
    "ORT (torch.onnx)": make_ort,
    "OpenVINO (tracejit ONNX)": make_openvino,
    "OpenVINO (torch.onnx)": make_openvino_torch_onnx,
}
TRACEJIT_BUILDERS: dict[str, Callable[[Any, tuple], tuple[Callable, tuple]]] = {
    "tracejit": make_tracejit,
    "tracejit.freeze": make_tracejit_freeze,
    "tracejit OFI (torch)": make_tracejit_ofi,
    "tracejit OFI (onnxruntime)": make_tracejit_ort,
    "tracejit OFI (openvino)": make_tracejit_openvino,
    "tracejit OFI (openvino, static shapes)": make_tracejit_openvino_static,
}
LOW_PRECISION_BUILDERS = {"tracejit OFI (onnxruntime, int8)": make_tracejit_ort_int8,
                          "tracejit OFI (openvino, bf16)": make_tracejit_openvino_bf16}
BUILDERS = {**PEER_BUILDERS, **TRACEJIT_BUILDERS, **LOW_PRECISION_BUILDERS}
PEERS = ("eager",) + tuple(PEER_BUILDERS)
TRACEJIT_ENGINES = tuple(TRACEJIT_BUILDERS)
TIGHT = {"torch.jit.trace", "tracejit", "tracejit.freeze"}
ERROR_COLUMNS = ("ORT (torch.onnx)", "OpenVINO (tracejit ONNX)", "OpenVINO (torch.onnx)", "tracejit OFI (onnxruntime)",
                 "tracejit OFI (openvino)", "tracejit OFI (openvino, static shapes)",
                 "tracejit OFI (onnxruntime, int8)", "tracejit OFI (openvino, bf16)")
BUILD_NOTE_NAMES = ("torch.onnx.export + session", "tracejit export + session",
                    "tracejit export + session (int8)", "tracejit export + OpenVINO compile")


# --------------------------------------------------------------------------- #
# workloads
# --------------------------------------------------------------------------- #
def build_elementwise() -> tuple[Callable, tuple]:
    return elementwise_chain, (torch.randn(16),)


def build_transformer() -> tuple[nn.Module, tuple]:
    with _Quiet():  # enable_nested_tensor / batch_first chatter
        layer = nn.TransformerEncoderLayer(
            d_model=256, nhead=4, dim_feedforward=1024, batch_first=True
        )
        model = nn.TransformerEncoder(layer, num_layers=4).eval()
    return model, (torch.randn(1, 64, 256),)


class ResNetWrapper(nn.Module):
    def __init__(self, resnet: nn.Module):
        super().__init__()
        self.resnet = resnet

    def forward(self, pixel_values: torch.Tensor) -> torch.Tensor:
        # (last_hidden_state, pooler_output): the pooled (1, 2048, 1, 1) features
        return self.resnet(pixel_values, return_dict=False)[1]


def build_resnet50() -> tuple[nn.Module, tuple]:
    import transformers

    transformers.logging.set_verbosity_error()
    model = transformers.ResNetModel(transformers.ResNetConfig()).eval()  # defaults = ResNet-50
    return ResNetWrapper(model).eval(), (torch.randn(1, 3, 224, 224),)


# key -> (label, builder, large?)
WORKLOADS: dict[str, tuple[str, Callable[[], tuple[Any, tuple]], bool]] = {
    "mlp": ("MLP 3x Linear(64), batch 1", build_mlp, False),
    "elementwise": (f"elementwise chain ({ELEMENTWISE_OPS} ops, n=16)", build_elementwise, False),
    "transformer": ("nn.TransformerEncoder (d256, 4L, seq 64)", build_transformer, False),
    "resnet50": ("ResNet-50 (224x224, batch 1)", build_resnet50, True),
    "bert": ("BERT-base (seq 128, batch 1, mask)", build_bert, True),
}
TRACING_WORKLOADS = ("resnet50", "bert")



# --------------------------------------------------------------------------- #
# timing
# --------------------------------------------------------------------------- #
def _run_batch(fn: Callable, args: tuple, n: int) -> float:
    t0 = time.perf_counter()
    for _ in range(n):
        fn(*args)
    return time.perf_counter() - t0


def calibrate(fn: Callable, args: tuple, target_s: float) -> int:
    """N such that N calls of fn take about target_s.

    The per-call time is the best of 3 batches, so that a burst of load from
    other processes during calibration does not shrink N to 1.
    """
    n = 1
    while True:
        dt = _run_batch(fn, args, n)
        if dt >= target_s / 2 or n >= 1 << 22:
            break
        n *= 2
    dt = min([dt] + [_run_batch(fn, args, n) for _ in range(2)])
    return max(1, int(round(n * target_s / max(dt, 1e-9))))


def time_interleaved(
    peers: dict[str, tuple[Callable, tuple]], rounds: int, warmup: int, target_s: float,
    samples_out: dict | None = None,
) -> tuple[dict[str, float], int]:
    """Median per-call seconds per peer over interleaved rounds, and the N used; ``samples_out`` (a dict)
    receives each peer's per-round samples."""
    for fn, args in peers.values():
        for _ in range(warmup):
            fn(*args)
    n = calibrate(*peers["eager"], target_s=target_s)
    samples: dict[str, list[float]] = {name: [] for name in peers}
    names = list(peers)
    for r in range(rounds):
        # each round starts one column later: no column always runs right after the same one (another
        # engine's threads, caches and allocations), which the ResNet-50 columns were sensitive to
        k = r % len(names)
        for name in names[k:] + names[:k]:
            fn, args = peers[name]
            samples[name].append(_run_batch(fn, args, n) / n)
    if samples_out is not None:
        samples_out.update(samples)
    return {name: statistics.median(v) for name, v in samples.items()}, n



# --------------------------------------------------------------------------- #
# one workload
# --------------------------------------------------------------------------- #
def _errors(out: Any, ref: Any) -> tuple[float, float]:
    """(largest absolute error, relative L2 error) of ``out`` against ``ref``."""
    diff = (out.double() - ref.double())
    return diff.abs().max().item(), (diff.norm() / ref.double().norm().clamp_min(1e-30)).item()


def check_outputs(peers: dict[str, tuple[Callable, tuple]], ref: Any, status: dict[str, str],
                  errors: dict[str, tuple[float, float]]) -> None:
    """Drop (into ``status``) every column whose output is not eager's; record the errors of some."""
    for name, (pfn, pargs) in list(peers.items()):
        if name == "eager":
            continue
        try:
            with _Quiet():
                out = _to_tensor(pfn(*pargs))
            abs_err, rel_err = _errors(out, ref)
        except Exception as exc:  # noqa: BLE001
            status[name] = f"error: {_short(exc)}"
            del peers[name]
            continue
        if name in ERROR_COLUMNS:
            errors[name] = (abs_err, rel_err)
        if name in LOW_PRECISION_BUILDERS:
            ok = out.shape == ref.shape and rel_err <= LOW_PRECISION_MAX_REL_ERR
        else:
            tol = TIGHT_TOL if name in TIGHT else LOOSE_TOL
            try:
                torch.testing.assert_close(out, ref, rtol=tol, atol=tol)
                ok = True
            except Exception:  # noqa: BLE001
                ok = False
        if not ok:
            status[name] = f"WRONG (max abs err {abs_err:.1e}, rel {rel_err:.1e})"
            del peers[name]


def bench_workload(key: str, rounds: int) -> dict[str, Any]:
    label, builder, large = WORKLOADS[key]
    log(f"{key}: building model")
    torch.manual_seed(0)
    fn, args = builder()
    row: dict[str, Any] = {"workload": label, "build_s": {}, "notes": [], "errors": {}}
    status: dict[str, str] = {}
    peers: dict[str, tuple[Callable, tuple]] = {"eager": (fn, args)}
    BUILD_NOTES.clear()
    for name, make in BUILDERS.items():
        log(f"{key}: building {name}")
        t0 = time.perf_counter()
        try:
            peers[name] = make(fn, args)
        except Exception as exc:  # noqa: BLE001
            status[name] = f"error: {_short(exc)}"
            log(f"{key}: {name} failed: {_short(exc, 400)}")
            continue
        row["build_s"][name] = time.perf_counter() - t0
        if name == "ORT (torch.onnx)":
            row["notes"].append(f"ONNX via {make_ort.last_how}")  # type: ignore[attr-defined]
    row["build_notes"] = dict(BUILD_NOTES)

    log(f"{key}: checking outputs")
    with _Quiet():
        ref = fn(*args)
    check_outputs(peers, ref, status, row["errors"])

    log(f"{key}: timing {', '.join(peers)}")
    load_before = _loadavg()
    times, n = time_interleaved(peers, rounds, warmup=3 if large else 20, target_s=0.5 if large else 0.1)
    row["calls_per_round"] = n
    row["notes"].insert(0, f"load avg {load_before} -> {_loadavg()} while timing")
    for name in ("eager",) + tuple(BUILDERS):
        row[name] = times[name] * 1e6 if name in times else status.get(name, "n/a")
    log(f"{key}: done ({', '.join(f'{k}={v * 1e6:.1f}us' for k, v in times.items())})")
    del peers, fn, args, ref
    gc.collect()
    return row


def bench_tracing_time(key: str, rounds: int = TRACING_ROUNDS) -> dict[str, Any]:
    label, builder, _ = WORKLOADS[key]
    log(f"{key}: tracing-time benchmark")
    torch.manual_seed(0)
    model, args = builder()
    return bench_core.bench_tracing_time(rounds, model, args, label,
                                         {"torch.jit.trace": make_jit_trace, "tracejit": make_tracejit})


# --------------------------------------------------------------------------- #
# report
# --------------------------------------------------------------------------- #
def _version(mod_name: str) -> str:
    try:
        mod = __import__(mod_name)
        return getattr(mod, "__version__", "?")
    except Exception:  # noqa: BLE001
        return "not installed"


def _loadavg() -> str:
    try:
        return f"{os.getloadavg()[0]:.2f}"
    except OSError:
        return "n/a"


def render(rows, tracing, header: list[str]) -> str:
    out = ["# tracejit peer benchmark", ""] + header + [""]
    out += ["## Per-call time", "",
            "Microseconds per call, median over interleaved rounds, and ratio to eager (lower is better). "
            "Outputs are checked against eager first; WRONG means the check failed and the column was not "
            "timed. *fastest peer*: the fastest column that is not tracejit's; *tracejit's best*: tracejit's "
            "fastest fp32 engine (the int8 and bf16 columns are opt-ins and not counted).", ""]
    out += peer_report.per_call_table(rows, PEERS, TRACEJIT_ENGINES, tuple(LOW_PRECISION_BUILDERS))
    out += ["", "Largest absolute error / relative L2 error against eager (fp32 eager as the reference).", ""]
    out += peer_report.accuracy_table(rows, ERROR_COLUMNS)
    out += ["", "## Build time", "",
            "Seconds to build each column once (torch.compile: compile + 3 warm-up calls; ORT (torch.onnx): "
            "export + session; tracejit engines after tracejit: from the shared trace), then export + "
            "session creation alone: torch.onnx.export + session against tracejit's export + session.", ""]
    out += peer_report.build_time_table(rows, BUILDERS, BUILD_NOTE_NAMES)
    if tracing:
        out += ["", "## Tracing time", "",
                f"Seconds to trace, defaults (check_trace=True), median of {TRACING_ROUNDS} interleaved rounds.", ""]
        out += peer_report.tracing_table(tracing)
    return "\n".join(out) + "\n"


def _parse(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--rounds", type=int, default=None, help="interleaved rounds (default 7, 3 with --quick)")
    parser.add_argument("--quick", action="store_true", help="only mlp, elementwise and transformer")
    parser.add_argument("--workloads", "--only", action="append", default=None, metavar="NAME,...",
                        help=f"run only these workloads (comma separated, repeatable): {', '.join(WORKLOADS)}")
    parser.add_argument("--write-results", action="store_true",
                        help="also write the report into bench/RESULTS.md (between the bench_peers markers)")
    ns = parser.parse_args(argv)
    keys = list(WORKLOADS)
    if ns.workloads:
        wanted = [k.strip() for item in ns.workloads for k in item.split(",") if k.strip()]
        unknown = [k for k in wanted if k not in WORKLOADS]
        if unknown:
            parser.error(f"unknown workload(s) {unknown}; choose from {list(WORKLOADS)}")
        keys = [k for k in keys if k in wanted]
    if ns.quick:
        keys = [k for k in keys if not WORKLOADS[k][2]]
    if not keys:
        parser.error("nothing to run (--quick skips resnet50 and bert)")
    return ns, keys, ns.rounds if ns.rounds is not None else (3 if ns.quick else 7)


def main(argv: list[str] | None = None) -> int:
    ns, keys, rounds = _parse(argv)
    torch.set_num_threads(NUM_THREADS)
    torch.manual_seed(0)
    t_start = time.perf_counter()
    load_start = _loadavg()
    command = " ".join(sys.argv[1:] if argv is None else argv)
    header = [
        f"- date: {datetime.datetime.now(datetime.timezone.utc).strftime('%Y-%m-%d %H:%M UTC')}",
        f"- CPU: {cpu_model()}; {os.cpu_count()} logical cores; torch threads: {torch.get_num_threads()}",
        f"- python {platform.python_version()}, torch {torch.__version__}, onnxruntime {_version('onnxruntime')}, "
        f"openvino {_version('openvino')}, onnx {_version('onnx')}, onnxscript {_version('onnxscript')}, "
        f"transformers {_version('transformers')}",
        f"- command: `{('python bench/bench_peers.py ' + command).rstrip()}` ({rounds} interleaved rounds, medians)",
        f"- onnxruntime sessions: CPUExecutionProvider, ORT_ENABLE_ALL, intra_op_num_threads={NUM_THREADS}, "
        "inter_op 1, session.intra_op.allow_spinning=0; OpenVINO: CPU, PERFORMANCE_HINT=LATENCY, "
        f"INFERENCE_PRECISION_HINT=f32, INFERENCE_NUM_THREADS={NUM_THREADS}",
    ]
    for what, exc in (("tracejit", TRACEJIT_IMPORT_EXC), ("onnxruntime", ORT_IMPORT_EXC)):
        if exc is not None:
            header.append(f"- note: import {what} failed: {_short(exc, 200)}")

    rows: list[dict[str, Any]] = []
    tracing: list[dict[str, Any]] = []
    with torch.no_grad():
        for key in keys:
            rows.append(bench_workload(key, rounds))
        for key in keys:
            if key in TRACING_WORKLOADS:
                tracing.append(bench_tracing_time(key))
    header.append(f"- total run time: {time.perf_counter() - t_start:.0f} s; load average (1 min) at start "
                  f"{load_start}, at end {_loadavg()} (other processes distort the timings when it exceeds "
                  "the core count)")
    text = render(rows, tracing, header)
    print(text)
    if ns.write_results:
        peer_report.write_results(RESULTS_PATH, text)
        log(f"wrote {RESULTS_PATH}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
