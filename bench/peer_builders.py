"""Peer builders for bench_peers.py: each ``make_*(fn, args)`` returns ``(callable, call_args)`` so the
timed loop is ``callable(*call_args)``; a builder raises if its engine cannot take the workload.

Peers: torch.jit.trace, jit.trace + freeze + optimize_for_inference, torch.compile, onnxruntime on
a torch.onnx export, OpenVINO on tracejit's ONNX file; tracejit's engines: tracejit.trace,
tracejit.freeze, optimize_for_inference (torch path, onnxruntime backend, onnxruntime int8,
openvino backend fp32 / static shapes / bf16).
Build times of the parts that matter (export + session) are left in ``BUILD_NOTES``.
torch.onnx's export runs in a child process bounded in memory and time (``export_in_child``): an export past
its limits is the ORT peer's error ("export > 8 GB"), never the end of the bench.
"""
from __future__ import annotations

import os
import sys
import tempfile
import time
from typing import Any, Callable

import torch
from torch import nn

from torch_onnx_export import (FnModule, _as_module, _native_output_silenced, _Quiet, _short,  # noqa: E402,F401
                               export_in_process as _export_in_process, log)

NUM_THREADS = 2
BUILD_NOTES: dict[str, float] = {}   # "what" -> seconds, for the build table (reset per workload)

try:  # tolerate a broken package: its column then says why
    import tracejit  # type: ignore

    TRACEJIT_IMPORT_EXC: BaseException | None = None
except Exception as exc:  # noqa: BLE001
    tracejit = None  # type: ignore
    TRACEJIT_IMPORT_EXC = exc

try:
    import onnxruntime as ort  # type: ignore

    ORT_IMPORT_EXC: BaseException | None = None
except Exception as exc:  # noqa: BLE001
    ort = None  # type: ignore
    ORT_IMPORT_EXC = exc


def _to_tensor(out: Any) -> Any:
    """onnxruntime returns a list of numpy arrays, OpenVINO a dict of them; every workload has one output."""
    if type(out).__name__ == "OVDict":
        out = list(out.values())
    if isinstance(out, list) and len(out) == 1:
        out = out[0]
    if type(out).__module__ == "numpy":
        return torch.from_numpy(out)
    return out


# --------------------------------------------------------------------------- #
# torch peers
# --------------------------------------------------------------------------- #
def make_jit_trace(fn: Any, args: tuple) -> tuple[Callable, tuple]:
    with _Quiet():
        return torch.jit.trace(fn, args), args


def make_jit_frozen(fn: Any, args: tuple) -> tuple[Callable, tuple]:
    with _Quiet():
        traced = torch.jit.trace(_as_module(fn).eval(), args)
        frozen = torch.jit.freeze(traced.eval())
        return torch.jit.optimize_for_inference(frozen), args


def make_compile(fn: Any, args: tuple) -> tuple[Callable, tuple]:
    compiled = torch.compile(fn)
    with _Quiet():
        for _ in range(3):  # compile + warm-up; raises here if inductor fails
            compiled(*args)
    return compiled, args


# --------------------------------------------------------------------------- #
# onnxruntime / OpenVINO peers
# --------------------------------------------------------------------------- #
_ONNX_BYTES: dict[int, tuple[Any, tuple, bytes, str]] = {}


def _onnx_bytes(fn: Any, args: tuple) -> tuple[bytes, str]:
    """torch.onnx's export of ``fn`` (legacy exporter, else dynamo), made once per workload: the
    onnxruntime and OpenVINO peers run the same file."""
    hit = _ONNX_BYTES.get(id(fn))
    if hit is not None and hit[0] is fn and hit[1] is args:
        return hit[2], hit[3]
    model_bytes, how = _export_with_torch_onnx(fn, args)
    _ONNX_BYTES[id(fn)] = (fn, args, model_bytes, how)
    return model_bytes, how


