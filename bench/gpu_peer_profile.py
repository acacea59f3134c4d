"""Where torch.jit's frozen program wins on a GPU (issue 23): kernels per call, and a cuDNN fusion experiment.

    python bench/gpu_peer_profile.py                  # every part, about 90 s on an H200
    python bench/gpu_peer_profile.py --part kernels   # or --part convs, --part linears

``kernels``: for ResNet-50 at batch 32 and BERT-base at batch 1 (fp32, no TF32), torch.profiler's CUDA kernels
per call of eager, torch.jit freeze + optimize_for_inference and tracejit's optimize_for_inference: how many,
their GPU time, and the eight that take longest. bench_gpu.py measured jit's frozen program at 0.84x eager on
ResNet-50 b32 (tracejit 0.98x) and 0.50x on BERT-base b1 without a CUDA graph (tracejit's graph replay 0.61x):
this says whether that is fewer kernels (fusion) or faster ones.

``convs``: ResNet-50 with its batch norms folded, run as eager ops, and with each conv + relu and conv + add +
relu as one cuDNN call (``torch.cudnn_convolution_relu`` / ``cudnn_convolution_add_relu``, what jit's frozen
CUDA graph uses), each in NCHW and channels-last, at batch 1 and 32 in fp32 and at 32 in bf16: median ms
(CUDA events, interleaved rounds), the largest difference to eager, and whether a NaN survives the fused relu.
A measurement before a pass is built.

``linears``: BERT-base with each linear weight stored ``[in, out]`` (run as ``linear`` on its transposed view, or
as ``x @ Wt + b``) against eager's ``[out, in]``: jit's frozen BERT ran its matmuls as "nn" GEMMs (0.77 ms of
GPU time at batch 1) where eager's ``linear`` took cuBLAS's split-K kernels (2.0 ms).
"""
from __future__ import annotations

import copy
import os
import sys

import torch
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_gpu import interleaved_ms, run_parts  # noqa: E402
from gpu_engines import build_engine, build_row  # noqa: E402

CUDA = torch.device("cuda")


def _kernels(fn, args, calls: int = 5) -> tuple[int, float, list]:
    """(kernels per call, GPU ms per call, [(us per call, count per call, name)] longest first)."""
    from torch.profiler import ProfilerActivity, profile
    with torch.no_grad():
        for _ in range(3):
            fn(*args)
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(calls):
                fn(*args)
            torch.cuda.synchronize()
    rows = [e for e in prof.key_averages() if e.device_type.name == "CUDA" and e.count]
    total_us = sum(e.self_device_time_total for e in rows) if rows and hasattr(rows[0], "self_device_time_total") \
        else sum(e.self_cuda_time_total for e in rows)
    count = sum(e.count for e in rows)

    def us(e):
        return getattr(e, "self_device_time_total", None) or e.self_cuda_time_total
    top = sorted(rows, key=us, reverse=True)[:8]
    return count / calls, total_us / calls / 1e3, [(us(e) / calls, e.count / calls, e.key[:90]) for e in top]


def part_kernels() -> None:
    for row in ("resnet50/32/fp32", "bert/1/fp32"):
        model, args, _ = build_row(row, torch.device("cuda"))
        cache: dict = {}
        print(f"\n## {row}: CUDA kernels per call (torch.profiler, 5 calls after 3 warm-up)\n")
        for column in ("eager", "jit_freeze_ofi", "tracejit_ofi"):
            try:
                with torch.no_grad():
                    engine = build_engine(column, model, args, row, cache)
                n, ms, top = _kernels(engine, args)
            except Exception as e:  # noqa: BLE001  (the line says why)
                print(f"- {column}: failed: {type(e).__name__}: {str(e)[:160]}")
                continue
            print(f"- **{column}**: {n:.0f} kernels, {ms:.2f} ms of GPU time per call; longest:")
            for us, count, name in top:
                print(f"    {us:8.1f} us  x{count:4.1f}  {name}")
        sys.stdout.flush()


# ------------------------------------------------------------------------------------------ convs
class _Folded(nn.Module):
    """conv (batch norm folded in) -> optional relu, as eager ops or one cuDNN call."""

    def __init__(self, conv: nn.Conv2d, bn: nn.BatchNorm2d, relu: bool):
        super().__init__()
        self.conv = torch.nn.utils.fusion.fuse_conv_bn_eval(conv, bn)
        self.relu, self.fused = relu, False

    def forward(self, x, residual=None):
        c = self.conv
        if self.fused and residual is None and self.relu:
            return torch.cudnn_convolution_relu(x, c.weight, c.bias, c.stride, c.padding, c.dilation, c.groups)
        if self.fused and residual is not None:
            return torch.cudnn_convolution_add_relu(x, c.weight, residual, 1.0, c.bias, c.stride, c.padding,
                                                    c.dilation, c.groups)
        y = c(x)
        if residual is not None:
            y = y + residual
        return torch.relu(y) if self.relu or residual is not None else y


class _Block(nn.Module):
    def __init__(self, b):
        super().__init__()
        self.a, self.b = _Folded(b.conv1, b.bn1, True), _Folded(b.conv2, b.bn2, True)
        self.c = _Folded(b.conv3, b.bn3, True)
        self.down = _Folded(b.downsample[0], b.downsample[1], False) if b.downsample is not None else None

    def forward(self, x):
        identity = x if self.down is None else self.down(x)
        return self.c(self.b(self.a(x)), identity)


