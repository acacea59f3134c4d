"""Run a traced program with OpenVINO's CPU plugin, with the traced call signature.

``OpenVinoProgram(traced)`` prepares the program like OrtProgram (tracejit's inference passes,
then export_onnx), reads the ONNX model from memory and compiles it for CPU with
``PERFORMANCE_HINT=LATENCY`` and ``INFERENCE_NUM_THREADS = torch.get_num_threads()``; the
export's symbolic axes stay dynamic dimensions, so other batch sizes / lengths run on the same
compiled model. One InferRequest serves every call, driven by its own set_input_tensor / infer /
get_output_tensor (InferRequest.infer's Python wrapper doubled a small model's call time):
inputs share the tensors' memory (no copy when contiguous), outputs are copied out of the
request's buffers (which the next call overwrites), so two calls' results never alias; calls from
several threads take turns.
OpenVINO is optional (``pip install openvino``).
"""
from __future__ import annotations

import threading

import torch

from ..ir import Value
from ._deps import require
from .traced_call import TracedCall, prepare


class OpenVinoProgram(TracedCall):
    """A traced program compiled by OpenVINO for CPU; call it like the traced program."""

    backend = "openvino"

    def __init__(self, traced, *, threads: int | None = None, config: dict | None = None):
        ov = require("openvino", "openvino backend and its ONNX export", "pip install 'tracejit[openvino]'")
        graph, self.proto = prepare(traced, self.backend)
        self._init_call(traced, graph)
        self._ov_tensor = ov.Tensor
        self.core = ov.Core()
        self.model = self.core.read_model(self.proto.SerializeToString(), b"")
        # f32 stated: on CPUs with native bf16 the plugin would otherwise compute in bf16
        self.config = {"PERFORMANCE_HINT": "LATENCY", "INFERENCE_PRECISION_HINT": "f32",
                       "INFERENCE_NUM_THREADS": threads or torch.get_num_threads(),
                       **(config or {})}
        self.compiled = self.core.compile_model(self.model, "CPU", self.config)
        self.request = self.compiled.create_infer_request()
        self._lock = threading.Lock()   # one request: calls from several threads take turns
        self._n_outputs = len(self.compiled.outputs)
        self._plain_out = (len(self._out_leaves) == self._n_outputs
                           and all(isinstance(o, Value) for o in self._out_leaves))
        self._single = self._plain_out and self._out_spec is None

    def __call__(self, *args, **kwargs):
        tensors = self._tensors(args, kwargs)
        try:
            feed = [t.numpy() for t in tensors]
        except (AttributeError, RuntimeError, TypeError):
            feed = list(self._checked_feed(tensors).values())
        request, make_tensor = self.request, self._ov_tensor
        try:
            # the request's own calls: half the per-call cost of InferRequest.infer's Python wrapper
            with self._lock:
                for i, array in enumerate(feed):
                    request.set_input_tensor(i, make_tensor(array if array.flags.c_contiguous
                                                            else array.copy(), shared_memory=True))
                request.infer()
                # copies: the request's output buffers are overwritten by the next call
                results = [request.get_output_tensor(i).data.copy() for i in range(self._n_outputs)]
        except Exception as e:  # noqa: BLE001
            raise self._run_error(tensors, e) from None
        if self._single:
            return torch.from_numpy(results[0])
        return self._outputs([torch.from_numpy(r) for r in results], self._plain_out)

    def __repr__(self) -> str:
        return f"<OpenVinoProgram {self.signature}>"
