"""GPU benchmark (issue 23): ResNet-50 and BERT-base on CUDA, tracejit beside eager and its peers.

    python bench/bench_gpu.py                       # the issue's six rows, every column
    python bench/bench_gpu.py --rounds 3 --calls 20 --json results.json
    python bench/bench_gpu.py --rows resnet50/1/fp32 bert/32/bf16 --columns eager tracejit_cuda_graphs
    python bench/bench_gpu.py --device cpu --dry-run    # the table's plumbing on tiny models, any machine

Rows: ResNet-50 and BERT-base (sequence length 128) at batch 1 and 32 in float32 (TF32 off) and at
batch 32 in bfloat16 (bench/gpu_engines.py). Columns: eager, eager replayed from one CUDA graph,
torch.jit.trace, torch.jit freeze + optimize_for_inference, torch.compile (default; reduce-overhead
at batch 1), onnxruntime's CUDA EP (when installed), and tracejit: trace, optimize_for_inference,
optimize_for_inference(backend="cuda_graphs"), and the same with dtype=torch.bfloat16 (fp32 rows:
its error against fp32 eager is in the differences table).

Timing: every column is built and warmed up first; then ``--rounds`` rounds, each timing ``--calls``
calls of every column in turn (interleaved, so clock and thermal drift spread evenly), each call
between two CUDA events (on the CPU: perf_counter). A cell is the median per-call time in ms and its
ratio to eager; a second table gives each column's largest absolute difference to eager's output.
A column that cannot take the row says why instead of a time. Each row's line is printed, and the
JSON rewritten, as soon as the row is done, so a run cut short keeps the rows it finished.

Without CUDA (and without ``--device cpu``) it prints why and exits with status 2.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from typing import Any, Callable

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gpu_engines import NotApplicable, build_engine, build_row, engine_note  # noqa: E402

ROWS = ("resnet50/1/fp32", "resnet50/32/fp32", "resnet50/32/bf16", "bert/1/fp32", "bert/32/fp32", "bert/32/bf16")
COLUMNS = ("eager", "eager_cuda_graph", "jit_trace", "jit_freeze_ofi", "compile", "compile_reduce_overhead",
           "ort_cuda", "tracejit_trace", "tracejit_ofi", "tracejit_cuda_graphs", "tracejit_cuda_graphs_bf16")
DRY_RUN_ROWS = ("resnet50/1/fp32", "resnet50/4/bf16", "bert/1/fp32", "bert/4/fp32")


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def time_calls(engine: Callable, args: tuple, calls: int, device: torch.device) -> list[float]:
    """Per-call times in ms: between two CUDA events on the current stream, or perf_counter on the CPU."""
    times = []
    for _ in range(calls):
        if device.type == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            engine(*args)
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end))
        else:
            t0 = time.perf_counter()
            engine(*args)
            times.append((time.perf_counter() - t0) * 1e3)
    return times


def interleaved_ms(engines: dict, rounds: int, calls: int, device: torch.device, warmup: int = 5) -> dict:
    """{name: median ms per call} for ``engines`` (name -> (callable, args)): each warmed up with ``warmup`` calls,
    then ``rounds`` rounds of ``calls`` timed calls of each in turn (interleaved: drift affects them alike)."""
    for fn, args in engines.values():
        for _ in range(warmup):
            fn(*args)
    samples: dict = {k: [] for k in engines}
    for _ in range(rounds):
        for k, (fn, args) in engines.items():
            samples[k] += time_calls(fn, args, calls, device)
    return {k: statistics.median(v) for k, v in samples.items()}


def run_parts(description: str, script: str, parts: dict, argv: list[str] | None = None) -> int:
    """The ``main`` of a GPU experiment script made of parts (name -> function): ``--part NAME`` or all, on CUDA
    only, fp32 without TF32."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--part", choices=(*parts, "all"), default="all")
    opts = parser.parse_args(argv)
    if not torch.cuda.is_available():
        print(f"{script} needs a CUDA device", file=sys.stderr)
        return 2
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}, fp32 without TF32")
    for name, part in parts.items():
        if opts.part in (name, "all"):
            part()
    return 0


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def _max_diff(out: Any, reference: torch.Tensor) -> float:
    if isinstance(out, dict):
        out = out["last_hidden_state"]
    return (out.float() - reference).abs().max().item()


