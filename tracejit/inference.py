"""``tracejit.freeze`` and ``tracejit.optimize_for_inference``: torch.jit's names, on tracejit's IR.

``freeze(traced)`` turns the parameters and buffers of an eval-mode traced module into constants
of a new traced program; ``optimize_for_inference(traced)`` freezes (modules) and runs the
inference passes (passes/pipeline.py; both in backends/torch_program.py), or with ``backend="onnxruntime"`` /
``"openvino"`` returns an ``OrtProgram`` / ``OpenVinoProgram`` running the exported ONNX model. Every result
keeps the traced call signature and output structure; the traced program given is never changed.
"""
from __future__ import annotations

from .auto_backend import optimize_auto
from .backends import protocol
from .backends.torch_program import freeze, optimized

__all__ = ["freeze", "optimize_for_inference", "optimized", "BACKENDS"]

BACKENDS = ("torch", "onnxruntime", "openvino", "cuda_graphs", "auto")   # optimize_for_inference's backends (backends/protocol.py;
# "auto": auto_backend.py, to be absorbed by backends/)


def optimize_for_inference(traced, backend: str = "torch", **backend_options):
    """Freeze (modules in eval mode) and run the inference passes; ``backend="onnxruntime"`` runs
    the program in an onnxruntime session instead (options go to ``OrtProgram``), ``"openvino"``
    compiles it with OpenVINO for CPU (options go to ``OpenVinoProgram``), ``"cuda_graphs"`` replays the
    optimized program from one CUDA graph per input signature (options: ``cache_size``, ``reuse_outputs``,
    ``dtype``; backends/cuda_graphs.py, docs/CUDA.md), ``"auto"`` times those that apply and keeps the
    fastest (options go to ``auto_backend.optimize_auto``: ``budget_s``, ``build_budget_s``, ...)."""
    if backend not in BACKENDS:
        raise ValueError(f"optimize_for_inference: unknown backend {backend!r}; expected one of {BACKENDS}")
    if backend == "auto":
        return optimize_auto(traced, **backend_options)
    return protocol.build(backend, traced, **backend_options)