class _FoldedResNet(nn.Module):
    def __init__(self, net):
        super().__init__()
        self.stem = _Folded(net.conv1, net.bn1, True)
        self.pool, self.avg, self.fc = net.maxpool, net.avgpool, net.fc
        self.blocks = nn.Sequential(*[_Block(b) for layer in (net.layer1, net.layer2, net.layer3, net.layer4)
                                      for b in layer])

    def forward(self, x):
        x = self.blocks(self.pool(self.stem(x)))
        return self.fc(torch.flatten(self.avg(x), 1))


def part_convs() -> None:
    print("\n## ResNet-50, batch norms folded: eager ops against one cuDNN call per conv (+ add) + relu\n")
    print("| row | layout | eager (unfolded) | folded, eager ops | folded, cuDNN fused | largest difference "
          "(fused to eager) | NaN outputs from one NaN pixel (eager ops / fused) |\n|---|---|---|---|---|---|---|")
    for row in ("resnet50/1/fp32", "resnet50/32/fp32", "resnet50/32/bf16"):
        model, args, _ = build_row(row, torch.device("cuda"))
        for layout in ("nchw", "channels_last"):
            fmt = torch.channels_last if layout == "channels_last" else torch.contiguous_format
            try:
                with torch.no_grad():
                    plain = copy.deepcopy(model).float().eval()
                    folded = _FoldedResNet(plain).to(args[0].dtype).to(memory_format=fmt)
                    fused = copy.deepcopy(folded)
                    for m in fused.modules():
                        if isinstance(m, _Folded):
                            m.fused = True
                    x = args[0].contiguous(memory_format=fmt)
                    want = model(args[0]).float()
                    diff = (fused(x).float() - want).abs().max().item()
                    engines = {"eager": (model, args), "folded": (folded, (x,)), "fused": (fused, (x,))}
                    ms = interleaved_ms(engines, 3, 10, CUDA)
            except Exception as e:  # noqa: BLE001  (the line says why)
                print(f"| {row} | {layout} | failed: {type(e).__name__}: {str(e)[:140]} | | | | |")
                continue
            with torch.no_grad():   # NaN: eager keeps it; does cuDNN's fused relu (a max with 0) drop it?
                bad = x.clone()
                bad[0, 0, 0, 0] = float("nan")
                nan_eager, nan_fused = (int(torch.isnan(m(bad)).sum()) for m in (folded, fused))
            print(f"| {row} | {layout} | {ms['eager']:.2f} | {ms['folded']:.2f} ({ms['folded'] / ms['eager']:.2f}x) | "
                  f"{ms['fused']:.2f} ({ms['fused'] / ms['eager']:.2f}x) | {diff:.1e} | {nan_eager} / {nan_fused} |", flush=True)


class _Transposed(nn.Module):
    """nn.Linear with its weight stored ``[in, out]``: ``linear`` on a transposed view, or ``x @ Wt + b``."""

    def __init__(self, lin: nn.Linear, how: str):
        super().__init__()
        self.wt = nn.Parameter(lin.weight.detach().t().contiguous(), requires_grad=False)
        self.b = None if lin.bias is None else nn.Parameter(lin.bias.detach(), requires_grad=False)
        self.how = how

    def forward(self, x):
        if self.how == "strided":
            return torch.nn.functional.linear(x, self.wt.t(), self.b)
        y = x @ self.wt
        return y if self.b is None else y + self.b


def part_linears() -> None:
    """BERT-base's linears as eager keeps them, with the weight stored transposed (passes/linear_weight_layout.py
    does so on the CPU only), and as ``x @ Wt + b`` (jit's frozen program runs matmuls in the "nn" layout)."""
    print("\n## BERT-base linears: weight layout on CUDA (eager ops, no CUDA graph)\n")
    print("| row | eager | linear(x, Wt.t(), b) | x @ Wt + b | largest difference |\n|---|---|---|---|---|")
    for row in ("bert/1/fp32", "bert/32/fp32", "bert/32/bf16"):
        model, args, _ = build_row(row, torch.device("cuda"))
        variants = {"eager": model}
        for how in ("strided", "matmul"):
            m = copy.deepcopy(model)
            for name, lin in [(n, mod) for n, mod in m.named_modules() if isinstance(mod, nn.Linear)]:
                parent, _, leaf = name.rpartition(".")
                setattr(m.get_submodule(parent) if parent else m, leaf, _Transposed(lin, how))
            variants[how] = m
        with torch.no_grad():
            want = model(*args).float()
            diff = max((v(*args).float() - want).abs().max().item() for v in variants.values())
            ms = interleaved_ms({k: (v, args) for k, v in variants.items()}, 3, 10, CUDA)
        print(f"| {row} | {ms['eager']:.2f} | {ms['strided']:.2f} ({ms['strided'] / ms['eager']:.2f}x) | "
              f"{ms['matmul']:.2f} ({ms['matmul'] / ms['eager']:.2f}x) | {diff:.1e} |", flush=True)


def main() -> int:
    return run_parts(__doc__.splitlines()[0], "gpu_peer_profile.py", {"kernels": part_kernels, "convs": part_convs, "linears": part_linears})


if __name__ == "__main__":
    sys.exit(main())