def run_row(row: str, columns: tuple, opts, device: torch.device) -> dict:
    model, args, origin = build_row(row, device, tiny=opts.dry_run)
    log(f"{row}: model {origin}")
    engines: dict[str, Callable] = {}
    result: dict[str, Any] = {"row": row, "model": origin, "cells": {}}
    traced_cache: dict = {}
    with torch.no_grad():
        reference = model(*args).float()
        for column in columns:
            t0 = time.perf_counter()
            try:
                if column == "compile" and opts.dry_run and device.type == "cpu":
                    raise NotApplicable("dry run on the CPU: not compiled (minutes of C++ builds, nothing measured)")
                engine = build_engine(column, model, args, row, traced_cache)
                for _ in range(opts.warmup):
                    out = engine(*args)
                _sync(device)
                diff = _max_diff(out, reference)
                engines[column] = engine
                result["cells"][column] = {"max_abs_diff": diff, "build_s": time.perf_counter() - t0}
                log(f"{row}: {column} built in {time.perf_counter() - t0:.1f}s (largest difference to eager {diff:.2e})")
            except NotApplicable as why:
                result["cells"][column] = {"skipped": str(why)}
            except Exception as exc:  # noqa: BLE001  (the cell says why)
                result["cells"][column] = {"error": f"{type(exc).__name__}: {str(exc).splitlines()[0][:120]}"}
                log(f"{row}: {column} failed: {result['cells'][column]['error']}")
        samples: dict[str, list[float]] = {c: [] for c in engines}
        for r in range(opts.rounds):
            for column, engine in engines.items():
                samples[column] += time_calls(engine, args, opts.calls, device)
            log(f"{row}: round {r + 1}/{opts.rounds}")
    eager_ms = statistics.median(samples["eager"]) if samples.get("eager") else None
    for column, times in samples.items():
        ms = statistics.median(times)
        result["cells"][column].update(ms=ms, ratio=(ms / eager_ms) if eager_ms else None, calls=len(times),
                                       **engine_note(engines[column]))
    return result


def _cell(cell: dict, column: str) -> str:
    if "ms" in cell:
        ratio = f" ({cell['ratio']:.2f}x)" if cell.get("ratio") is not None and column != "eager" else ""
        return f"{cell['ms']:.2f}{ratio}"
    return (cell.get("error") or ("- " + cell.get("skipped", "")).strip()).replace("|", "/")


def table_head(columns: tuple) -> str:
    return "| row | " + " | ".join(columns) + " |\n" + "|---" * (len(columns) + 1) + "|"


def table_line(result: dict, columns: tuple) -> str:
    return f"| {result['row']} | " + " | ".join(_cell(result["cells"].get(c, {}), c) for c in columns) + " |"


def diff_table(results: list[dict], columns: tuple) -> str:
    lines = [table_head(columns)]
    for res in results:
        cells = [f"{res['cells'][c]['max_abs_diff']:.1e}" if "max_abs_diff" in res["cells"].get(c, {}) else "-"
                 for c in columns]
        lines.append(f"| {res['row']} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", nargs="+", help=f"from {', '.join(ROWS)} (any model/batch/precision)")
    parser.add_argument("--columns", nargs="+", default=list(COLUMNS), help=f"from {', '.join(COLUMNS)}")
    parser.add_argument("--device", default="cuda", help="cuda (default) or cpu")
    parser.add_argument("--dry-run", action="store_true",
                        help="tiny models, 1 round of 2 calls: the table's plumbing, not a measurement")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--calls", type=int, default=10, help="timed calls of each column per round")
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--json", help="also write the results here (rewritten after each row)")
    opts = parser.parse_args(argv)
    unknown = [c for c in opts.columns if c not in COLUMNS]
    if unknown:
        parser.error(f"unknown columns {unknown}; columns are {', '.join(COLUMNS)}")
    device = torch.device(opts.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        print(f"bench_gpu.py needs a CUDA device: torch.cuda.is_available() is False (torch {torch.__version__}, "
              f"CUDA build {torch.version.cuda or 'none'}). Run it on a GPU machine (scripts/gpu_check.sh), "
              "or --device cpu --dry-run for the plumbing.", file=sys.stderr)
        return 2
    if opts.dry_run:
        opts.rounds, opts.calls, opts.warmup = 1, 2, 1
    rows = opts.rows or list(DRY_RUN_ROWS if opts.dry_run else ROWS)
    columns = tuple(dict.fromkeys(["eager", *opts.columns]))   # the ratios are to eager
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "CPU"
    header = (f"{name}, torch {torch.__version__} (CUDA {torch.version.cuda}), fp32 without TF32; median ms per "
              f"call of {opts.rounds} rounds x {opts.calls} calls ({'CUDA events' if device.type == 'cuda' else 'perf_counter'}), "
              f"ratio to eager{'; DRY RUN on tiny models: not a measurement' if opts.dry_run else ''}")
    log(header)
    print(header + "\n\n" + table_head(columns), flush=True)
    results = []
    for row in rows:
        try:
            results.append(run_row(row, columns, opts, device))
        except Exception as exc:  # noqa: BLE001  (a row that cannot be built: the others still run)
            results.append({"row": row, "model": f"failed: {type(exc).__name__}: {str(exc)[:160]}", "cells": {}})
            log(f"{row}: {results[-1]['model']}")
        print(table_line(results[-1], columns), flush=True)
        if opts.json:
            with open(opts.json, "w") as f:
                json.dump({"header": header, "columns": columns, "results": results}, f, indent=1)
    print("\nLargest absolute difference to eager's output (bf16 columns: to fp32 eager)\n")
    print(diff_table(results, columns))
    return 0


if __name__ == "__main__":
    sys.exit(main())
