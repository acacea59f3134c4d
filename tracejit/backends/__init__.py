"""Backends: executors over a traced program behind one protocol (backends/protocol.py).

``torch`` (torch_cpu.py: the inference passes' numpy / oneDNN kernels, run by torch_kernels.py),
``onnxruntime`` (onnxruntime.py) and ``openvino`` (openvino.py) on the exported ONNX models
(onnx_call.py, one per specialization: specializations.py), ``program`` (plain.py: the traced program
as recorded). All follow one fallback policy (fallback.py).

>>> import torch, tracejit
>>> from tracejit.backends import build
>>> program = build("torch", tracejit.trace(lambda x: x.relu() * 2, torch.randn(3)))
>>> program.backend, program(torch.tensor([-1.0, 1.0]))
('torch', tensor([0., 2.]))
"""
from .protocol import BACKENDS, Backend, Executor, build, register

__all__ = ["BACKENDS", "Backend", "Executor", "build", "register"]
