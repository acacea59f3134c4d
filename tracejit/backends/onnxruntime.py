"""Run a traced program in an onnxruntime InferenceSession, with the traced call signature.

``OrtProgram(traced)`` exports the traced method to ONNX in memory (export_onnx), one model per
specialization (backends/specializations.py chooses per call), and opens a CPU session for each:
all graph optimizations, ``intra_op_num_threads = torch.get_num_threads()``, idle
workers do not spin (on a few cores a spinning pool slows whatever runs next). A call flattens
the arguments like the traced program, hands each tensor to onnxruntime as a numpy view of its
memory (no copy for contiguous CPU tensors) and wraps the numpy results with
``torch.from_numpy`` (no copy), rebuilt into the traced output structure; one tensor or a flat
tuple of tensors in and out takes a closure that skips the pytree work (bench_ort_overhead.py
measures what a call costs over a bare ``session.run``). ``quantize="int8"`` (opt-in, never the
default) runs onnxruntime's dynamic int8 quantization of the model (ort_quantize.py).
"""
from __future__ import annotations

import torch


from ..export._deps import require
from ..export.ort_quantize import quantize_model
from ..ir import Value
from .fallback import autocast_on as _autocast_on, refuse_autocast
from .onnx_call import TracedCall, prepare, with_fallbacks, with_size_guards
from .specializations import choose_per_call

NAME = "onnxruntime"

_TENSOR_NUMPY = torch.Tensor.numpy   # unbound: a non-tensor argument raises TypeError


class OrtProgram(TracedCall):
    """A traced program running in onnxruntime; call it like the traced program."""

    backend = "onnxruntime"

    def __init__(self, traced, *, threads: int | None = None, spinning: bool = False, optimized_model_path=None,
                 quantize: str | None = None, _model=None):
        ort = require("onnxruntime")
        prepared, models = prepare(traced, self.backend) if _model is None else (None, [_model])
        graph, self.proto = models[0]
        self._init_call(traced, graph)
        options = ort.SessionOptions()
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        options.intra_op_num_threads = threads or torch.get_num_threads()
        options.inter_op_num_threads = 1
        options.add_session_config_entry("session.intra_op.allow_spinning", "1" if spinning else "0")
        if optimized_model_path is not None:
            options.optimized_model_filepath = str(optimized_model_path)
        self.quantize = quantize
        self.quantized_model = None if quantize is None else quantize_model(self.proto, quantize)
        model = self.quantized_model or self.proto.SerializeToString()
        self.session = ort.InferenceSession(model, options, providers=["CPUExecutionProvider"])
        # the session's C++ run (InferenceSession.run re-validates names on every call)
        self._run = getattr(getattr(self.session, "_sess", None), "run", None) or self.session.run
        self._output_names = [o.name for o in self.session.get_outputs()]
        self._plain_out = (len(self._out_leaves) == len(self._output_names)
                           and all(isinstance(o, Value) for o in self._out_leaves))
        self._call = with_size_guards(self, traced, graph, with_fallbacks(self, traced, graph, self._fast_call()))
        if _model is None:   # every other specialization: its own session, chosen per call by its guards
            choose_per_call(self, prepared, [OrtProgram(traced, threads=threads, spinning=spinning, quantize=quantize,
                                                        _model=model) for model in models[1:]])

    def __call__(self, *args, **kwargs):
        if _autocast_on():
            refuse_autocast(type(self).__name__)
        return self._call(*args, **kwargs)

    def _fast_call(self):
        """The per-call function: a closure over the session's run for the common signatures (one
        tensor or a flat tuple of tensors in; one tensor or a flat tuple / list of tensors out),
        the general path otherwise. Both hand onnxruntime numpy views and wrap its numpy results."""
        run, out_names, names, n = self._run, self._output_names, self._names, self._n_inputs
        from_numpy, general, checked_feed, run_error = torch.from_numpy, self._call_general, self._checked_feed, \
            self._run_error
        out_kind = self._out_spec.kind if self._out_spec is not None else "leaf"
        flat_out = self._plain_out and (out_kind == "leaf" or (
            out_kind in ("tuple", "list") and all(c.kind == "leaf" for c in self._out_spec.children)))
        if not (self._flat and flat_out):
            return general
        as_list = out_kind == "list"
        if n == 1 and out_kind == "leaf":
            name = names[0]

            def call_one(*args, **kwargs):
                if kwargs or len(args) != 1:
                    return general(*args, **kwargs)
                try:
                    feed = {name: args[0].numpy()}
                except (AttributeError, RuntimeError, TypeError):
                    feed = checked_feed(args)
                try:
                    return from_numpy(run(out_names, feed, None)[0])
                except Exception as e:  # noqa: BLE001
                    raise run_error(args, e) from None
            return call_one

        def call_flat(*args, **kwargs):
            if kwargs or len(args) != n:
                return general(*args, **kwargs)
            try:
                feed = dict(zip(names, map(_TENSOR_NUMPY, args)))
            except (AttributeError, RuntimeError, TypeError):
                feed = checked_feed(args)
            try:
                results = run(out_names, feed, None)
            except Exception as e:  # noqa: BLE001
                raise run_error(args, e) from None
            if out_kind == "leaf":
                return from_numpy(results[0])
            outs = list(map(from_numpy, results))
            return outs if as_list else tuple(outs)
        return call_flat

    def _call_general(self, *args, **kwargs):
        tensors = self._tensors(args, kwargs)
        try:
            feed = {name: t.numpy() for name, t in zip(self._names, tensors)}
        except (AttributeError, RuntimeError, TypeError):
            feed = self._checked_feed(tensors)
        try:
            results = self._run(self._output_names, feed, None)
        except Exception as e:  # noqa: BLE001
            raise self._run_error(tensors, e) from None
        return self._outputs([torch.from_numpy(r) for r in results], self._plain_out)

    def __repr__(self) -> str:
        return f"<OrtProgram {self.signature}>"


def build(traced, **options) -> OrtProgram:
    """The onnxruntime backend (backends/protocol.py): ``OrtProgram(traced, **options)``."""
    return OrtProgram(traced, **options)

