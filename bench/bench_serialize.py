"""Serialization benchmark: tracejit.save/load vs torch.jit.save/load on BERT-base.

Methodology
-----------
* Environment: ``torch.set_num_threads(2)``, everything under ``torch.no_grad()``,
  torch seeded so inputs/weights are reproducible.
* Model: a random-weight 12-layer BERT-base (``transformers.BertConfig()``
  defaults, no downloads; ``--quick``: 4 layers), eval mode, wrapped in a tiny
  ``nn.Module`` whose forward is
  ``self.bert(input_ids, attention_mask=mask, return_dict=False)[0]``;
  example input (1, 128).  It is traced once with ``torch.jit.trace`` and once
  with ``tracejit.trace`` (defaults, warnings silenced).
* Outputs are checked first: each traced program is saved to a file in a
  ``tempfile.TemporaryDirectory`` and loaded back; the loaded program's output
  is compared to eager with ``torch.testing.assert_close(out, ref, rtol=1e-5,
  atol=1e-5)`` on the example input (seq 128) and on a new input (seq 64).
  A peer whose save/load raises is reported as ``error: ...`` (with a
  traceback summary below the tables); one whose output differs is ``WRONG``.
  Neither is timed.
* Timing: one warm-up save and load per peer, then R rounds (default 5;
  ``--quick``: 2), each round running, in turn, ``torch.jit.save``,
  ``tracejit.save``, ``torch.jit.load``, ``tracejit.load`` and
  ``tracejit.load(check_integrity=False)`` (an extra column: the cost of the
  CRC), each timed once with
  ``time.perf_counter`` (rounds *interleaved*, so slow drift of the machine
  affects all peers alike).  Each peer writes its own file (the same path every
  round, overwriting).  Reported: the MEDIAN over the rounds, in seconds, and the
  ratio tracejit / torch.jit.  Loaded objects are dropped and ``gc.collect()``
  runs between operations, outside the timed region.
* Caveat: OS caches cannot be dropped here, so loads read files that are warm
  in the page cache (and saves write into it).  ``tracejit.save`` writes a temp
  file, fsyncs it and renames it (atomic and durable); ``torch.jit.save`` never
  fsyncs, so ``durable=False`` is shown as its own row.
* Sizes: the tracejit file, the torch.jit file, and the raw tensor bytes of the
  eager module (sum of ``t.numel() * t.element_size()`` over the unique tensors,
  by identity, of ``state_dict(keep_vars=True)``); plus the size of the
  tracejit file's safetensors header (the JSON that holds the program).

Targets (from the issue): load <= 0.5x torch.jit.load; save <= 1.0x
torch.jit.save; tracejit file size <= 1.02x raw tensor bytes (program included).

Usage::

    python bench/bench_serialize.py [--rounds R] [--quick]
    python bench/bench_serialize.py --fresh [--runs N] [--quick] [--before DIR] [--threads N]   # server start:
        # bench/fresh_load.py; --before: also the tracejit of an older checkout, interleaved

``--quick`` uses 2 rounds and a 4-layer BERT.
"""

from __future__ import annotations

import argparse
import gc
import os
import platform
import statistics
import struct
import sys
import tempfile
import time
import traceback
import warnings
from typing import Any, Callable

import torch
from torch import nn

# Make the in-repo package importable when run as `python bench/bench_serialize.py`.
_REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if _REPO_ROOT not in sys.path:
    sys.path.insert(0, _REPO_ROOT)

RTOL = ATOL = 1e-5
SEQ = 128
NEW_SEQ = 64
TARGET_LOAD = 0.5    # tracejit.load / torch.jit.load
TARGET_SAVE = 1.0    # tracejit.save / torch.jit.save
TARGET_SIZE = 1.02   # tracejit file / raw tensor bytes

from bench_core import TRACEJIT_IMPORT_ERROR, TRACEJIT_IMPORT_EXC, _short, cpu_model, tracejit  # noqa: E402,F401


# --------------------------------------------------------------------------- #
# helpers
# --------------------------------------------------------------------------- #