# torch.onnx's export runs in a child process under these limits: the dynamo exporter took 22.7 GB
# (and the kernel's OOM killer took the whole bench) on vgg11_bn at batch 8 (bench_zoo, zoo6 round)
EXPORT_MEMORY_GB = 8.0    # the exporting process's address space (torch imported: ~1.5 GB of it)
EXPORT_TIME_S = 300.0
_EXPORTER = "torch_onnx_export:export_in_process"   # a module importing torch only: the child starts fast

# the child: a fresh interpreter (a fork of the bench, whose OpenMP / onnxruntime / OpenVINO threads do not
# exist in the copy, hung in torch's export now and then); argv: job file, "module:function", out dir, prepare
_CHILD = r"""
import importlib, os, sys
job, target, out, prepare = sys.argv[1:5]
def _call(spec):
    mod, name = spec.split(":")
    return getattr(importlib.import_module(mod), name)
try:
    fn, args = None, ()
    if prepare:
        _call(prepare)()
    if os.path.getsize(job):
        import torch
        torch.set_num_threads(1)
        data = torch.load(job, weights_only=False)
        fn, args = data["fn"], data["args"]
    model_bytes, how = _call(target)(fn, args)
    with open(os.path.join(out, "model.onnx"), "wb") as f:
        f.write(model_bytes)
    with open(os.path.join(out, "how.txt"), "w") as f:
        f.write(how)
except BaseException as exc:
    text = f"{type(exc).__name__}: {exc}"
    memory = isinstance(exc, MemoryError) or any(k in text.lower() for k in (
        "bad_alloc", "can't allocate memory", "cannot allocate memory", "out of memory"))
    with open(os.path.join(out, "error.txt"), "w") as f:
        f.write(("memory: " if memory else "") + " ".join(text.split())[:400])
    sys.exit(1)
"""


class ExportLimitExceeded(RuntimeError):
    """torch.onnx's export went past ``EXPORT_MEMORY_GB`` or ``EXPORT_TIME_S``: the ORT peer's cell says so."""


def _export_with_torch_onnx(fn: Any, args: tuple) -> tuple[bytes, str]:
    """torch.onnx's export of ``fn`` in a child process bounded in memory and time; in this process where
    ``fn`` cannot be pickled for the child (a plain function of a bench script) or there is no RLIMIT_AS."""
    try:
        import resource  # noqa: F401  (POSIX)
    except ImportError:
        return _export_in_process(fn, args)
    try:
        return export_in_child(fn, args, EXPORT_MEMORY_GB, EXPORT_TIME_S)
    except _Unpicklable as exc:
        log(f"  ORT peer: exporting in this process ({exc})")
        return _export_in_process(fn, args)


class _Unpicklable(Exception):
    pass


