"""Core benchmark: eager vs torch.jit.trace vs tracejit.trace.

Methodology
-----------
* Environment: ``torch.set_num_threads(2)``, everything under ``torch.no_grad()``,
  torch seeded so inputs/weights are reproducible.
* Peers per workload: ``eager`` (the module/function itself), ``torch.jit.trace``
  (deprecation warning silenced) and ``tracejit.trace``.  If ``tracejit`` cannot be
  imported, or tracing/calling with it raises, that peer is reported as
  ``error: <message>`` and the rest of the benchmark still runs.
* Outputs are checked first: each peer's output is compared to eager with
  ``torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-5)``.  A peer whose
  output differs is reported as ``WRONG`` and is not timed.
* Per-call time (workloads a, b): after a warm-up of several calls per peer, the
  batch size N is calibrated once so that a batch of eager calls takes ~30 ms.
  Then for R rounds, each peer in turn runs a batch of N calls timed with
  ``time.perf_counter``; rounds are *interleaved* (peer A, B, C, A, B, C, ...)
  so that slow drift of the machine (frequency, noisy neighbours) affects all
  peers alike.  The reported number is the MEDIAN per-call time over the rounds,
  in microseconds, and ratios are given relative to eager.
* Tracing time (workload c): a random-weight 12-layer BERT-base
  (``transformers.BertConfig()`` defaults, no downloads) on a (1, 128) input is
  traced with ``torch.jit.trace`` (defaults, i.e. ``check_trace=True``) and with
  ``tracejit.trace`` (defaults), interleaved, 3 rounds each; medians in seconds.

Usage::

    python bench/bench_core.py [--rounds R] [--quick]

``--quick`` uses fewer rounds and skips the BERT tracing benchmark.
"""

from __future__ import annotations

import argparse
import gc
import os
import platform
import statistics
import sys
import time
import warnings
from typing import Any, Callable

import torch
from torch import nn

# Make the in-repo package importable when run as `python bench/bench_core.py`.
_REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if _REPO_ROOT not in sys.path:
    sys.path.insert(0, _REPO_ROOT)

TARGET_BATCH_S = 0.030  # eager batch duration aimed for by calibration
WARMUP_CALLS = 20
RTOL = ATOL = 1e-5

try:  # the package is under construction: tolerate its absence
    import tracejit  # type: ignore

    TRACEJIT_IMPORT_EXC: BaseException | None = None
except Exception as exc:  # noqa: BLE001
    tracejit = None  # type: ignore
    TRACEJIT_IMPORT_EXC = exc
TRACEJIT_IMPORT_ERROR = (
    None if TRACEJIT_IMPORT_EXC is None else f"{type(TRACEJIT_IMPORT_EXC).__name__}: {TRACEJIT_IMPORT_EXC}"
)


# --------------------------------------------------------------------------- #
# helpers
# --------------------------------------------------------------------------- #
def _short(exc: BaseException, limit: int = 80) -> str:
    msg = f"{type(exc).__name__}: {exc}".replace("\n", " ").replace("|", "/")
    return msg if len(msg) <= limit else msg[: limit - 3] + "..."


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.lower().startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown"


