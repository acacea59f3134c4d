"""bench/bench_gpu.py's models and engines (one builder per column).

Models: ResNet-50 (torchvision's when it imports, else the same network built here) and BERT-base
(transformers' BertModel from its default config, last hidden state); ``tiny=True`` gives the same
architectures a few layers deep and narrow, for ``--dry-run`` (the table's plumbing on any device).

Engines: eager, eager replayed from one CUDA graph, torch.jit.trace, torch.jit freeze +
optimize_for_inference, torch.compile (default and reduce-overhead), onnxruntime's CUDA execution
provider on torch.onnx's export (when onnxruntime has it), and tracejit: trace, optimize_for_inference,
optimize_for_inference(backend="cuda_graphs") in the row's precision and with ``dtype=torch.bfloat16``.
A column that does not apply to a row raises ``NotApplicable`` (the cell says why, no time).
"""
from __future__ import annotations

import io
import warnings
from typing import Any, Callable

import torch
from torch import nn

SEQ_LEN = 128
TINY_SEQ_LEN = 16
NEEDS_CUDA = ("eager_cuda_graph", "compile_reduce_overhead", "ort_cuda")


class NotApplicable(Exception):
    """The column does not apply to this row (the cell says why)."""


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


class ResNet(nn.Module):
    """torchvision's resnet50 architecture (stages of 3-4-6-3 bottlenecks), or a shallow narrow one."""

    def __init__(self, counts=(3, 4, 6, 3), base: int = 64):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, base, 7, 2, 3, bias=False), nn.BatchNorm2d(base), nn.ReLU(inplace=True),
                                  nn.MaxPool2d(3, 2, 1))
        blocks, cin = [], base
        for k, (count, stride) in enumerate(zip(counts, (1, 2, 2, 2))):
            width = base * 2 ** k
            for i in range(count):
                blocks.append(_Bottleneck(cin, width, stride if i == 0 else 1))
                cin = width * 4
        self.blocks = nn.Sequential(*blocks)
        self.fc = nn.Linear(cin, 1000)

    def forward(self, x):
        return self.fc(torch.flatten(nn.functional.adaptive_avg_pool2d(self.blocks(self.stem(x)), 1), 1))


def resnet50(tiny: bool = False) -> tuple[nn.Module, str]:
    if tiny:
        return ResNet((1, 1, 1, 1), 8), "tiny ResNet (1-1-1-1 bottlenecks, width 8)"
    try:
        from torchvision.models import resnet50 as tv_resnet50
        return tv_resnet50(weights=None), "torchvision.models.resnet50"
    except Exception as exc:  # noqa: BLE001  (torchvision missing, or its C++ ops do not load beside this torch)
        return ResNet(), f"built here (torchvision: {type(exc).__name__})"


