"""Peer benchmark: tracejit.trace against the other ways to run a PyTorch model on CPU.

Methodology
-----------
* Environment: ``torch.set_num_threads(2)``, everything under ``torch.no_grad()``,
  torch seeded so inputs/weights are reproducible.  Random weights, no downloads.
* Peers per workload, all built once and timed in the same process:

  - ``eager``: the module/function itself;
  - ``torch.jit.trace`` (deprecation warning silenced);
  - ``jit.trace+freeze+OFI``: ``torch.jit.trace`` then ``torch.jit.freeze`` then
    ``torch.jit.optimize_for_inference`` (a plain function is wrapped in a module
    first, since freezing needs a module);
  - ``torch.compile`` (default backend, i.e. inductor), compiled and warmed up
    before timing; the compile time is reported separately;
  - ``ONNX Runtime``: ``torch.onnx.export`` of the model, with the legacy
    TorchScript-based exporter (``dynamo=False``) first and the default
    (dynamo/onnxscript) exporter if that fails; run by ``onnxruntime``'s CPU
    execution provider with ``intra_op_num_threads=2``; the timed call is
    ``session.run(None, feed)`` with the numpy feed prepared once.  Thread
    spinning is turned off (``session.intra_op.allow_spinning=0``): ORT's idle
    workers would otherwise busy-wait after each run and, on 2 cores, slow the
    peer timed right after it;
  - ``tracejit``: ``tracejit.trace`` (defaults).

  A peer that cannot be built or called is reported as ``error: <message>``
  and the rest of the benchmark still runs.
* Outputs are checked first: each peer's output is compared to eager's with
  ``torch.testing.assert_close`` -- ``rtol=atol=1e-3`` for ``torch.compile`` and
  ONNX Runtime (they reorder/fuse floating-point arithmetic), ``rtol=atol=1e-5``
  for the others.  A peer whose output differs is reported as ``WRONG`` (with the
  largest absolute error) and is not timed.
* Per-call time: after a warm-up (20 calls per peer, 3 for the large models), the
  number N of calls per batch is calibrated once on eager so that a batch takes
  about 0.1 s (0.5 s for ResNet-50 and BERT-base).  Then for R rounds each peer
  in turn runs a batch of N calls timed with ``time.perf_counter``; rounds are
  *interleaved* (A, B, C, A, B, C, ...) so slow drift of the machine affects all
  peers alike.  Reported: the MEDIAN per-call time over the rounds, in
  microseconds, and its ratio to eager (lower is better).
* Tracing time (ResNet-50, BERT-base): ``torch.jit.trace`` and
  ``tracejit.trace``, both with their defaults (``check_trace=True``),
  interleaved, 3 rounds each; medians in seconds.

Workloads: ``mlp`` (3x Linear(64), batch 1), ``elementwise`` (60 chained
elementwise ops on 16 elements, the function from ``bench_core.py``),
``transformer`` (``nn.TransformerEncoder``, d_model 256, 4 heads, 4 layers,
ff 1024, batch_first, seq 64, batch 1), ``resnet50`` (``transformers``
``ResNetModel(ResNetConfig())``, 224x224, batch 1, pooler output) and ``bert``
(``transformers`` ``BertConfig()`` defaults, seq 128, batch 1, with attention
mask, first output).

Usage::

    python bench/bench_peers.py [--rounds R] [--quick] [--only WORKLOAD]

``--quick``: 2 rounds, skips ResNet-50 and BERT-base (and so the tracing-time
table).  ``--only`` (repeatable, or comma separated) runs only the named
workloads.  The table is printed and written, with the machine description, to
``bench/RESULTS.md`` (overwritten).
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import gc
import io
import logging
import os
import platform
import statistics
import sys
import time
import warnings
from typing import Any, Callable

import torch
from torch import nn

_BENCH_DIR = os.path.dirname(os.path.abspath(__file__))
_REPO_ROOT = os.path.dirname(_BENCH_DIR)
for _p in (_BENCH_DIR, _REPO_ROOT):  # bench_core, and the in-repo package
    if _p not in sys.path:
        sys.path.insert(0, _p)

import bench_core  # noqa: E402
from bench_core import (  # noqa: E402  (shared workloads and helpers)
    ELEMENTWISE_OPS,
    build_bert,
    build_mlp,
    cpu_model,
    elementwise_chain,
)

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

RESULTS_PATH = os.path.join(_BENCH_DIR, "RESULTS.md")
NUM_THREADS = 2
TIGHT_TOL = 1e-5  # traced TorchScript/tracejit programs run the same kernels as eager
LOOSE_TOL = 1e-3  # torch.compile / ONNX Runtime reorder and fuse arithmetic
TRACING_ROUNDS = 3

PEERS = ("eager", "torch.jit.trace", "jit.trace+freeze+OFI", "torch.compile", "ONNX Runtime", "tracejit")
LOOSE_PEERS = {"torch.compile", "ONNX Runtime"}


# --------------------------------------------------------------------------- #
# helpers
# --------------------------------------------------------------------------- #
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
    """ORT returns a list of numpy arrays; every workload has a single output."""
    if isinstance(out, list) and len(out) == 1:
        out = out[0]
    if type(out).__module__ == "numpy":
        return torch.from_numpy(out)
    return out


def _max_err(out: Any, ref: Any) -> str:
    try:
        return f"{(out.double() - ref.double()).abs().max().item():.1e}"
    except Exception:  # noqa: BLE001
        return "?"


# --------------------------------------------------------------------------- #
# peer builders: each returns (callable, args) so the timed loop is fn(*args)
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


def _onnx_bytes(fn: Any, args: tuple) -> tuple[bytes, str]:
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


def make_ort(fn: Any, args: tuple) -> tuple[Callable, tuple]:
    if ort is None:
        raise ORT_IMPORT_EXC  # type: ignore[misc]
    model_bytes, how = _onnx_bytes(fn, args)
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = NUM_THREADS
    opts.inter_op_num_threads = 1
    opts.log_severity_level = 3
    # ORT's idle worker threads otherwise busy-wait after each run; on a 2-core
    # machine that steals a core from whichever peer is timed next (measured:
    # the peer after ORT ran 2-4x slower on the TransformerEncoder), while
    # ORT's own per-call time was not measurably better with spinning on.
    opts.add_session_config_entry("session.intra_op.allow_spinning", "0")
    session = ort.InferenceSession(model_bytes, opts, providers=["CPUExecutionProvider"])
    arrays = {f"input_{i}": a.numpy() for i, a in enumerate(args)}
    feed = {i.name: arrays[i.name] for i in session.get_inputs()}
    make_ort.last_how = how  # type: ignore[attr-defined]
    return session.run, (None, feed)


def make_tracejit(fn: Any, args: tuple) -> tuple[Callable, tuple]:
    if tracejit is None:
        raise TRACEJIT_IMPORT_EXC  # type: ignore[misc]
    with _Quiet():
        return tracejit.trace(fn, args), args


BUILDERS: dict[str, Callable[[Any, tuple], tuple[Callable, tuple]]] = {
    "torch.jit.trace": make_jit_trace,
    "jit.trace+freeze+OFI": make_jit_frozen,
    "torch.compile": make_compile,
    "ONNX Runtime": make_ort,
    "tracejit": make_tracejit,
}


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
    peers: dict[str, tuple[Callable, tuple]], rounds: int, warmup: int, target_s: float
) -> tuple[dict[str, float], int]:
    """Median per-call seconds per peer over interleaved rounds, and the N used."""
    for fn, args in peers.values():
        for _ in range(warmup):
            fn(*args)
    n = calibrate(*peers["eager"], target_s=target_s)
    samples: dict[str, list[float]] = {name: [] for name in peers}
    for _ in range(rounds):
        for name, (fn, args) in peers.items():
            samples[name].append(_run_batch(fn, args, n) / n)
    return {name: statistics.median(v) for name, v in samples.items()}, n


# --------------------------------------------------------------------------- #
# benchmarks
# --------------------------------------------------------------------------- #
def bench_workload(key: str, rounds: int) -> dict[str, Any]:
    label, builder, large = WORKLOADS[key]
    log(f"{key}: building model")
    torch.manual_seed(0)
    fn, args = builder()
    row: dict[str, Any] = {"workload": label, "build_s": {}, "notes": []}
    status: dict[str, str] = {}
    peers: dict[str, tuple[Callable, tuple]] = {"eager": (fn, args)}
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
        if name == "ONNX Runtime":
            row["notes"].append(f"ONNX via {make_ort.last_how}")  # type: ignore[attr-defined]

    log(f"{key}: checking outputs")
    with _Quiet():
        ref = fn(*args)
    for name, (pfn, pargs) in list(peers.items()):
        if name == "eager":
            continue
        tol = LOOSE_TOL if name in LOOSE_PEERS else TIGHT_TOL
        try:
            with _Quiet():
                out = _to_tensor(pfn(*pargs))
        except Exception as exc:  # noqa: BLE001
            status[name] = f"error: {_short(exc)}"
            del peers[name]
            continue
        try:
            torch.testing.assert_close(out, ref, rtol=tol, atol=tol)
        except Exception:  # noqa: BLE001
            status[name] = f"WRONG (max abs err {_max_err(out, ref)})"
            del peers[name]

    log(f"{key}: timing {', '.join(peers)}")
    load_before = _loadavg()
    times, n = time_interleaved(
        peers, rounds, warmup=3 if large else 20, target_s=0.5 if large else 0.1
    )
    row["calls_per_round"] = n
    row["notes"].insert(0, f"load avg {load_before} -> {_loadavg()} while timing")
    for peer in PEERS:
        row[peer] = times[peer] * 1e6 if peer in times else status.get(peer, "n/a")
    log(f"{key}: done ({', '.join(f'{k}={v:.1f}us' for k, v in ((k, times[k] * 1e6) for k in times))})")
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
# reporting
# --------------------------------------------------------------------------- #
def _cell(v: Any, eager: Any) -> str:
    if isinstance(v, float):
        if isinstance(eager, float) and eager > 0:
            return f"{v:.1f} ({v / eager:.2f}x)"
        return f"{v:.1f}"
    return str(v)


def _ratio(a: Any, b: Any) -> str:
    if isinstance(a, float) and isinstance(b, float) and b > 0:
        return f"{a / b:.2f}x"
    return "-"


def per_call_table(rows: list[dict[str, Any]]) -> list[str]:
    cols = [p for p in PEERS if p != "eager"]
    lines = [
        "| workload | eager (us) | " + " | ".join(f"{c} us (ratio)" for c in cols)
        + " | tracejit/eager | fastest other peer |",
        "|---" * (len(cols) + 4) + "|",
    ]
    for r in rows:
        e = r["eager"]
        others = [(r[p], p) for p in cols if p != "tracejit" and isinstance(r[p], float)]
        best = min(others) if others else None
        best_s = f"{best[1]} {_ratio(best[0], e)}" if best else "-"
        lines.append(
            f"| {r['workload']} | {_cell(e, None)} | "
            + " | ".join(_cell(r[c], e) for c in cols)
            + f" | **{_ratio(r['tracejit'], e)}** | {best_s} |"
        )
    return lines


def build_time_table(rows: list[dict[str, Any]]) -> list[str]:
    cols = list(BUILDERS)
    lines = [
        "| workload | calls/round | " + " | ".join(f"{c} (s)" for c in cols) + " | notes |",
        "|---" * (len(cols) + 3) + "|",
    ]
    for r in rows:
        lines.append(
            f"| {r['workload']} | {r['calls_per_round']} | "
            + " | ".join(f"{r['build_s'][c]:.2f}" if c in r["build_s"] else "-" for c in cols)
            + f" | {'; '.join(r['notes'])} |"
        )
    return lines


def tracing_table(results: list[dict[str, Any]]) -> list[str]:
    lines = [
        "| model | torch.jit.trace (s) | tracejit (s) | tracejit/jit |",
        "|---|---|---|---|",
    ]
    for r in results:
        j, t = r["torch.jit.trace"], r["tracejit"]
        fj = f"{j:.2f}" if isinstance(j, float) else j
        ft = f"{t:.2f}" if isinstance(t, float) else t
        lines.append(f"| {r['model']} | {fj} | {ft} | {_ratio(t, j)} |")
    return lines


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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--rounds", type=int, default=None, help="interleaved rounds (default 7, 2 with --quick)")
    parser.add_argument("--quick", action="store_true", help="2 rounds, skip ResNet-50 and BERT-base")
    parser.add_argument(
        "--only", action="append", default=None, metavar="WORKLOAD",
        help=f"run only this workload (repeatable or comma separated): {', '.join(WORKLOADS)}",
    )
    ns = parser.parse_args(argv)
    rounds = ns.rounds if ns.rounds is not None else (2 if ns.quick else 7)
    keys = list(WORKLOADS)
    if ns.only:
        wanted = [k.strip() for item in ns.only for k in item.split(",") if k.strip()]
        unknown = [k for k in wanted if k not in WORKLOADS]
        if unknown:
            parser.error(f"unknown workload(s) {unknown}; choose from {list(WORKLOADS)}")
        keys = [k for k in keys if k in wanted]
    if ns.quick:
        keys = [k for k in keys if not WORKLOADS[k][2]]
    if not keys:
        parser.error("nothing to run (--quick skips resnet50 and bert)")

    torch.set_num_threads(NUM_THREADS)
    torch.manual_seed(0)
    t_start = time.perf_counter()

    header = [
        f"- date: {datetime.datetime.now().astimezone().strftime('%Y-%m-%d %H:%M %Z')}",
        f"- CPU: {cpu_model()}; {os.cpu_count()} logical cores; torch threads: {torch.get_num_threads()}",
        f"- python {platform.python_version()}, torch {torch.__version__}, onnxruntime {_version('onnxruntime')}, "
        f"onnx {_version('onnx')}, onnxscript {_version('onnxscript')}, transformers {_version('transformers')}",
        f"- command: `python bench/bench_peers.py {' '.join(sys.argv[1:] if argv is None else argv)}".rstrip() + "`"
        f" ({rounds} interleaved rounds, medians)",
    ]
    header.append(
        f"- ONNX Runtime: CPUExecutionProvider, intra_op_num_threads={NUM_THREADS}, "
        "session.intra_op.allow_spinning=0"
    )
    load_start = _loadavg()
    if TRACEJIT_IMPORT_EXC is not None:
        header.append(f"- note: import tracejit failed: {_short(TRACEJIT_IMPORT_EXC, 200)}")
    if ORT_IMPORT_EXC is not None:
        header.append(f"- note: import onnxruntime failed: {_short(ORT_IMPORT_EXC, 200)}")

    rows: list[dict[str, Any]] = []
    tracing: list[dict[str, Any]] = []
    with torch.no_grad():
        for key in keys:
            rows.append(bench_workload(key, rounds))
        for key in keys:
            if key in TRACING_WORKLOADS:
                tracing.append(bench_tracing_time(key))
    elapsed = time.perf_counter() - t_start

    out: list[str] = ["# tracejit peer benchmark", ""] + header + [
        f"- total run time: {elapsed:.0f} s; load average (1 min) at start {load_start}, at end {_loadavg()} "
        "(other processes on the machine distort the timings when it exceeds the core count)",
        "",
    ]
    out += [
        "## Per-call time",
        "",
        "Microseconds per call, median over interleaved rounds, and ratio to eager (lower is better). "
        "Outputs are checked against eager first (rtol=atol=1e-3 for torch.compile and ONNX Runtime, "
        "1e-5 for the others); WRONG means the check failed and the peer was not timed.",
        "",
    ]
    out += per_call_table(rows)
    out += ["", "## Build time", "", "Seconds to build each peer once (torch.compile: compile + 3 warm-up calls; "
            "ONNX Runtime: export + session creation).", ""]
    out += build_time_table(rows)
    if tracing:
        out += ["", "## Tracing time", "",
                f"Seconds to trace, defaults (check_trace=True), median of {TRACING_ROUNDS} interleaved rounds.", ""]
        out += tracing_table(tracing)
    text = "\n".join(out) + "\n"
    print(text)
    with open(RESULTS_PATH, "w") as f:
        f.write(text)
    log(f"wrote {RESULTS_PATH}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
