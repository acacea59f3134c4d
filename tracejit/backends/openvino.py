"""Run a traced program with OpenVINO's CPU plugin, with the traced call signature.

``OpenVinoProgram(traced)`` prepares the program like OrtProgram (tracejit's inference passes,
then export_onnx, one model per specialization chosen per call by backends/specializations.py),
reads the ONNX model from memory and compiles it for CPU with
``PERFORMANCE_HINT=LATENCY`` and ``INFERENCE_NUM_THREADS = torch.get_num_threads()``. The traced input
shapes run a model compiled for their sizes; other shapes run the export's symbolic axes as dynamic
dimensions (compiled on the first such call), and a shape called a second time gets a model compiled for it
on a background thread (backends/pinned_shapes.py). With fixed sizes OpenVINO ran BERT (two layers, 16
tokens) in 0.45x and GPT-2 in 0.55x the dynamic model's time (bench/bench_pinned_shapes.py --backend openvino);
until 2026-11-29 the traced shapes ran the dynamic model too. Each new set of input shapes is first checked by
OpenVINO's shape inference
(``_check_shapes``: its compiled model does not always refuse shapes it cannot take). One
InferRequest per compiled model serves every call, driven by its own set_input_tensor / infer / get_output_tensor
(InferRequest.infer's Python wrapper doubled a small model's call time):
inputs share the tensors' memory (no copy when contiguous), outputs are copied out of the
request's buffers (which the next call overwrites), so two calls' results never alias; calls from
several threads take turns.

``static_shapes=True`` (opt-in) compiles the model for each new set of input shapes on its first call instead, up
to ``MAX_STATIC`` of them (later shapes run on the dynamic model): OpenVINO picks better kernels for
fixed shapes (TransformerEncoder d256 s64 2.9 -> 2.4 ms, BERT-base s128 67 -> 64 ms here), at the
price of a compile on the first call with each shape (0.3-1 s) and one more compiled copy of the
weights per shape. ``precision="bf16"`` (opt-in) computes in bfloat16 where the CPU has it
natively (OpenVINO's ``BF16`` capability, e.g. AVX512_BF16 or AMX): ResNet-50 21.8 -> 10.7 ms
here, with a relative L2 error near 4e-3 instead of 3e-7 (docs/DEPLOY.md); a CPU without it
raises ValueError rather than emulate bf16 slowly. OpenVINO is optional (``pip install openvino``).
"""
from __future__ import annotations

import threading

import torch


from ..export._deps import require
from ..ir import Value
from ..runtime import late_hooks
from ..support.module_hooks import any_registered
from .fallback import autocast_on as _autocast_on, refuse_autocast
from .onnx_call import TracedCall, prepare, with_fallbacks, with_size_guards
from .pinned_shapes import PinnedShapes
from .specializations import choose_per_call
from . import static_check

NAME = "openvino"

MAX_STATIC = 4   # static_shapes=True: compiled shape sets kept; later shapes use the dynamic model
MAX_CHECKED = 4096   # input shape sets whose check passed, kept (then forgotten at once: each checked again)
PRECISIONS = {"f32": "f32", "bf16": "bf16"}   # precision= -> OpenVINO's INFERENCE_PRECISION_HINT


