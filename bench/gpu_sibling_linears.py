"""Sibling linears on a GPU (issue 23): BERT's query, key and value as three GEMMs or as one batched GEMM.

    python bench/gpu_sibling_linears.py                 # both parts, about 60 s on an H200
    python bench/gpu_sibling_linears.py --part gemm     # or --part model

``gemm``: the three 768 x 768 linears of one input at 128 and 4096 rows (BERT-base at batch 1 and 32, sequence
128), fp32 without TF32 and bf16, each way captured in one CUDA graph (what tracejit's cuda_graphs backend
replays, so launches cost nothing and the GPU time is what differs): three ``F.linear`` (eager's layout), three
``x @ Wt`` + bias (kernels/cuda_linear.py), one ``bmm`` over the stacked transposed weights + bias
(kernels/cuda_sibling_linears.py), the same with ``baddbmm``, and one ``F.linear`` over the concatenated weights
whose column slices are the results (a lower bound: its results are not contiguous, so the pass does not use it).
Median ms of interleaved rounds (CUDA events around 20 replays), and the largest difference to the first way.

``model``: BERT-base (bench_gpu.py's rows) under tracejit's cuda_graphs backend with and without
passes/cuda_sibling_linears.py, interleaved, median ms per call.
"""
from __future__ import annotations

import os
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_gpu import interleaved_ms, run_parts  # noqa: E402
from gpu_engines import build_row, cuda_graph  # noqa: E402

CUDA = torch.device("cuda")


def _ways(weights, biases):
    wt = [w.t().contiguous() for w in weights]
    stacked = torch.stack(wt).contiguous()
    b3 = torch.stack(biases).unsqueeze(1)
    cat_w, cat_b = torch.cat(weights).contiguous(), torch.cat(biases)
    n, width = len(weights), weights[0].shape[0]

    def bmm(x):
        y = torch.bmm(x.expand(n, *x.shape), stacked)
        return tuple(y.add_(b3).unbind(0))
    return {
        "3 x F.linear": lambda x: tuple(F.linear(x, w, b) for w, b in zip(weights, biases)),
        "3 x (x @ Wt + b)": lambda x: tuple((x @ w).add_(b) for w, b in zip(wt, biases)),
        "bmm + b": bmm,
        "baddbmm": lambda x: tuple(torch.baddbmm(b3, x.expand(n, *x.shape), stacked).unbind(0)),
        "F.linear(cat) sliced": lambda x: tuple(F.linear(x, cat_w, cat_b).split(width, -1)),
    }


def part_gemm() -> None:
    print("\n## Three 768 x 768 linears of one input, each way in one CUDA graph (ms per replay)\n")
    head = None
    for rows, dtype in ((128, torch.float32), (4096, torch.float32), (128, torch.bfloat16), (4096, torch.bfloat16)):
        torch.manual_seed(0)
        weights = [torch.randn(768, 768, device=CUDA, dtype=dtype) / 28 for _ in range(3)]
        biases = [torch.randn(768, device=CUDA, dtype=dtype) for _ in range(3)]
        x = torch.randn(rows, 768, device=CUDA, dtype=dtype)
        ways = _ways(weights, biases)
        if head is None:
            head = list(ways)
            print("| rows, dtype | " + " | ".join(head) + " | largest difference |\n" + "|---" * (len(head) + 2) + "|")
        with torch.no_grad():
            want = ways[head[0]](x)
            diff = max((g.float() - w.float()).abs().max().item() for way in ways.values()
                       for g, w in zip(way(x), want))
            graphs = {k: cuda_graph(f, (x,)) for k, f in ways.items()}
            replays = {k: (lambda g=g: [g(x) for _ in range(20)], ()) for k, g in graphs.items()}
            ms = {k: v / 20 for k, v in interleaved_ms(replays, 7, 1, CUDA, warmup=1).items()}
        base = ms[head[0]]
        print(f"| {rows}, {str(dtype)[6:]} | " + " | ".join(f"{ms[k]:.4f} ({ms[k] / base:.2f}x)" for k in head)
              + f" | {diff:.1e} |", flush=True)


def part_model() -> None:
    import tracejit
    from tracejit.passes import pipeline
    print("\n## BERT-base under tracejit's cuda_graphs backend: with and without the sibling-linear pass (ms per call)\n")
    print("| row | eager | without | with | with / without | largest difference, with |\n|---|---|---|---|---|---|")
    full = pipeline.CUDA_IN_MEMORY_PASSES
    without = tuple(p for p in full if p[0] != "fuse_cuda_sibling_linears")
    for row in ("bert/1/fp32", "bert/32/fp32", "bert/32/bf16"):
        model, args, _ = build_row(row, CUDA)
        with torch.no_grad():
            traced = tracejit.trace(model, args)
            engines = {"eager": model}
            for name, passes in (("without", without), ("with", full)):
                pipeline.CUDA_IN_MEMORY_PASSES = passes
                try:
                    engines[name] = tracejit.optimize_for_inference(traced, backend="cuda_graphs")
                finally:
                    pipeline.CUDA_IN_MEMORY_PASSES = full
            want = model(*args).float()
            diff = (engines["with"](*args).float() - want).abs().max().item()
            ms = interleaved_ms({k: (e, args) for k, e in engines.items()}, 5, 10, CUDA)
        print(f"| {row} | {ms['eager']:.2f} | {ms['without']:.2f} | {ms['with']:.2f} | "
              f"{ms['with'] / ms['without']:.3f}x | {diff:.1e} |", flush=True)


def main() -> int:
    return run_parts(__doc__.splitlines()[0], "gpu_sibling_linears.py", {"gemm": part_gemm, "model": part_model})


if __name__ == "__main__":
    sys.exit(main())