def jit_trace(fn: Any, example: tuple) -> Callable:
    """torch.jit.trace with its deprecation warning silenced."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return torch.jit.trace(fn, example)


def tracejit_trace(fn: Any, example: tuple) -> Callable:
    """tracejit.trace with its TracerWarnings silenced (they belong to the model, not the table)."""
    if tracejit is None:
        raise TRACEJIT_IMPORT_EXC  # type: ignore[misc]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", tracejit.TracerWarning)
        return tracejit.trace(fn, example)


def build_peers(fn: Any, example: tuple) -> tuple[dict[str, Callable], dict[str, str]]:
    """Return (callable peers, status for peers that failed to build)."""
    peers: dict[str, Callable] = {"eager": fn}
    status: dict[str, str] = {}
    for name, tracer in (("torch.jit.trace", jit_trace), ("tracejit", tracejit_trace)):
        try:
            peers[name] = tracer(fn, example)
        except Exception as exc:  # noqa: BLE001
            status[name] = f"error: {_short(exc)}"
    return peers, status


def check_outputs(peers: dict[str, Callable], args: tuple) -> dict[str, str]:
    """Compare each non-eager peer against eager; return {name: problem}."""
    ref = peers["eager"](*args)
    problems: dict[str, str] = {}
    for name, fn in peers.items():
        if name == "eager":
            continue
        try:
            out = fn(*args)
        except Exception as exc:  # noqa: BLE001
            problems[name] = f"error: {_short(exc)}"
            continue
        try:
            torch.testing.assert_close(out, ref, rtol=RTOL, atol=ATOL)
        except Exception:  # noqa: BLE001
            problems[name] = "WRONG"
    return problems


def _run_batch(fn: Callable, args: tuple, n: int) -> float:
    t0 = time.perf_counter()
    for _ in range(n):
        fn(*args)
    return time.perf_counter() - t0


def calibrate(fn: Callable, args: tuple, target_s: float = TARGET_BATCH_S) -> int:
    """Smallest power-of-two-ish N such that N calls of fn take about target_s."""
    n = 1
    while True:
        dt = _run_batch(fn, args, n)
        if dt >= target_s / 2 or n >= 1 << 22:
            break
        n *= 2
    return max(1, int(round(n * target_s / max(dt, 1e-9))))


def time_interleaved(
    peers: dict[str, Callable], args: tuple, rounds: int, n: int | None = None
) -> dict[str, float]:
    """Median per-call time (seconds) per peer over interleaved rounds.

    N (calls per batch) is calibrated once on the first peer (eager) unless given.
    """
    for fn in peers.values():  # warm-up
        for _ in range(WARMUP_CALLS):
            fn(*args)
    if n is None:
        n = calibrate(next(iter(peers.values())), args)
    samples: dict[str, list[float]] = {name: [] for name in peers}
    for _ in range(rounds):
        for name, fn in peers.items():
            samples[name].append(_run_batch(fn, args, n) / n)
    return {name: statistics.median(v) for name, v in samples.items()}


# --------------------------------------------------------------------------- #
# workloads
# --------------------------------------------------------------------------- #
def build_mlp() -> tuple[nn.Module, tuple]:
    model = nn.Sequential(
        nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 64)
    ).eval()
    return model, (torch.randn(1, 64),)


def elementwise_chain(x: torch.Tensor) -> torch.Tensor:
    """60 cheap elementwise ops: 5 repetitions of a 12-op pattern.

    Values stay bounded (sin/tanh/sigmoid/cos squash, so exp only ever sees
    inputs in (-0.5, 0.5)) and the output still depends on the input (the chain
    is not a contraction to a constant), so the output check is meaningful.
    """
    for _ in range(5):
        x = x * 1.5             # 1
        x = torch.sin(x)        # 2
        x = x + 0.1             # 3
        x = torch.tanh(x)       # 4
        x = x * 4.0             # 5
        x = torch.sigmoid(x)    # 6
        x = x - 0.5             # 7
        x = torch.exp(x)        # 8
        x = torch.cos(x)        # 9
        x = torch.neg(x)        # 10
        x = torch.abs(x)        # 11
        x = torch.relu(x)       # 12
    return x


ELEMENTWISE_OPS = 60


def build_elementwise() -> tuple[Callable, tuple]:
    return elementwise_chain, (torch.randn(16),)


class BertWrapper(nn.Module):
    def __init__(self, bert: nn.Module):
        super().__init__()
        self.bert = bert

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        return self.bert(input_ids, attention_mask=attention_mask, return_dict=False)[0]


def build_bert() -> tuple[nn.Module, tuple]:
    import transformers

    transformers.logging.set_verbosity_error()  # silence config chatter
    config = transformers.BertConfig()
    config.return_dict = False
    bert = transformers.BertModel(config).eval()
    input_ids = torch.randint(0, config.vocab_size, (1, 128))
    attention_mask = torch.ones(1, 128, dtype=torch.long)
    return BertWrapper(bert).eval(), (input_ids, attention_mask)


# --------------------------------------------------------------------------- #
# benchmarks
# --------------------------------------------------------------------------- #
def bench_per_call(name: str, fn: Any, args: tuple, rounds: int) -> dict[str, Any]:
    peers, status = build_peers(fn, args)
    status.update(check_outputs(peers, args))
    timed = {k: v for k, v in peers.items() if k not in status}
    times = time_interleaved(timed, args, rounds)
    row: dict[str, Any] = {"workload": name}
    for peer in ("eager", "torch.jit.trace", "tracejit"):
        row[peer] = times[peer] * 1e6 if peer in times else status.get(peer, "n/a")
    return row


def bench_tracing_time(rounds: int = 3, model=None, args=None, label: str = "BERT-base (12L, seq 128)",
                       tracers: dict | None = None) -> dict[str, Any]:
    """Median tracing time of each tracer on ``model(*args)`` (default: BERT-base), interleaved."""
    if model is None:
        model, args = build_bert()
    tracers = tracers or {"torch.jit.trace": jit_trace, "tracejit": tracejit_trace}
    samples: dict[str, list[float]] = {k: [] for k in tracers}
    errors: dict[str, str] = {}
    for _ in range(rounds):
        for name, tracer in tracers.items():
            if name in errors:
                continue
            t0 = time.perf_counter()
            try:
                traced = tracer(model, args)
            except Exception as exc:  # noqa: BLE001
                errors[name] = f"error: {_short(exc)}"
                continue
            samples[name].append(time.perf_counter() - t0)
            del traced
            gc.collect()
    result: dict[str, Any] = {"model": label}
    for name in tracers:
        result[name] = errors.get(name) or statistics.median(samples[name])
    return result


# --------------------------------------------------------------------------- #
# reporting
# --------------------------------------------------------------------------- #
def _fmt(v: Any, spec: str) -> str:
    return format(v, spec) if isinstance(v, float) else str(v)


def _ratio(a: Any, b: Any) -> str:
    if isinstance(a, float) and isinstance(b, float) and b > 0:
        return f"{a / b:.2f}x"
    return "-"


def print_per_call_table(rows: list[dict[str, Any]]) -> None:
    print("| workload | eager (us) | torch.jit.trace (us) | tracejit (us) | jit/eager | tracejit/eager |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        e, j, t = r["eager"], r["torch.jit.trace"], r["tracejit"]
        print(
            f"| {r['workload']} | {_fmt(e, '.2f')} | {_fmt(j, '.2f')} | {_fmt(t, '.2f')} "
            f"| {_ratio(j, e)} | {_ratio(t, e)} |"
        )


def print_tracing_table(r: dict[str, Any]) -> None:
    j, t = r["torch.jit.trace"], r["tracejit"]
    print("| model | torch.jit.trace (s) | tracejit (s) | ratio tracejit/jit |")
    print("|---|---|---|---|")
    print(f"| {r['model']} | {_fmt(j, '.3f')} | {_fmt(t, '.3f')} | {_ratio(t, j)} |")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--rounds", type=int, default=None, help="interleaved rounds (default 15, 5 with --quick)")
    parser.add_argument("--quick", action="store_true", help="fewer rounds, skip BERT tracing benchmark")
    ns = parser.parse_args(argv)
    rounds = ns.rounds if ns.rounds is not None else (5 if ns.quick else 15)

    torch.set_num_threads(2)
    torch.manual_seed(0)

    print(f"torch {torch.__version__}, python {platform.python_version()}")
    print(f"processor: {platform.processor() or 'n/a'}; CPU: {cpu_model()}; threads: {torch.get_num_threads()}")
    if TRACEJIT_IMPORT_ERROR:
        print(f"note: import tracejit failed: {TRACEJIT_IMPORT_ERROR}")
    print(f"rounds: {rounds}, median per-call time, outputs checked (rtol=atol={RTOL}) before timing\n")

    with torch.no_grad():
        rows = []
        mlp, mlp_args = build_mlp()
        rows.append(bench_per_call("MLP 3x Linear(64) batch 1", mlp, mlp_args, rounds))
        fn, fn_args = build_elementwise()
        rows.append(bench_per_call(f"elementwise chain ({ELEMENTWISE_OPS} ops, n=16)", fn, fn_args, rounds))
        print("Per-call time (microseconds, lower is better)\n")
        print_per_call_table(rows)

        if not ns.quick:
            print("\nTracing time (seconds, median of 3 interleaved rounds)\n")
            print_tracing_table(bench_tracing_time(rounds=3))
    return 0


if __name__ == "__main__":
    sys.exit(main())
