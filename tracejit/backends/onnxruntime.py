"""Run a traced program in an onnxruntime InferenceSession, with the traced call signature.

``OrtProgram(traced)`` exports the traced method to ONNX in memory (export_onnx), one model per
specialization (backends/specializations.py chooses per call), and opens a CPU session for each:
all graph optimizations, ``intra_op_num_threads = torch.get_num_threads()``, idle
workers do not spin (on a few cores a spinning pool slows whatever runs next). A call flattens
the arguments like the traced program, hands each tensor to onnxruntime as a numpy view of its
memory (no copy for contiguous CPU tensors) and wraps the numpy results with
``torch.from_numpy`` (no copy), rebuilt into the traced output structure; one tensor or a flat
tuple of tensors in and out takes a closure that skips the pytree work (bench_ort_overhead.py
measures what a call costs over a bare ``session.run``).

Two sessions: ``session`` runs the calls of the traced shapes on the model with every dynamic axis of the
inputs fixed to the traced size and the size math folded (export/static_shapes.py; onnxruntime's free
dimension overrides fix the axes where that fails); any other call runs the dynamic model in a session
opened on the first such call. With sizes it knows, onnxruntime's optimizer folds the size subgraphs
(``Shape -> Gather -> Concat -> Reshape``: GPT-2's attention) and proves that the two operands of a residual
``Add`` have one shape, so the net stays in its blocked (NCHWc) layout with the add fused into the conv; with
symbolic sizes it tracks shapes only through the convs it blocks, so a conv it leaves in NCHW (ResNeXt's
grouped 3x3) breaks the chain and each residual add runs apart, between reshapes (ResNeXt-50, MobileNet-V3,
EfficientNet-B0: 5-16% slower than torch.onnx's file, whose sizes are fixed). ``quantize="int8"`` (opt-in, never the
default) runs onnxruntime's dynamic int8 quantization of the model (ort_quantize.py).
"""
from __future__ import annotations

import threading

import torch


from ..export._deps import require
from ..export.ort_quantize import quantize_model
from ..export.static_shapes import with_input_sizes
from ..ir import Value
from ..runtime import late_hooks
from ..support.module_hooks import any_registered
from .fallback import autocast_on as _autocast_on, refuse_autocast
from .input_sums import finite
from .onnx_call import TracedCall, prepare, with_fallbacks, with_size_guards
from .pinned_shapes import PinnedShapes
from .specializations import choose_per_call

NAME = "onnxruntime"

_TENSOR_NUMPY = torch.Tensor.numpy   # unbound: a non-tensor argument raises TypeError