class OpenVinoProgram(TracedCall):
    """A traced program compiled by OpenVINO for CPU; call it like the traced program."""

    backend = "openvino"

    def __init__(self, traced, *, threads: int | None = None, config: dict | None = None,
                 static_shapes: bool = False, precision: str = "f32", _model=None):
        if precision not in PRECISIONS:
            raise ValueError(f"optimize_for_inference(backend='openvino'): precision={precision!r} is not "
                             f"supported; expected one of {sorted(PRECISIONS)} ('f32' is the default)")
        ov = require("openvino", "openvino backend and its ONNX export", "pip install 'tracejit[openvino]'")
        prepared, models = prepare(traced, self.backend) if _model is None else (None, [_model])
        graph, self.proto = models[0]
        self._init_call(traced, graph)
        self._init_guard_outputs(self.proto)
        self._init_input_sums(self.proto)
        _refuse_double(graph, self.signature)
        _refuse_sequences(self.proto, self.signature)
        self._ov_tensor = ov.Tensor
        self.core = ov.Core()
        if precision != "f32":
            _require_native(self.core, precision)
        self.precision = precision
        self.model = self.core.read_model(self.proto.SerializeToString(), b"")
        # f32 stated: on CPUs with native bf16 the plugin would otherwise compute in bf16
        self.config = {"PERFORMANCE_HINT": "LATENCY", "INFERENCE_PRECISION_HINT": PRECISIONS[precision],
                       "INFERENCE_NUM_THREADS": threads or torch.get_num_threads(),
                       **(config or {})}
        self._ov = ov
        self._lock = threading.Lock()   # the dynamic model's one request: calls from several threads take turns
        self._dynamic = None            # (compiled, request): compiled on first use (``compiled``)
        self._static: dict = {}         # input shapes -> (request, lock) of a model compiled for them, or None
        self._static_all = static_shapes
        self._static_lock = threading.Lock()
        self.reference = self._safe   # the traced program a fixed-shape model's first answer is checked against
        self.static_checked: set = set()   # shapes whose fixed-shape model's first answer agreed (static_check.py)
        self.static_off: set = set()       # shapes whose fixed-shape model disagreed: the dynamic model serves them
        traced_shapes = tuple(tuple(v.type.shape) for v in graph.inputs if hasattr(v.type, "shape"))
        if len(traced_shapes) == len(graph.inputs) and all(isinstance(d, int) for s in traced_shapes for d in s):
            try:   # the traced shapes run a model compiled for their sizes
                self._static[traced_shapes] = self._compile_for(traced_shapes)
            except Exception:  # noqa: BLE001  (sizes OpenVINO cannot fix: the dynamic model runs them)
                self._static[traced_shapes] = None
        self.pins = PinnedShapes(self._compile_for, self.proto.ByteSize())   # other shapes called again
        self._n_outputs = len(self.model.outputs)
        self._plain_out = (len(self._out_leaves) == self._n_outputs - self._n_sums - self._n_index
                           and all(isinstance(o, Value) for o in self._out_leaves))
        self._single = self._plain_out and self._out_spec is None
        self._shapes_ok: set = set()   # input shapes OpenVINO's shape inference accepted (_check_shapes)
        self._call = with_size_guards(self, traced, graph, with_fallbacks(self, traced, graph, self._run_call))
        if _model is None:   # every other specialization: its own compiled model, chosen per call by its guards
            choose_per_call(self, prepared, [OpenVinoProgram(traced, threads=threads, config=config,
                                                             static_shapes=static_shapes, precision=precision,
                                                             _model=model) for model in models[1:]])

    def __call__(self, *args, **kwargs):
        if _autocast_on():
            refuse_autocast(type(self).__name__)
        if any_registered():   # a global module hook (runtime/late_hooks.py)
            late_hooks.check_global(self, self.graph)
        return self._call(*args, **kwargs)

    def _run_call(self, *args, **kwargs):
        tensors = self._tensors(args, kwargs)
        try:
            feed = [t.numpy() for t in tensors]
        except (AttributeError, RuntimeError, TypeError):
            feed = list(self._checked_feed(tensors).values())
        shapes = tuple(a.shape for a in feed)
        try:
            reshaped = None if shapes in self._shapes_ok else self._check_shapes(tensors, shapes)
        except RuntimeError:   # shapes the model refuses (raised by _check_shapes): the traced program's call
            return self._after_failure(args, kwargs)
        hit = self._static.get(shapes, False) if shapes not in self.static_off else None
        if hit is False:
            hit = self._static_request(shapes, reshaped) if self._static_all else self.pins.run_for(shapes)
        request, lock = hit or (self.request, self._lock)
        make_tensor = self._ov_tensor
        # C-contiguous copies of strided inputs (channels_last, a slice, an expanded view), held in ``feed`` until
        # the run is over: a tensor made with shared_memory reads the array's memory without keeping the array
        # (a temporary copy was freed before the run: wrong answers, silently)
        feed = [array if array.flags.c_contiguous else array.copy() for array in feed]
        try:
            # the request's own calls: half the per-call cost of InferRequest.infer's Python wrapper
            with lock:
                for i, array in enumerate(feed):
                    request.set_input_tensor(i, make_tensor(array, shared_memory=True))
                if self._guard_outputs is None:   # no run can fail on the data (input shapes are checked above)
                    request.infer()
                else:
                    # start_async + wait, not infer, where a run can fail on the data: at one inference thread
                    # OpenVINO's CPU plugin returned from infer without computing anything where a Reshape no
                    # longer fit the data (the outputs kept the last call's values, its guard outputs True: a stale
                    # answer); the asynchronous path raises the error. It costs ~150 us a call (an MLP: 63 -> 210)
                    request.start_async()
                    request.wait()
                # copies: the request's output buffers are overwritten by the next call
                results = [request.get_output_tensor(i).data.copy() for i in range(self._n_outputs)]
        except Exception:  # noqa: BLE001  (the traced program answers, or raises eager's error)
            self._renew(request, shapes)
            return self._after_failure(args, kwargs)
        if not self._answers(results):
            return self._hand_over(*args, **kwargs)
        if self._single:
            answer = torch.from_numpy(results[0])
        else:
            answer = self._outputs([torch.from_numpy(r) for r in results], self._plain_out)
        if hit and shapes not in self.static_checked:   # a fixed-shape model's first answer (static_check.py)
            return static_check.first_answer(self, shapes, answer, args, kwargs)
        return answer

    def drop_static(self, shapes: tuple) -> None:
        """Never run a model compiled for ``shapes`` again: the dynamic model serves them (static_check.py)."""
        self.static_off.add(shapes)
        with self._static_lock:
            if shapes in self._static:
                self._static[shapes] = None
        self.pins.forget(shapes)

    def _renew(self, failed, shapes: tuple) -> None:
        """Replace the compiled model whose request ``failed`` to run. OpenVINO's CPU plugin keeps the shapes it
        inferred in a failed run: every later call of that compiled model, from any of its requests, then failed
        with them (after a failed guard whose traced Reshape no longer fit, the calls where the guard held too).
        The failure path pays one compile of the model; a static-shape model is dropped (compiled again on its
        next use)."""
        with self._lock:
            if self._dynamic is not None and failed is self._dynamic[1]:
                self._dynamic = None   # compiled again on its next use
        with self._static_lock:
            hit = self._static.get(shapes)
            if hit is not None and hit[0] is failed:
                del self._static[shapes]
        self.pins.forget(shapes)

    def _check_shapes(self, tensors, shapes: tuple):
        """The model reshaped to these input shapes (static_shapes compiles it), or the run error when
        OpenVINO's shape inference refuses them (a [3, 5] input to a linear of 16 features): its compiled
        model does not always check them itself (at one inference thread it returned an empty [0, 8] tensor
        for that call). Checked once per new set of shapes, by OpenVINO's
        shape inference on a copy of the model: the first call with new shapes pays it (an MLP ~1 ms, a 4-layer
        TransformerEncoder d256 ~60 ms, BERT-base ~110 ms, one thread, load 5); a refused set is never
        remembered, at most ``MAX_CHECKED`` passing sets are."""
        model = self.model.clone()
        try:
            model.reshape({port.get_any_name(): self._ov.PartialShape(list(shape))
                           for port, shape in zip(model.inputs, shapes)})
        except Exception as e:  # noqa: BLE001  (OpenVINO's check: its last line says what did not match)
            lines = [line for line in str(e).splitlines() if line.strip()]
            raise self._run_error(tensors, RuntimeError(lines[-1] if lines else type(e).__name__)) from None
        if len(self._shapes_ok) >= MAX_CHECKED:
            self._shapes_ok = set()
        self._shapes_ok.add(shapes)
        return model

    @property
    def compiled(self):
        """The model compiled with its dynamic axes, for the shapes no static model serves (compiled on first use)."""
        return self._dynamic_pair()[0]

    @property
    def request(self):
        """The dynamic model's one infer request."""
        return self._dynamic_pair()[1]

    def _dynamic_pair(self):
        pair = self._dynamic
        if pair is None:
            with self._lock:
                pair = self._dynamic
                if pair is None:
                    compiled = self.core.compile_model(self.model, "CPU", self.config)
                    pair = self._dynamic = (compiled, compiled.create_infer_request())
        return pair

    def _compile_for(self, shapes: tuple, reshaped=None):
        """(request, lock) of the model compiled for these input shapes (from ``reshaped`` when the shape check
        just made it); raises where OpenVINO refuses them."""
        model = reshaped
        if model is None:
            model = self.core.read_model(self.proto.SerializeToString(), b"")
            model.reshape({port.get_any_name(): self._ov.PartialShape(list(shape))
                           for port, shape in zip(model.inputs, shapes)})
        compiled = self.core.compile_model(model, "CPU", self.config)
        return compiled.create_infer_request(), threading.Lock()

    def _static_request(self, shapes: tuple, reshaped=None):
        """``static_shapes=True``: (request, lock) of the model compiled for these input shapes (compiled on first
        use), or None when the cache is full or OpenVINO refuses the shapes (the dynamic model runs)."""
        hit = self._static.get(shapes, False)
        if hit is not False:
            return hit
        with self._static_lock:
            if shapes in self._static or len(self._static) >= MAX_STATIC:
                return self._static.get(shapes)
            try:
                hit = self._compile_for(shapes, reshaped)
            except Exception:  # noqa: BLE001  (shapes the model cannot take: the dynamic model reports it)
                hit = None
            self._static[shapes] = hit
            return hit

    def __repr__(self) -> str:
        return f"<OpenVinoProgram {self.signature}{'' if self.precision == 'f32' else ' ' + self.precision}>"


