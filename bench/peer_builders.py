"""Peer builders for bench_peers.py: each ``make_*(fn, args)`` returns ``(callable, call_args)`` so the
timed loop is ``callable(*call_args)``; a builder raises if its engine cannot take the workload.

Peers: torch.jit.trace, jit.trace + freeze + optimize_for_inference, torch.compile, onnxruntime on
a torch.onnx export, OpenVINO on tracejit's ONNX file; tracejit's engines: tracejit.trace,
tracejit.freeze, optimize_for_inference (torch path, onnxruntime backend, onnxruntime int8,
openvino backend fp32 / static shapes / bf16).
Build times of the parts that matter (export + session) are left in ``BUILD_NOTES``.
torch.onnx's export runs in a forked child bounded in memory and time (``export_in_child``): an export past
its limits is the ORT peer's error ("export > 6 GB"), never the end of the bench.
"""
from __future__ import annotations

import contextlib
import io
import logging
import os
import sys
import tempfile
import time
import warnings
from typing import Any, Callable

import torch
from torch import nn

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


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def _short(exc: BaseException, limit: int = 90) -> str:
    msg = f"{type(exc).__name__}: {exc}".replace("\n", " ").replace("|", "/").replace("`", "'")
    msg = " ".join(msg.split())
    return msg if len(msg) <= limit else msg[: limit - 3] + "..."


class _Quiet:
    """Silence Python warnings (jit deprecation, tracer warnings, nested tensor...)."""

    def __enter__(self) -> None:
        self._cm = warnings.catch_warnings()
        self._cm.__enter__()
        warnings.simplefilter("ignore")

    def __exit__(self, *exc: Any) -> None:
        self._cm.__exit__(*exc)


class FnModule(nn.Module):
    """A plain function as a module (for freezing and ONNX export)."""

    def __init__(self, fn: Callable):
        super().__init__()
        self.fn = fn

    def forward(self, *args: Any) -> Any:
        return self.fn(*args)


def _as_module(fn: Any) -> nn.Module:
    return fn if isinstance(fn, nn.Module) else FnModule(fn).eval()


def _to_tensor(out: Any) -> Any:
    """onnxruntime returns a list of numpy arrays, OpenVINO a dict of them; every workload has one output."""
    if type(out).__name__ == "OVDict":
        out = list(out.values())
    if isinstance(out, list) and len(out) == 1:
        out = out[0]
    if type(out).__module__ == "numpy":
        return torch.from_numpy(out)
    return out


@contextlib.contextmanager
def _native_output_silenced() -> Any:
    """Discard what native code writes to file descriptors 1 and 2."""
    sys.stdout.flush()
    sys.stderr.flush()
    saved = [os.dup(1), os.dup(2)]
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, 1)
        os.dup2(devnull, 2)
        yield
    finally:
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        for fd in saved + [devnull]:
            os.close(fd)


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
EXPORT_MEMORY_GB = 6.0    # address space the export may add to what the bench process holds
EXPORT_TIME_S = 300.0


class ExportLimitExceeded(RuntimeError):
    """torch.onnx's export went past ``EXPORT_MEMORY_GB`` or ``EXPORT_TIME_S``: the ORT peer's cell says so."""


def _export_with_torch_onnx(fn: Any, args: tuple) -> tuple[bytes, str]:
    """torch.onnx's export of ``fn`` in a forked child bounded in memory and time (where fork exists)."""
    if not hasattr(os, "fork"):
        return _export_in_process(fn, args)
    return export_in_child(fn, args, EXPORT_MEMORY_GB, EXPORT_TIME_S)