class OrtProgram(TracedCall):
    """A traced program running in onnxruntime; call it like the traced program."""

    backend = "onnxruntime"

    def __init__(self, traced, *, threads: int | None = None, spinning: bool = False, optimized_model_path=None,
                 quantize: str | None = None, _model=None):
        require("onnxruntime")   # before the export: a clear error when it is not installed
        prepared, models = prepare(traced, self.backend) if _model is None else (None, [_model])
        graph, proto = models[0]
        self._init_call(traced, graph)
        self._init_guard_outputs(proto)
        self._init_input_sums(proto)
        self._threads, self._spinning = threads or torch.get_num_threads(), spinning
        self.quantize = quantize
        self.quantized_model = None if quantize is None else quantize_model(proto, quantize)
        # the model's one copy the program keeps (the dynamic session opens from it): the proto is dropped
        # after the build, so a program holds its weights once here, not twice (bytes and proto)
        self._model_bytes = self.quantized_model or proto.SerializeToString()
        self.pinned_sizes = traced_sizes(proto, graph)
        self.session = self._open(self.pinned_sizes, optimized_model_path, self._pinned_model(proto))
        self._shapes = [torch.Size(v.type.shape) for v in graph.inputs] if self.pinned_sizes else None
        # other shapes called again get a session of their own (backends/pinned_shapes.py)
        self._dim_names = dim_names(proto)
        self.pins = PinnedShapes(self._open_pinned, len(self._model_bytes))
        self._dynamic_session, self._dynamic_lock = (None, threading.Lock()) if self.pinned_sizes else (self.session,
                                                                                                          None)
        self._run = _run_of(self.session)
        self._output_names = [o.name for o in self.session.get_outputs()]
        self._plain_out = (len(self._out_leaves) == len(self._output_names) - self._n_sums - self._n_index
                           and all(isinstance(o, Value) for o in self._out_leaves))
        self._call = with_size_guards(self, traced, graph, with_fallbacks(self, traced, graph, self._fast_call()))
        if _model is None:   # every other specialization: its own session, chosen per call by its guards
            choose_per_call(self, prepared, [OrtProgram(traced, threads=threads, spinning=spinning, quantize=quantize,
                                                        _model=model) for model in models[1:]])

    def _pinned_model(self, proto, sizes: dict | None = None) -> bytes:
        """The model for the traced shapes (or ``sizes``): its input axes fixed and the size math folded
        (export/static_shapes.py); the dynamic model (its axes fixed by the session) where that fails."""
        sizes = self.pinned_sizes if sizes is None else sizes
        if not sizes:
            return self._model_bytes
        try:
            fixed = with_input_sizes(proto, sizes)
            return quantize_model(fixed, self.quantize) if self.quantize else fixed.SerializeToString()
        except Exception:  # noqa: BLE001  (the dynamic model, pinned by the session, computes the same)
            return self._model_bytes

    def _open(self, pinned: dict, optimized_model_path=None, model: bytes | None = None):
        """A CPU session of ``model`` (the dynamic one by default): all graph optimizations, the axes in ``pinned``
        fixed to their sizes."""
        ort = require("onnxruntime")
        options = ort.SessionOptions()
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        options.intra_op_num_threads = self._threads
        options.inter_op_num_threads = 1
        # fatal only: a failed run reaches the caller as an exception (or the traced program answers it,
        # onnx_call.py), and the build-time notes (initializers its optimizer left unused) are not the user's
        options.log_severity_level = 4
        options.add_session_config_entry("session.intra_op.allow_spinning", "1" if self._spinning else "0")
        for name, size in pinned.items():
            options.add_free_dimension_override_by_name(name, size)
        if optimized_model_path is not None:
            options.optimized_model_filepath = str(optimized_model_path)
        return ort.InferenceSession(self._model_bytes if model is None else model, options,
                                    providers=["CPUExecutionProvider"])

    @property
    def dynamic_session(self):
        """The session for calls of other shapes than the traced ones (opened on first use)."""
        if self._dynamic_session is None:
            with self._dynamic_lock:
                if self._dynamic_session is None:
                    self._dynamic_session = self._open({})
        return self._dynamic_session

    def _run_for(self, tensors):
        """The run function of the session for these input tensors: pinned for the traced shapes and for the
        other shapes called again (backends/pinned_shapes.py), else the dynamic model's."""
        shapes = self._shapes
        if shapes is None:
            return self._run
        key = tuple(getattr(t, "shape", None) for t in tensors)
        if list(key) == shapes:
            return self._run
        run = self.pins.run_for(key) if None not in key else None
        return run or _run_of(self.dynamic_session)

    def _open_pinned(self, shapes: tuple):
        """The run function of a new session of the model pinned to these input shapes (on a pin thread); raises
        ValueError where they do not fit the model's axes (the dynamic run reports it)."""
        sizes = axis_sizes(self._dim_names, shapes)
        model = None if self.quantize else self._pinned_model(require("onnx").load_from_string(self._model_bytes),
                                                             sizes)
        return _run_of(self._open(sizes, None, model))

    def __call__(self, *args, **kwargs):
        if _autocast_on():
            refuse_autocast(type(self).__name__)
        if any_registered():   # a global module hook (runtime/late_hooks.py)
            late_hooks.check_global(self, self.graph)
        return self._call(*args, **kwargs)

    def _fast_call(self):
        """The per-call function: a closure over the session's run for the common signatures (one
        tensor or a flat tuple of tensors in; one tensor or a flat tuple / list of tensors out),
        the general path otherwise. Both hand onnxruntime numpy views and wrap its numpy results."""
        run, out_names, names, n = self._run, self._output_names, self._names, self._n_inputs
        from_numpy, general, checked_feed, failed = torch.from_numpy, self._call_general, self._checked_feed, \
            self._after_failure
        n_sums, safe = self._n_sums, self._hand_over_sums   # the fast paths: no guard outputs (_plain_out), sums inline
        out_kind = self._out_spec.kind if self._out_spec is not None else "leaf"
        flat_out = self._plain_out and (out_kind == "leaf" or (
            out_kind in ("tuple", "list") and all(c.kind == "leaf" for c in self._out_spec.children)))
        if not (self._flat and flat_out):
            return general
        as_list = out_kind == "list"
        shapes, run_for = self._shapes, self._run_for
        if n == 1 and out_kind == "leaf":
            name, shape = names[0], shapes[0] if shapes is not None else None

            def call_one(*args, **kwargs):
                if kwargs or len(args) != 1:
                    return general(*args, **kwargs)
                x = args[0]
                try:
                    feed = {name: x.numpy()}
                except (AttributeError, RuntimeError, TypeError):
                    feed = checked_feed(args)
                try:
                    results = (run if shape is None or x.shape == shape else run_for(args))(out_names, feed, None)
                except Exception:  # noqa: BLE001  (the traced program answers, or raises eager's error)
                    return failed(args, kwargs)
                if n_sums and not finite(results, n_sums):
                    return safe(*args, **kwargs)
                return from_numpy(results[0])
            return call_one

        def call_flat(*args, **kwargs):
            if kwargs or len(args) != n:
                return general(*args, **kwargs)
            try:
                feed = dict(zip(names, map(_TENSOR_NUMPY, args)))
            except (AttributeError, RuntimeError, TypeError):
                feed = checked_feed(args)
            try:
                results = (run if shapes is None or [t.shape for t in args] == shapes else run_for(args))(
                    out_names, feed, None)
            except Exception:  # noqa: BLE001  (the traced program answers, or raises eager's error)
                return failed(args, kwargs)
            if n_sums:
                if not finite(results, n_sums):
                    return safe(*args, **kwargs)
                del results[-n_sums:]
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
            results = self._run_for(tensors)(self._output_names, feed, None)
        except Exception:  # noqa: BLE001  (the traced program answers, or raises eager's error)
            return self._after_failure(args, kwargs)
        if not self._answers(results):
            return self._hand_over(*args, **kwargs)
        return self._outputs([torch.from_numpy(r) for r in results], self._plain_out)

    def __repr__(self) -> str:
        return f"<OrtProgram {self.signature}>"