def build(traced, **options) -> OpenVinoProgram:
    """The OpenVINO backend (backends/protocol.py): ``OpenVinoProgram(traced, **options)``."""
    return OpenVinoProgram(traced, **options)


def _refuse_double(graph, signature: str) -> None:
    """OpenVINO's CPU plugin computes float64 in float32 (1e300 comes back as 3.4e38): a program that
    computes in float64 would get another answer than eager, without an error."""
    for v in [*graph.inputs, *(o for n in graph.nodes for o in n.outputs)]:
        if isinstance(v, Value) and getattr(v.type, "dtype", None) is torch.float64:
            where = f" (made at {v.producer.source})" if v.producer is not None and v.producer.source else ""
            raise ValueError(f"optimize_for_inference(backend='openvino'): {signature} computes in float64{where}; "
                             "OpenVINO's CPU plugin computes float64 as float32, which would change the answers. "
                             "Use backend='onnxruntime' or the default torch backend for float64 programs")


def _used_names(graph) -> set:
    """Every value name ``graph`` (an ``onnx.GraphProto``) or a subgraph of it reads, and its outputs."""
    used = {o.name for o in graph.output}
    for node in graph.node:
        used.update(node.input)
        for sub in _subgraphs(node):
            used |= _used_names(sub)
    return used