def export_in_child(fn: Any, args: tuple, memory_gb: float, time_s: float, export: str = _EXPORTER) -> tuple[bytes, str]:
    """Run ``export`` ("module:function", called as ``function(fn, args)``, default torch.onnx's export) in a
    fresh Python process (this one's ``sys.path``) whose address space is limited to ``memory_gb``
    (RLIMIT_AS) and which is killed after ``time_s``; it writes the .onnx file this process reads.
    ``fn`` and ``args`` travel by ``torch.save`` (none when ``fn`` is None: the child then does not import
    torch). Raises ``ExportLimitExceeded`` ("export > N GB" / "export > N s"), or the export's own error."""
    import pickle
    import resource
    import subprocess

    with tempfile.TemporaryDirectory() as tmp:
        job = os.path.join(tmp, "job.pt")
        if fn is None:
            open(job, "wb").close()
        else:
            try:
                torch.save({"fn": fn, "args": args}, job)
            except (pickle.PicklingError, AttributeError, TypeError, RuntimeError) as exc:
                # (RuntimeError: torch refuses to pickle a parametrized module, wav2vec2's weight norm)
                raise _Unpicklable(_short(exc, 120)) from exc
        _soft, hard = resource.getrlimit(resource.RLIMIT_AS)
        limit = int(memory_gb * 2**30) if hard == resource.RLIM_INFINITY else min(int(memory_gb * 2**30), hard)
        # (no fn: the child imports no torch, so no torchvision either; a test module that imported zoo_models
        # made the 0.1 GB child of test_bench_ort_peer_bound load torch, and fail to map it)
        prepare = "zoo_models:_torchvision" if fn is not None and "zoo_models" in sys.modules \
            and "torchvision" in sys.modules else ""
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p), OMP_NUM_THREADS="1")
        proc = subprocess.Popen([sys.executable, "-c", _CHILD, job, export, tmp, prepare], env=env,
                                preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_AS, (limit, hard)))
        try:
            proc.wait(timeout=time_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            raise ExportLimitExceeded(f"export > {time_s:g} s") from None
        paths = {n: os.path.join(tmp, n) for n in ("model.onnx", "how.txt", "error.txt")}
        if proc.returncode == 0 and os.path.exists(paths["model.onnx"]):
            with open(paths["model.onnx"], "rb") as f, open(paths["how.txt"]) as h:
                return f.read(), h.read()
        error = open(paths["error.txt"]).read() if os.path.exists(paths["error.txt"]) else ""
        if error.startswith("memory: "):
            raise ExportLimitExceeded(f"export > {memory_gb:g} GB ({error[8:120]})")
        if not error:   # died in native code (an uncaught std::bad_alloc aborts; so does a crash)
            reason = f"killed by signal {-proc.returncode}" if proc.returncode < 0 else f"exit {proc.returncode}"
            raise ExportLimitExceeded(f"export died ({reason}; limits {memory_gb:g} GB, {time_s:g} s)")
        raise RuntimeError(error)


def ort_session_options():
    """The session settings of every onnxruntime column (peer and tracejit backend alike)."""
    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    opts.intra_op_num_threads = NUM_THREADS
    opts.inter_op_num_threads = 1
    opts.log_severity_level = 3
    # idle workers would busy-wait after each run; on 2 cores that steals a core from whatever
    # runs next (the peer after ORT ran 2-4x slower on the TransformerEncoder), and ORT's own
    # per-call time was not better with spinning on (bench_ort_overhead.py --spinning)
    opts.add_session_config_entry("session.intra_op.allow_spinning", "0")
    return opts


def make_ort(fn: Any, args: tuple) -> tuple[Callable, tuple]:
    if ort is None:
        raise ORT_IMPORT_EXC  # type: ignore[misc]
    t0 = time.perf_counter()
    model_bytes, how = _onnx_bytes(fn, args)
    session = ort.InferenceSession(model_bytes, ort_session_options(), providers=["CPUExecutionProvider"])
    BUILD_NOTES["torch.onnx.export + session"] = time.perf_counter() - t0
    arrays = {f"input_{i}": a.numpy() for i, a in enumerate(args)}
    feed = {i.name: arrays[i.name] for i in session.get_inputs()}
    make_ort.last_how = how  # type: ignore[attr-defined]
    return session.run, (None, feed)


OPENVINO_CONFIG = {"PERFORMANCE_HINT": "LATENCY",
                   # f32 stated: the CPU plugin computes in bf16 by default on CPUs that have it
                   "INFERENCE_PRECISION_HINT": "f32", "INFERENCE_NUM_THREADS": NUM_THREADS}


def make_openvino_torch_onnx(fn: Any, args: tuple) -> tuple[Callable, tuple]:
    """OpenVINO's CPU plugin on torch.onnx's file (the ORT peer's): what a user without tracejit runs."""
    import openvino as ov

    core = ov.Core()
    model_bytes, _ = _onnx_bytes(fn, args)
    compiled = core.compile_model(core.read_model(model_bytes, b""), "CPU", OPENVINO_CONFIG)
    request = compiled.create_infer_request()
    feed = [a.numpy() for a in args]
    return lambda: request.infer(feed, share_inputs=True, share_outputs=True), ()


def make_openvino(fn: Any, args: tuple) -> tuple[Callable, tuple]:
    """OpenVINO's CPU plugin on the file tracejit.export_onnx writes (latency hint, 2 threads)."""
    import openvino as ov

    traced = _traced(fn, args)
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "model.onnx")
        t0 = time.perf_counter()
        with _Quiet():
            tracejit.export_onnx(traced, path)
        compiled = ov.Core().compile_model(path, "CPU", OPENVINO_CONFIG)
        BUILD_NOTES["tracejit export + OpenVINO compile"] = time.perf_counter() - t0
    request = compiled.create_infer_request()
    feed = [a.numpy() for a in args]
    return lambda: request.infer(feed, share_inputs=True, share_outputs=True), ()