def _tb_summary(exc: BaseException, frames: int = 6) -> str:
    """The last few frames of the traceback and the exception line."""
    tb = traceback.extract_tb(exc.__traceback__)[-frames:]
    lines = [f"  {os.path.relpath(fr.filename, _REPO_ROOT) if fr.filename.startswith(_REPO_ROOT) else fr.filename}"
             f":{fr.lineno} in {fr.name}: {(fr.line or '').strip()}" for fr in tb]
    lines.append(f"  {type(exc).__name__}: {exc}")
    return "\n".join(lines)


def raw_tensor_bytes(module: nn.Module) -> int:
    """Bytes of the unique (by identity) tensors of module.state_dict(keep_vars=True)."""
    seen: set[int] = set()
    total = 0
    for t in module.state_dict(keep_vars=True).values():
        if id(t) in seen:
            continue
        seen.add(id(t))
        total += t.numel() * t.element_size()
    return total


def safetensors_header_bytes(path: str) -> int | None:
    """8-byte length prefix + JSON header of a safetensors file (where tracejit keeps the program)."""
    try:
        with open(path, "rb") as f:
            return 8 + struct.unpack("<Q", f.read(8))[0]
    except (OSError, struct.error):
        return None


# --------------------------------------------------------------------------- #
# model
# --------------------------------------------------------------------------- #
class BertWrapper(nn.Module):
    def __init__(self, bert: nn.Module):
        super().__init__()
        self.bert = bert

    def forward(self, input_ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        return self.bert(input_ids, attention_mask=mask, return_dict=False)[0]


def build_bert(layers: int | None) -> tuple[nn.Module, tuple, tuple, int]:
    import transformers

    transformers.logging.set_verbosity_error()  # silence config chatter
    config = transformers.BertConfig()
    if layers is not None:
        config.num_hidden_layers = layers
    bert = transformers.BertModel(config).eval()
    example = (torch.randint(0, config.vocab_size, (1, SEQ)), torch.ones(1, SEQ, dtype=torch.long))
    new_mask = torch.ones(1, NEW_SEQ, dtype=torch.long)
    new_mask[0, NEW_SEQ - 8:] = 0  # some padding, so the mask matters
    new = (torch.randint(0, config.vocab_size, (1, NEW_SEQ)), new_mask)
    return BertWrapper(bert).eval(), example, new, config.num_hidden_layers


def jit_trace(fn: Any, example: tuple) -> Any:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return torch.jit.trace(fn, example)


def tracejit_trace(fn: Any, example: tuple) -> Any:
    if tracejit is None:
        raise TRACEJIT_IMPORT_EXC  # type: ignore[misc]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return tracejit.trace(fn, example)


# --------------------------------------------------------------------------- #
# peers: name -> (save(obj, path), load(path))
# --------------------------------------------------------------------------- #
def _tj_save(obj: Any, path: str) -> None:
    tracejit.save(obj, path)


def _tj_load(path: str) -> Any:
    return tracejit.load(path)


def _tj_load_nocrc(path: str) -> Any:
    return tracejit.load(path, check_integrity=False)


# The operations timed each round, in this order.  (label, peer, kind, callable)
OPS: list[tuple[str, str, str, Callable]] = [
    ("torch.jit.save", "torch.jit", "save", lambda obj, path: torch.jit.save(obj, path)),
    ("tracejit.save", "tracejit", "save", lambda obj, path: _tj_save(obj, path)),
    ("tracejit.save(durable=False)", "tracejit", "save", lambda obj, path: tracejit.save(obj, path, durable=False)),
    ("torch.jit.load", "torch.jit", "load", lambda path: torch.jit.load(path)),
    ("tracejit.load", "tracejit", "load", _tj_load),
    ("tracejit.load(check_integrity=False)", "tracejit", "load", _tj_load_nocrc),
]


def check_loaded(loaded: Any, model: nn.Module, inputs: list[tuple]) -> str | None:
    """None if loaded(*x) matches eager for every x, else 'WRONG ...' / 'error: ...'."""
    for x in inputs:
        ref = model(*x)
        try:
            out = loaded(*x)
        except Exception as exc:  # noqa: BLE001
            return f"error: call on seq {x[0].shape[1]}: {_short(exc)}"
        try:
            torch.testing.assert_close(out, ref, rtol=RTOL, atol=ATOL)
        except Exception as exc:  # noqa: BLE001
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            return f"WRONG on seq {x[0].shape[1]} ({first})"
    return None


def run(ns: argparse.Namespace) -> int:
    rounds = ns.rounds if ns.rounds is not None else (2 if ns.quick else 5)
    model, example, new, layers = build_bert(4 if ns.quick else None)
    inputs = [example, new]
    raw = raw_tensor_bytes(model)

    print(f"model: BERT-base ({layers} layers, random weights), example input (1, {SEQ}), "
          f"check input (1, {NEW_SEQ}); raw tensor bytes {raw:,}")
    print(f"rounds: {rounds}, median seconds; outputs of loaded programs checked against eager "
          f"(rtol=atol={RTOL}) before timing")
    print("note: OS caches cannot be dropped here: files are warm in the page cache; "
          "tracejit.save fsyncs (durable=True, the default), torch.jit.save does not\n")

    # ------------------------------------------------------------ trace
    traced: dict[str, Any] = {}
    status: dict[str, str] = {}          # peer -> problem
    tracebacks: list[tuple[str, str]] = []
    for peer, tracer in (("torch.jit", jit_trace), ("tracejit", tracejit_trace)):
        t0 = time.perf_counter()
        try:
            traced[peer] = tracer(model, example)
        except Exception as exc:  # noqa: BLE001
            status[peer] = f"error (trace): {_short(exc)}"
            tracebacks.append((f"{peer} trace", _tb_summary(exc)))
            continue
        print(f"traced with {peer} in {time.perf_counter() - t0:.2f} s")

    with tempfile.TemporaryDirectory(prefix="bench_serialize_") as tmp:
        paths = {"torch.jit": os.path.join(tmp, "model.jit.pt"),
                 "tracejit": os.path.join(tmp, "model.tracejit.safetensors")}
        op_status: dict[str, str] = {}    # op label -> problem

        # ------------------------------------------- warm-up + output check
        for label, peer, kind, fn in OPS:
            if peer in status:
                op_status[label] = status[peer]
                continue
            try:
                if kind == "save":
                    fn(traced[peer], paths[peer])
                else:
                    loaded = fn(paths[peer])
                    problem = check_loaded(loaded, model, inputs)
                    del loaded
                    if problem:
                        op_status[label] = problem
            except Exception as exc:  # noqa: BLE001
                op_status[label] = f"error: {_short(exc)}"
                tracebacks.append((label, _tb_summary(exc)))
                if kind == "save":
                    status[peer] = f"error (save): {_short(exc)}"
            gc.collect()

        sizes = {peer: (os.path.getsize(p) if os.path.exists(p) else None) for peer, p in paths.items()}
        header = safetensors_header_bytes(paths["tracejit"]) if sizes["tracejit"] else None

        # ------------------------------------------------------------ timing
        samples: dict[str, list[float]] = {label: [] for label, *_ in OPS}
        for _ in range(rounds):
            for label, peer, kind, fn in OPS:
                if label in op_status:
                    continue
                if kind == "save":
                    t0 = time.perf_counter()
                    fn(traced[peer], paths[peer])
                    dt = time.perf_counter() - t0
                else:
                    t0 = time.perf_counter()
                    loaded = fn(paths[peer])
                    dt = time.perf_counter() - t0
                    del loaded
                samples[label].append(dt)
                gc.collect()

    res: dict[str, Any] = {
        label: op_status.get(label) or statistics.median(samples[label]) for label, *_ in OPS
    }

    # ------------------------------------------------------------ report
    print("\nSave / load time (seconds, median over interleaved rounds, lower is better)\n")
    nc_label = "tracejit.load(check_integrity=False)"
    print("| operation | torch.jit (s) | tracejit (s) | tracejit/torch.jit | target "
          "| tracejit, check_integrity=False (s) | that/torch.jit |")
    print("|---|---|---|---|---|---|---|")
    j, t = res["torch.jit.save"], res["tracejit.save"]
    print(f"| save | {_fmt(j, '.3f')} | {_fmt(t, '.3f')} | {_ratio(t, j)} | <= {TARGET_SAVE:.1f}x | - | - |")
    d = res.get("tracejit.save(durable=False)")
    print(f"| save, durable=False (no fsync) | {_fmt(j, '.3f')} | {_fmt(d, '.3f')} | {_ratio(d, j)} | - | - | - |")
    j, t, nc = res["torch.jit.load"], res["tracejit.load"], res[nc_label]
    print(f"| load | {_fmt(j, '.3f')} | {_fmt(t, '.3f')} | {_ratio(t, j)} | <= {TARGET_LOAD:.1f}x "
          f"| {_fmt(nc, '.3f')} | {_ratio(nc, j)} |")
    crc_cost = _sub(res["tracejit.load"], res[nc_label])
    if crc_cost is not None:
        print(f"\nCRC check cost (tracejit.load - tracejit.load(check_integrity=False)): {crc_cost:.3f} s")

    print("\nFile sizes (bytes)\n")
    print("| file | bytes | / raw tensor bytes | target |")
    print("|---|---|---|---|")
    print(f"| raw tensor bytes (unique params + buffers) | {raw:,} | 1.000x | |")
    for peer, target in (("torch.jit", ""), ("tracejit", f"<= {TARGET_SIZE:.2f}x")):
        s = sizes[peer]
        print(f"| {peer} file | {_fmt_int(s)} | {f'{s / raw:.4f}x' if s else '-'} | {target} |")
    if header is not None:
        print(f"| tracejit header (program JSON + tensor index) | {header:,} | {header / raw:.4f}x | |")

    if tracebacks:
        print("\nErrors (traceback summaries)\n")
        for label, tb in tracebacks:
            print(f"{label}:\n{tb}\n")
    return 0


# --------------------------------------------------------------------------- #
# reporting
# --------------------------------------------------------------------------- #
def _fmt(v: Any, spec: str) -> str:
    return format(v, spec) if isinstance(v, float) else str(v)


def _fmt_int(v: int | None) -> str:
    return f"{v:,}" if isinstance(v, int) else "n/a"


def _ratio(a: Any, b: Any) -> str:
    if isinstance(a, float) and isinstance(b, float) and b > 0:
        return f"{a / b:.2f}x"
    return "-"


def _sub(a: Any, b: Any) -> float | None:
    return a - b if isinstance(a, float) and isinstance(b, float) else None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--rounds", type=int, default=None, help="interleaved rounds (default 5, 2 with --quick)")
    parser.add_argument("--quick", action="store_true", help="2 rounds and a 4-layer BERT")
    parser.add_argument("--fresh", action="store_true",
                        help="server start instead: load and first call in fresh processes, tiny BERT and BERT-base "
                             "(bench/fresh_load.py)")
    parser.add_argument("--runs", type=int, default=None, help="with --fresh: processes per peer (default 7)")
    parser.add_argument("--before", default=None, metavar="DIR",
                        help="with --fresh: also measure the tracejit of another source tree (an older checkout)")
    parser.add_argument("--threads", type=int, default=None,
                        help="with --fresh: torch threads in the children (default $OMP_NUM_THREADS, else 2)")
    parser.add_argument("--no-bytecode-cache", action="store_true",
                        help="with --fresh: every import compiles its source (as PYTHONDONTWRITEBYTECODE=1 does)")
    ns = parser.parse_args(argv)
    if ns.fresh:
        from fresh_load import run as run_fresh
        run_fresh(ns.quick, ns.runs, ns.before, ns.threads, not ns.no_bytecode_cache)
        return 0

    torch.set_num_threads(2)
    torch.manual_seed(0)

    print(f"torch {torch.__version__}, python {platform.python_version()}")
    print(f"processor: {platform.processor() or 'n/a'}; CPU: {cpu_model()}; threads: {torch.get_num_threads()}")
    if TRACEJIT_IMPORT_ERROR:
        print(f"note: import tracejit failed: {TRACEJIT_IMPORT_ERROR}")
    with torch.no_grad():
        return run(ns)


if __name__ == "__main__":
    sys.exit(main())
