"""GPU benchmark (issue 23): ResNet-50 and BERT-base on CUDA, tracejit beside eager and its peers.

    python bench/bench_gpu.py                       # the issue's six rows, every column
    python bench/bench_gpu.py --rounds 3 --calls 20 --json results.json
    python bench/bench_gpu.py --rows resnet50/1/fp32 bert/32/bf16

Rows: ResNet-50 (torchvision's when it imports, else the same network built here) and BERT-base
(transformers' BertModel from its default config, sequence length 128), at batch 1 and 32 in
float32 (TF32 off) and at batch 32 in bfloat16. Columns: eager, eager replayed from one CUDA
graph, torch.jit.trace, torch.jit freeze + optimize_for_inference, torch.compile (default and
reduce-overhead), tracejit.trace and tracejit.optimize_for_inference. (tracejit's own CUDA graphs
are not built yet: no column for them.)

Timing: every column is built and warmed up first; then ``--rounds`` rounds, each timing
``--calls`` calls of every column in turn (interleaved, so clock and thermal drift spread evenly),
each call between two CUDA events. A cell is the median per-call time in ms and its ratio to
eager; every column's output is compared with eager's (largest absolute difference). A column
whose engine cannot take the model says why instead of a time.

Without CUDA it prints why and exits with status 2.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
import warnings
from typing import Any, Callable

import torch
from torch import nn

ROWS = ("resnet50/1/fp32", "resnet50/32/fp32", "resnet50/32/bf16", "bert/1/fp32", "bert/32/fp32", "bert/32/bf16")
COLUMNS = ("eager", "eager_cuda_graph", "jit_trace", "jit_freeze_ofi", "compile", "compile_reduce_overhead",
           "tracejit_trace", "tracejit_ofi")
SEQ_LEN = 128


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


# ------------------------------------------------------------------------------------------ models
class _Bottleneck(nn.Module):
    def __init__(self, cin: int, width: int, stride: int):
        super().__init__()
        cout = width * 4
        self.conv1, self.bn1 = nn.Conv2d(cin, width, 1, bias=False), nn.BatchNorm2d(width)
        self.conv2, self.bn2 = nn.Conv2d(width, width, 3, stride, 1, bias=False), nn.BatchNorm2d(width)
        self.conv3, self.bn3 = nn.Conv2d(width, cout, 1, bias=False), nn.BatchNorm2d(cout)
        self.relu = nn.ReLU(inplace=True)
        self.downsample = None
        if stride != 1 or cin != cout:
            self.downsample = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        return self.relu(out + (x if self.downsample is None else self.downsample(x)))


class _ResNet50(nn.Module):
    """torchvision's resnet50 architecture (layers 3-4-6-3 of bottlenecks), for when torchvision is absent."""

    def __init__(self):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 64, 7, 2, 3, bias=False), nn.BatchNorm2d(64), nn.ReLU(inplace=True),
                                  nn.MaxPool2d(3, 2, 1))
        blocks, cin = [], 64
        for width, count, stride in ((64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2)):
            for i in range(count):
                blocks.append(_Bottleneck(cin, width, stride if i == 0 else 1))
                cin = width * 4
        self.blocks = nn.Sequential(*blocks)
        self.fc = nn.Linear(2048, 1000)

    def forward(self, x):
        return self.fc(torch.flatten(nn.functional.adaptive_avg_pool2d(self.blocks(self.stem(x)), 1), 1))


def resnet50() -> tuple[nn.Module, str]:
    try:
        from torchvision.models import resnet50 as tv_resnet50
        return tv_resnet50(weights=None), "torchvision.models.resnet50"
    except Exception as exc:  # noqa: BLE001  (torchvision missing, or its C++ ops do not load beside this torch)
        return _ResNet50(), f"built here (torchvision: {type(exc).__name__})"