def traced_sizes(proto, graph) -> dict[str, int]:
    """Each dynamic axis of the model's inputs (``<input>_dim<i>``) -> its size in the trace (the graph's input
    types); {} when an input's traced shape is unknown."""
    try:
        return axis_sizes(dim_names(proto), [getattr(v.type, "shape", None) for v in graph.inputs])
    except ValueError:
        return {}


def dim_names(proto) -> list:
    """Per input of the model, the name of each of its axes (``<input>_dim<i>``), None for a fixed one."""
    return [[d.dim_param or None for d in i.type.tensor_type.shape.dim] for i in proto.graph.input]


def axis_sizes(names: list, shapes) -> dict[str, int]:
    """Each named axis (``dim_names``) -> its size in ``shapes`` (one per input); ValueError where a shape is
    unknown, has another rank, or gives one axis two sizes."""
    sizes: dict = {}
    for axis_names, shape in zip(names, shapes):
        if shape is None or len(shape) != len(axis_names) or not all(isinstance(d, int) for d in shape):
            raise ValueError(f"shape {shape} where the model's axes are {axis_names}")
        for name, size in zip(axis_names, shape):
            if name is not None and sizes.setdefault(name, size) != size:
                raise ValueError(f"axis {name} is {sizes[name]} and {size}")
    return sizes


def _run_of(session):
    """The session's C++ run (InferenceSession.run re-validates names on every call)."""
    return getattr(getattr(session, "_sess", None), "run", None) or session.run


def build(traced, **options) -> OrtProgram:
    """The onnxruntime backend (backends/protocol.py): ``OrtProgram(traced, **options)``."""
    return OrtProgram(traced, **options)