# --------------------------------------------------------------------------- #
# tracejit engines (one trace per workload, shared by them)
# --------------------------------------------------------------------------- #
_TRACED: dict[int, tuple[Any, tuple, Any]] = {}


def _traced(fn: Any, args: tuple) -> Any:
    hit = _TRACED.get(id(fn))
    if hit is not None and hit[0] is fn and hit[1] is args:
        return hit[2]
    if tracejit is None:
        raise TRACEJIT_IMPORT_EXC  # type: ignore[misc]
    with _Quiet(), torch.no_grad():
        traced = tracejit.trace(fn, args)
    _TRACED.clear()
    _TRACED[id(fn)] = (fn, args, traced)
    return traced


def make_tracejit(fn: Any, args: tuple) -> tuple[Callable, tuple]:
    _TRACED.pop(id(fn), None)      # timed from scratch: this column's build time is the trace
    return _traced(fn, args), args


def make_tracejit_freeze(fn: Any, args: tuple) -> tuple[Callable, tuple]:
    traced = _traced(fn, args)
    with _Quiet():
        return (tracejit.freeze(traced) if isinstance(traced, nn.Module) else traced), args


def make_tracejit_ofi(fn: Any, args: tuple) -> tuple[Callable, tuple]:
    with _Quiet():
        return tracejit.optimize_for_inference(_traced(fn, args)), args


def make_tracejit_ort(fn: Any, args: tuple, **options: Any) -> tuple[Callable, tuple]:
    traced = _traced(fn, args)
    t0 = time.perf_counter()
    with _Quiet():
        program = tracejit.optimize_for_inference(traced, backend="onnxruntime", threads=NUM_THREADS, **options)
    BUILD_NOTES["tracejit export + session" + (" (int8)" if options else "")] = time.perf_counter() - t0
    return program, args


def make_tracejit_ort_int8(fn: Any, args: tuple) -> tuple[Callable, tuple]:
    return make_tracejit_ort(fn, args, quantize="int8")


def make_tracejit_openvino_bf16(fn: Any, args: tuple) -> tuple[Callable, tuple]:
    """The openvino backend with precision="bf16" (an opt-in; refused on CPUs without native bf16)."""
    with _Quiet():
        return tracejit.optimize_for_inference(_traced(fn, args), backend="openvino", threads=NUM_THREADS,
                                               precision="bf16"), args


def make_tracejit_openvino(fn: Any, args: tuple) -> tuple[Callable, tuple]:
    with _Quiet():
        return tracejit.optimize_for_inference(_traced(fn, args), backend="openvino", threads=NUM_THREADS), args


def make_tracejit_openvino_static(fn: Any, args: tuple) -> tuple[Callable, tuple]:
    """The openvino backend with static_shapes=True: compiled for the benchmark's shapes at the first call."""
    with _Quiet():
        program = tracejit.optimize_for_inference(_traced(fn, args), backend="openvino", threads=NUM_THREADS,
                                                  static_shapes=True)
        program(*args)   # the static compile belongs to the build, not to the first timed call
        return program, args