def _subgraphs(node) -> list:
    return [g for attr in node.attribute for g in ([attr.g] if attr.HasField("g") else []) + list(attr.graphs)]


# The one sequence form OpenVINO was seen to run right: a split into a sequence read item by item, in the main graph
# (export/sequences.py: GPT-2's ``qkv.split(n, dim=2)``; tests/export/test_openvino_backend.py's corpus).
RUNS_RIGHT = frozenset({"SplitToSequence", "SequenceAt"})


def _sequence_node(graph, used: set | None = None, top: bool = True):
    """The first live node of ``graph`` or of a subgraph of it (a ``Loop`` / ``If`` body) that makes or reads an
    ONNX sequence in a form OpenVINO was not seen to run right, or None. Default-deny: only a split read item by
    item in the main graph (``RUNS_RIGHT``) passes. A node none of whose outputs is read is left out: a
    ``SplitToSequence`` whose pieces export/sequences.py took from a plain ``Split`` stays in the model, unread."""
    used = _used_names(graph) if used is None else used
    for node in graph.node:
        live = any(o in used for o in node.output)
        if "Sequence" in node.op_type and live and not (top and node.op_type in RUNS_RIGHT):
            return node
        for sub in _subgraphs(node):
            found = _sequence_node(sub, used, top=False)
            if found is not None:
                return found
    return None


def _refuse_sequences(proto, signature: str) -> None:
    """Refuse a model that uses ONNX sequences other than a split read item by item (``_sequence_node``).
    OpenVINO's CPU plugin ran the grouped product of a mixture of experts (export/grouped_mm.py: a ``Loop``
    appending each expert's rows to a sequence) with the wrong number of rows (24 for 16 tokens), and on Mixtral
    corrupted the heap (the process aborted in ``infer``)."""
    node = _sequence_node(proto.graph)
    if node is not None:
        raise ValueError(f"optimize_for_inference(backend='openvino'): {signature}'s ONNX model uses ONNX sequences "
                         f"({node.op_type} node {node.name!r}), which OpenVINO's CPU plugin does not run right (a "
                         "Loop building a sequence gave outputs of the wrong size, or corrupted memory). Use "
                         "backend='onnxruntime' or the default torch backend for this program")


def _require_native(core, precision: str) -> None:
    """Refuse a lower precision this CPU does not compute natively (OpenVINO would emulate or ignore it)."""
    capabilities = [str(c).upper() for c in core.get_property("CPU", "OPTIMIZATION_CAPABILITIES")]
    if precision.upper() not in capabilities:
        raise ValueError(f"optimize_for_inference(backend='openvino', precision={precision!r}): this CPU has no "
                         f"native {precision} (OpenVINO's CPU capabilities: {', '.join(capabilities)}); "
                         f"use precision='f32'")