class Bert(nn.Module):
    """BertModel's last hidden state, so every engine returns one tensor."""

    def __init__(self, tiny: bool = False):
        super().__init__()
        from transformers import BertConfig, BertModel
        config = BertConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64) \
            if tiny else BertConfig()   # the default config is BERT-base: 12 layers, 768 wide
        self.bert = BertModel(config)

    def forward(self, input_ids, attention_mask):
        return self.bert(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state


def build_row(row: str, device: torch.device, tiny: bool = False) -> tuple[nn.Module, tuple, str]:
    """(model in eval mode on ``device`` in the row's precision, example inputs, where the model came from)."""
    name, batch, precision = row.split("/")
    batch = int(batch)
    torch.manual_seed(0)
    if name == "resnet50":
        model, origin = resnet50(tiny)
        side = 32 if tiny else 224
        args: tuple = (torch.randn(batch, 3, side, side, device=device),)
    elif name == "bert":
        model, origin = Bert(tiny), "transformers BertModel(" + ("a 2-layer, 32-wide BertConfig)" if tiny else
                                                                 "BertConfig())")
        length = TINY_SEQ_LEN if tiny else SEQ_LEN
        ids = torch.randint(0, 1000 if tiny else 30522, (batch, length), device=device)
        args = (ids, torch.ones(batch, length, dtype=torch.long, device=device))
    else:
        raise SystemExit(f"unknown model {name!r} in row {row!r}")
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


def cuda_graph(fn: Callable, args: tuple) -> Callable:
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


def ort_cuda(model: nn.Module, args: tuple) -> Callable:
    """onnxruntime's CUDA execution provider on torch.onnx's export, inputs and output bound on the GPU."""
    try:
        import onnxruntime as ort
    except ImportError as exc:
        raise NotApplicable(f"onnxruntime is not installed ({exc})") from None
    if "CUDAExecutionProvider" not in ort.get_available_providers():
        raise NotApplicable(f"onnxruntime {ort.__version__} has no CUDAExecutionProvider (onnxruntime-gpu)")
    names = [f"input_{i}" for i in range(len(args))]
    buf = io.BytesIO()
    _quiet(lambda: torch.onnx.export(model, args, buf, input_names=names, output_names=["out"], dynamo=False))
    session = ort.InferenceSession(buf.getvalue(), providers=["CUDAExecutionProvider"])
    with torch.no_grad():
        out = model(*args)
    device_id = args[0].device.index or 0

    def call(*inputs):
        binding = session.io_binding()
        for name, t in zip(names, inputs):
            t = t.contiguous()
            binding.bind_input(name, "cuda", device_id, _ORT_TYPES[t.dtype], tuple(t.shape), t.data_ptr())
        result = torch.empty_like(out)
        binding.bind_output("out", "cuda", device_id, _ORT_TYPES[result.dtype], tuple(result.shape),
                            result.data_ptr())
        session.run_with_iobinding(binding)
        return result
    return call


_ORT_TYPES: dict = {}
try:
    import numpy as np
    _ORT_TYPES.update({torch.float32: np.float32, torch.float16: np.float16, torch.int64: np.int64})
except ImportError:  # pragma: no cover
    pass


def build_engine(column: str, model: nn.Module, args: tuple, row: str, traced_cache: dict) -> Callable:
    """The engine of ``column`` for this row; ``traced_cache`` shares one tracejit.trace among its columns."""
    import tracejit
    device = args[0].device
    if column in NEEDS_CUDA and device.type != "cuda":
        raise NotApplicable("needs CUDA")
    batch, precision = int(row.split("/")[1]), row.split("/")[2]

    def traced():
        if "traced" not in traced_cache:
            traced_cache["traced"] = _quiet(lambda: tracejit.trace(model, args))
        return traced_cache["traced"]

    if column == "eager":
        return model
    if column == "eager_cuda_graph":
        return cuda_graph(model, args)
    if column == "jit_trace":
        return _quiet(lambda: torch.jit.trace(model, args))
    if column == "jit_freeze_ofi":
        return _quiet(lambda: torch.jit.optimize_for_inference(torch.jit.freeze(torch.jit.trace(model, args))))
    if column == "compile":
        return torch.compile(model)
    if column == "compile_reduce_overhead":
        if batch > 1:
            raise NotApplicable("run at batch 1 only (its compile time; the issue's table has none at 32)")
        return torch.compile(model, mode="reduce-overhead")
    if column == "ort_cuda":
        if precision == "bf16":
            raise NotApplicable("bf16 rows: not run (the inputs are bound through numpy dtypes, which have no bfloat16)")
        return ort_cuda(model, args)
    if column == "tracejit_trace":
        return traced()
    if column == "tracejit_ofi":
        return _quiet(lambda: tracejit.optimize_for_inference(traced()))
    if column == "tracejit_cuda_graphs":
        return _quiet(lambda: tracejit.optimize_for_inference(traced(), backend="cuda_graphs"))
    if column == "tracejit_cuda_graphs_bf16":
        if precision == "bf16":
            raise NotApplicable("the row is bf16 already (see tracejit_cuda_graphs)")
        return _quiet(lambda: tracejit.optimize_for_inference(traced(), backend="cuda_graphs", dtype=torch.bfloat16))
    raise SystemExit(f"unknown column {column!r}")


def engine_note(engine: Any) -> dict:
    """What a tracejit CUDA-graph engine did (captures / replays / program runs, why it did not capture)."""
    stats = getattr(engine, "stats", None)
    if stats is None or getattr(engine, "backend", None) != "cuda_graphs":
        return {}
    note = {"cuda_graphs": dict(stats)}
    if engine.not_captured:
        note["not_captured"] = engine.not_captured
    return note