class _Bert(nn.Module):
    """BertModel's last hidden state, so every engine returns one tensor."""

    def __init__(self):
        super().__init__()
        from transformers import BertConfig, BertModel
        self.bert = BertModel(BertConfig())   # the default config is BERT-base: 12 layers, 768 wide

    def forward(self, input_ids, attention_mask):
        return self.bert(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state


def build_row(row: str, device: torch.device) -> tuple[nn.Module, tuple, str]:
    name, batch, precision = row.split("/")
    batch = int(batch)
    torch.manual_seed(0)
    if name == "resnet50":
        model, origin = resnet50()
        args: tuple = (torch.randn(batch, 3, 224, 224, device=device),)
    elif name == "bert":
        model, origin = _Bert(), "transformers BertModel(BertConfig())"
        ids = torch.randint(0, 30522, (batch, SEQ_LEN), device=device)
        args = (ids, torch.ones(batch, SEQ_LEN, dtype=torch.long, device=device))
    else:
        raise SystemExit(f"unknown model {name!r} in row {row!r}; rows are {', '.join(ROWS)}")
    model = model.eval().to(device)
    if precision == "bf16":
        model = model.to(torch.bfloat16)
        args = tuple(a.to(torch.bfloat16) if a.is_floating_point() else a for a in args)
    elif precision != "fp32":
        raise SystemExit(f"unknown precision {precision!r} in row {row!r} (fp32 or bf16)")
    return model, args, origin


# ------------------------------------------------------------------------------------------ engines
def _quiet(fn: Callable) -> Any:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return fn()


def _cuda_graph(fn: Callable, args: tuple) -> Callable:
    """``fn`` captured in one CUDA graph on static copies of ``args``; a call copies its inputs in and replays."""
    static_in = tuple(a.clone() for a in args)
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(3):
            fn(*static_in)
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        static_out = fn(*static_in)

    def replay(*inputs):
        for dst, src in zip(static_in, inputs):
            dst.copy_(src)
        graph.replay()
        return static_out
    return replay


def build_engine(column: str, model: nn.Module, args: tuple) -> Callable:
    import tracejit
    if column == "eager":
        return model
    if column == "eager_cuda_graph":
        return _cuda_graph(model, args)
    if column == "jit_trace":
        return _quiet(lambda: torch.jit.trace(model, args))
    if column == "jit_freeze_ofi":
        return _quiet(lambda: torch.jit.optimize_for_inference(torch.jit.freeze(torch.jit.trace(model, args))))
    if column == "compile":
        return torch.compile(model)
    if column == "compile_reduce_overhead":
        return torch.compile(model, mode="reduce-overhead")
    if column == "tracejit_trace":
        return _quiet(lambda: tracejit.trace(model, args))
    if column == "tracejit_ofi":
        return _quiet(lambda: tracejit.optimize_for_inference(tracejit.trace(model, args)))
    raise SystemExit(f"unknown column {column!r}; columns are {', '.join(COLUMNS)}")


# ------------------------------------------------------------------------------------------ timing
def time_calls(engine: Callable, args: tuple, calls: int) -> list[float]:
    """Per-call times in ms, each between two CUDA events on the current stream."""
    times = []
    for _ in range(calls):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        engine(*args)
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return times


def run_row(row: str, columns: tuple, rounds: int, calls: int, warmup: int, device: torch.device) -> dict:
    model, args, origin = build_row(row, device)
    log(f"{row}: model {origin}")
    engines: dict[str, Callable] = {}
    result: dict[str, Any] = {"row": row, "model": origin, "cells": {}}
    with torch.no_grad():
        reference = model(*args).float()
        for column in columns:
            try:
                engine = build_engine(column, model, args)
                for _ in range(warmup):
                    out = engine(*args)
                torch.cuda.synchronize()
                diff = (out.float() - reference).abs().max().item()
                engines[column] = engine
                result["cells"][column] = {"max_abs_diff": diff}
                log(f"{row}: {column} built (largest difference to eager {diff:.2e})")
            except Exception as exc:  # noqa: BLE001  (the cell says why)
                result["cells"][column] = {"error": f"{type(exc).__name__}: {str(exc).splitlines()[0][:120]}"}
                log(f"{row}: {column} failed: {result['cells'][column]['error']}")
        samples: dict[str, list[float]] = {c: [] for c in engines}
        for r in range(rounds):
            for column, engine in engines.items():
                samples[column] += time_calls(engine, args, calls)
            log(f"{row}: round {r + 1}/{rounds}")
    eager_ms = statistics.median(samples["eager"]) if "eager" in samples else None
    for column, times in samples.items():
        ms = statistics.median(times)
        result["cells"][column].update(ms=ms, ratio=(ms / eager_ms) if eager_ms else None, calls=len(times))
    return result


def table(results: list[dict], columns: tuple) -> str:
    lines = ["| row | " + " | ".join(columns) + " |", "|---" * (len(columns) + 1) + "|"]
    for res in results:
        cells = []
        for column in columns:
            cell = res["cells"].get(column, {})
            if "ms" in cell:
                ratio = f" ({cell['ratio']:.2f}x)" if cell.get("ratio") is not None and column != "eager" else ""
                cells.append(f"{cell['ms']:.2f}{ratio}")
            else:
                cells.append(cell.get("error", "-").replace("|", "/"))
        lines.append(f"| {res['row']} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", nargs="+", default=list(ROWS), help=f"from {', '.join(ROWS)}")
    parser.add_argument("--columns", nargs="+", default=list(COLUMNS), help=f"from {', '.join(COLUMNS)}")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--calls", type=int, default=10, help="timed calls of each column per round")
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--json", help="also write the results here")
    opts = parser.parse_args(argv)
    if not torch.cuda.is_available():
        print(f"bench_gpu.py needs a CUDA device: torch.cuda.is_available() is False (torch {torch.__version__}, "
              f"CUDA build {torch.version.cuda or 'none'}). Run it on a GPU machine (scripts/gpu_check.sh).",
              file=sys.stderr)
        return 2
    columns = tuple(opts.columns)
    if "eager" not in columns:
        columns = ("eager",) + columns   # the ratios are to eager
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    device = torch.device("cuda")
    header = (f"{torch.cuda.get_device_name(device)}, torch {torch.__version__} (CUDA {torch.version.cuda}), "
              f"fp32 without TF32; median ms per call of {opts.rounds} rounds x {opts.calls} calls "
              "(CUDA events), ratio to eager")
    log(header)
    results = [run_row(row, columns, opts.rounds, opts.calls, opts.warmup, device) for row in opts.rows]
    print(header)
    print()
    print(table(results, columns))
    if opts.json:
        with open(opts.json, "w") as f:
            json.dump({"header": header, "results": results}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