def export_in_child(fn: Any, args: tuple, memory_gb: float, time_s: float,
                    export: Callable[[Any, tuple], tuple[bytes, str]] | None = None) -> tuple[bytes, str]:
    """Run ``export`` (default: ``_export_in_process``, torch.onnx) in a forked child whose address space may grow by ``memory_gb`` at
    most (RLIMIT_AS) and which is killed after ``time_s``; the child writes the .onnx file the parent
    reads. Raises ``ExportLimitExceeded`` ("export > N GB" / "export > N s") or the export's own error."""
    import resource
    import signal

    with tempfile.TemporaryDirectory() as tmp:
        model_path, how_path, error_path = (os.path.join(tmp, n) for n in ("model.onnx", "how.txt", "error.txt"))
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:   # the child: export, write, leave without running the parent's exit handlers
            code = 1
            try:
                _limit_address_space(resource, memory_gb)
                model_bytes, how = (export or _export_in_process)(fn, args)
                with open(model_path, "wb") as f:
                    f.write(model_bytes)
                with open(how_path, "w") as f:
                    f.write(how)
                code = 0
            except BaseException as exc:  # noqa: BLE001
                with open(error_path, "w") as f:
                    f.write(("memory: " if _is_memory_error(exc) else "") + _short(exc, 400))
            finally:
                os._exit(code)
        deadline = time.monotonic() + time_s
        while True:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                break
            if time.monotonic() > deadline:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
                raise ExportLimitExceeded(f"export > {time_s:g} s")
            time.sleep(0.02)
        if os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0:
            with open(model_path, "rb") as f, open(how_path) as h:
                return f.read(), h.read()
        error = open(error_path).read() if os.path.exists(error_path) else ""
        if error.startswith("memory: "):
            raise ExportLimitExceeded(f"export > {memory_gb:g} GB ({error[8:120]})")
        if not error:   # died in native code (an uncaught std::bad_alloc aborts; so does a crash)
            raise ExportLimitExceeded(f"export died ({_exit_reason(status)}; limits {memory_gb:g} GB, {time_s:g} s)")
        raise RuntimeError(error)


def _limit_address_space(resource: Any, memory_gb: float) -> None:
    with open("/proc/self/status") as f:
        vm_kb = next((int(line.split()[1]) for line in f if line.startswith("VmSize:")), 0)
    limit = vm_kb * 1024 + int(memory_gb * 2**30)
    _soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    if hard != resource.RLIM_INFINITY:
        limit = min(limit, hard)
    resource.setrlimit(resource.RLIMIT_AS, (limit, hard))


def _is_memory_error(exc: BaseException) -> bool:
    text = f"{type(exc).__name__}: {exc}".lower()
    return isinstance(exc, MemoryError) or any(k in text for k in ("bad_alloc", "can't allocate memory",
                                                                   "cannot allocate memory", "out of memory"))


def _exit_reason(status: int) -> str:
    return f"killed by signal {os.WTERMSIG(status)}" if os.WIFSIGNALED(status) else f"exit {os.WEXITSTATUS(status)}"


def _export_in_process(fn: Any, args: tuple) -> tuple[bytes, str]:
    module = _as_module(fn).eval()
    names = [f"input_{i}" for i in range(len(args))]
    errors = []
    onnx_logger = logging.getLogger("torch.onnx")
    level = onnx_logger.level
    onnx_logger.setLevel(logging.ERROR)  # "torchvision is not installed" etc.
    try:
        # redirect_stdout: the dynamo exporter's progress chatter
        with _Quiet(), contextlib.redirect_stdout(io.StringIO()):
            try:
                buf = io.BytesIO()
                with _native_output_silenced():  # on failure the C++ side dumps the whole TorchScript graph
                    torch.onnx.export(module, args, buf, input_names=names, dynamo=False)
                return buf.getvalue(), "legacy exporter"
            except Exception as exc:  # noqa: BLE001
                errors.append(f"legacy: {_short(exc, 70)}")
                log(f"  legacy ONNX export failed ({_short(exc, 200)}); trying dynamo=True")
            try:
                program = torch.onnx.export(module, args, input_names=names, dynamo=True)
                how = "dynamo exporter (legacy failed: " + errors[0].split(": ", 1)[1][:60] + ")"
                return program.model_proto.SerializeToString(), how
            except Exception as exc:  # noqa: BLE001
                errors.append(f"dynamo: {_short(exc, 70)}")
    finally:
        onnx_logger.setLevel(level)
    raise RuntimeError("; ".join(errors))


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
