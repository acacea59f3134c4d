"""What the ONNX-runtime backends share: preparing a traced program for export and calling the
exported model with the traced signature (flatten the arguments like the traced program, check
them with clear errors, rebuild the traced output structure).

``prepare(traced, backend)`` refuses a training-mode module, runs tracejit's inference passes and
exports one ONNX model per specialization; ``TracedCall`` is the mixin OrtProgram and OpenVinoProgram
call through; ``with_fallbacks`` puts a call behind the shared policy (backends/fallback.py).
"""
from __future__ import annotations

import sys
import warnings

import torch

from .. import pytree
from ..errors import GuardError, TracerWarning
from ..export.guards import pinning_guards, plan_guards
from ..export.onnx_export import export_onnx, input_names, traced_graph
from .torch_program import optimized
from ..ir import ScalarType, Value
from ..passes.inline import inline_calls
from ..passes.pipeline import program_device
from ..runtime import specialize
from ..runtime.method_compiler import compile_method
from . import intermediate_sizes, state_guards
from .guard_outputs import GuardOutputs, after_run_guards, scalar_slice as _scalar_slice
from .fallback import nonfinite_differs, with_captured_check, with_finite_check
from .input_sums import add_input_sums, finite, no_float_inputs
from ..export.index_checks import OUTPUT as INDEX_OUTPUT


NOT_FINITE = "an input sum was not finite (backends/input_sums.py)"


def prepare(traced, backend: str):
    """``(prepared, [(graph, ONNX proto), ...])``: ``traced`` after tracejit's own inference passes
    (freezing, constant and conv + batch-norm folding, ...: runtimes fuse a Conv with a
    BatchNormalization only when the norm's parameters are plain initializers, which the exported
    norm's are not), and one exported model per specialization of ``forward``: the first trace first,
    then the others oldest first (``specializations.SpecializationChoice`` chooses among them per call).
    A graph with guards only the model can compute (backends/guard_outputs.py) is exported with them as
    boolean outputs, which the program checks after each run (``TracedCall._init_guard_outputs``)."""
    if getattr(traced, "training", False) is True:
        raise RuntimeError(f"optimize_for_inference: {getattr(traced, 'original_name', 'the module')} is in "
                           f"training mode; the {backend} backend is for inference. Call .eval() on it first.")
    device = program_device(traced)
    if device != "cpu":
        raise ValueError(f"optimize_for_inference(backend={backend!r}): the {backend} backend runs on the CPU; this "
                         f"program holds tensors on {device}. Use backend='torch' (or 'cuda_graphs' on CUDA), or "
                         f"move it to the CPU first (.to('cpu')); tracejit.export_onnx writes a device-free model")
    prepared = optimized(traced, in_memory=False)   # the export reads the saved graph: no in-memory kernels
    checks = INDEX_CHECKS.get(backend, "report")   # eager's range of gathered indices (export/index_checks.py)
    spec_set = specialize.sets_of(prepared).get("forward")
    extra = spec_set.extra() if spec_set is not None else []
    first = traced_graph(prepared)
    if not extra:
        return prepared, [(first, _export(prepared, first, first, checks, backend))]
    with warnings.catch_warnings():   # the per-call choice checks every guard: none is left unchecked
        warnings.filterwarnings("ignore", "export_onnx: .* cannot be checked by the ONNX model", TracerWarning)
        models = [(first, _export(prepared, first, first, checks, backend))]
        for spec in extra:
            graph = inline_calls(spec.graph)
            models.append((graph, _export(prepared, spec.graph, graph, checks, backend)))
    return prepared, models


def _export(prepared, graph, inlined, index_checks: str, backend: str):
    """The ONNX model of one specialization: its data-dependent guards as outputs (checked after each run), the
    other size guards left to the check before each run (``with_size_guards``), not checked in the graph too.
    OpenVINO's is loop-free where a form exists (its CPU plugin mis-ran a Loop building a sequence)."""
    return export_onnx(prepared, graph=graph, guard_outputs=bool(after_run_guards(inlined)), check_guards=False,
                       index_checks=index_checks, loop_free=backend == "openvino")


# how each backend's model keeps eager's range check on gathered indices (export/index_checks.py): onnxruntime's
# gathers fail a run past the end, so a refused negative index is made past the end; any other backend reads an output
INDEX_CHECKS = {"onnxruntime": "raise"}


def with_fallbacks(program, traced, graph, call):
    """``call`` behind the shared fallback policy (backends/fallback.py): the traced program answers a
    call whose captured tensors changed or whose non-finite input this backend would compute otherwise (checked
    by the model's input sums after the run where it has them: ``TracedCall._init_input_sums``)."""
    if program._finite_in_torch:
        call = with_finite_check(program.backend, graph, traced, call)
    return with_captured_check(program, getattr(traced, "graph", None), traced, call)


def with_size_guards(program, traced, graph, call):
    """``call``, or, when the trace holds guards that the ONNX model cannot check (export/guards.py:
    ``(n - 1).bit_length()``, a float computed from sizes used as a key; Python state), a call that first checks
    them and, when one fails, hands the call to the traced program (``_safe``), whose guards decide: a live object
    traces again, a loaded one raises the GuardError naming the line.

    The size guards are checked by a generated function holding only them and the scalar size math they read
    (``aten::size.int`` of inputs, int / float math, ``sym_math``): it reads sizes, never data. A guard on
    the size of an intermediate tensor is checked by the slice of the program it reads, run on meta tensors of
    the call's shapes (intermediate_sizes.py; a signature that passed is remembered). A value guard that reads a
    tensor's values, and one whose slice has a data-dependent shape (``nonzero``), are the model's guard outputs,
    checked after the run (backends/guard_outputs.py). The guards on Python and torch state (a config attribute, a
    module global, ``torch.is_grad_enabled()``: no function of the arguments) are a check of their own, run on
    every call, first, outside any ``no_grad``."""
    state_graph, built = _check_graphs(graph, program.backend)
    memory = getattr(graph, "memory_checks", None)   # module settings held beside the graph (state_guards.py)
    if built is None and state_graph is None:
        return call if memory is None else _with_settings_check(program, memory, call)
    display = program.signature.split("(")[0]
    compiled_state = None if state_graph is None else compile_method(
        state_graph, "forward", f"{program.backend}_state_guards", guards=True, display=display)
    state_check = state_guards.with_memory_checks(compiled_state, memory, display)
    check, on_meta, computes = None, False, False
    if built is not None:
        checked_graph, on_meta = built
        computes = on_meta   # the slice computes tensors (on meta ones, else on the call's own under no_grad)
        if on_meta:
            intermediate_sizes.own_tensors(checked_graph, traced, meta=True)
        check = compile_method(checked_graph, "forward", f"{program.backend}_size_guards", guards=True,
                               display=display)
        if on_meta and not intermediate_sizes.runs_on_meta(check, checked_graph):
            on_meta = False   # the slice on the call's own tensors (intermediate_sizes.py)
            checked_graph, _ = _check_graphs(graph, program.backend)[1]
            intermediate_sizes.own_tensors(checked_graph, traced, meta=False)
            check = compile_method(checked_graph, "forward", f"{program.backend}_size_guards", guards=True,
                                   display=display)
    program.size_guards, program.state_guards = check, compiled_state   # (the generated checks, to read)
    passed = program.size_guard_signatures = intermediate_sizes.PassedSignatures()
    if on_meta:
        passed.remember_traced(check, checked_graph)

    def guarded(*args, **kwargs):
        try:
            if state_check is not None:
                state_check(None)
            if check is None:
                pass
            elif on_meta:
                passed.check(check, args, kwargs)
            elif computes:
                with torch.no_grad():
                    check(None, *args, **kwargs)
            else:   # sizes only: no autograd to turn off (1.2 us a call)
                check(None, *args, **kwargs)
        except GuardError:
            # the traced program's guards decide, as for a False guard output (guard_outputs.py): a live
            # object traces again (eager's answer), a loaded one raises the GuardError naming the line
            return program._hand_over(*args, **kwargs)
        except TypeError:   # the checks take the traced signature: a keyword left out fails them first
            program._tensors(args, kwargs)   # the call's own error: what the trace had, what came
            raise
        return call(*args, **kwargs)
    return guarded


SETTING_CHANGED = "a setting the trace read beside the graph changed (backends/state_guards.py)"


def _with_settings_check(program, memory, call):
    """``call`` after ``memory``'s check (``Graph.memory_checks``: a module's settings, module-level tensors), the
    program's only Python-state check: where one changed, the traced program's guards decide (``_hand_over``).
    ``__wrapped__`` is ``call``, the closure that runs the model."""
    changed = memory.changed

    def settings_checked(*args, **kwargs):
        if changed():
            program._refused = SETTING_CHANGED
            return program._hand_over(*args, **kwargs)
        return call(*args, **kwargs)
    settings_checked.__wrapped__ = call
    return settings_checked


def _check_graphs(graph, backend: str):
    """``(a graph of the Python-state guards alone or None, (a graph holding only the size guards ONNX cannot check
    and what they read, whether it computes tensors) or None)``."""
    checked_graph = inline_calls(graph)   # a new, flat graph
    state_graph = state_guards.state_graph(checked_graph)
    _, unchecked = plan_guards(checked_graph, guard_outputs=True)
    after_run = {id(g) for g in after_run_guards(checked_graph)}   # the model's guard outputs check these
    unchecked = [g for g in unchecked if id(g) not in after_run and not state_guards.python_state(g)]
    producers = {id(v): n for n in checked_graph.nodes for v in n.outputs if v is not None}
    kept, checks = {}, []
    for guard in unchecked:
        slice_ = _scalar_slice(guard, producers, ScalarType)
        if slice_ is None:   # the size of an intermediate tensor: evaluated on meta tensors, or refused
            slice_ = intermediate_sizes.tensor_slice(guard, producers, checked_graph.nodes)
            intermediate_sizes.refuse_data_dependent(guard, slice_.values(), backend)
        kept.update(slice_)
        checks.append(guard)
    if not checks:
        return state_graph, None
    for guard in pinning_guards(checked_graph):   # scalar guards on input sizes: checked first, in order
        kept.update(_scalar_slice(guard, producers, ScalarType) or {})
        checks.append(guard)
    keep = {id(g) for g in checks} | set(kept)
    checked_graph.nodes = [n for n in checked_graph.nodes if id(n) in keep]
    checked_graph.outputs, checked_graph.out_spec = [], pytree.flatten(())[1]
    return state_graph, (checked_graph, intermediate_sizes.reads_tensors(kept.values()))


class TracedCall:
    """The traced call signature of an exported program; ``_init_call`` fills it in."""

    backend = "onnx"
    _guard_outputs = None   # GuardOutputs where the model computes guards (_init_guard_outputs)
    _n_sums = 0   # the model's input sum outputs, after every other output (_init_input_sums)
    _n_index = 0   # 1 where the model reports its gathered indices' range, before the sums (_init_guard_outputs)
    _finite_in_torch = True   # the arguments are checked for NaN / inf in torch before the run (_init_input_sums)

    def _init_call(self, traced, graph) -> None:
        self.graph = graph
        self._names = input_names(graph)
        self._n_inputs = len(graph.inputs)
        self._input_index = {id(v): i for i, v in enumerate(graph.inputs)}
        self._in_spec = graph.in_spec
        self._leaf_slots = [self._input_index.get(id(x)) if isinstance(x, Value) else None
                            for x in graph.input_leaves]
        args_spec, kwargs_spec = graph.in_spec.children
        # fast path: positional tensors only, one graph input each, in order
        self._flat = (kwargs_spec.num_leaves == 0 and all(c.kind == "leaf" for c in args_spec.children)
                      and self._leaf_slots == list(range(self._n_inputs)))
        self._kw_keys = kwargs_spec.keys
        self._out_spec = graph.out_spec
        self._out_leaves = list(graph.outputs)
        self.signature = signature(traced, graph)
        self._safe = traced   # answers the calls this backend cannot (backends/fallback.py)
        self.handed_over = 0   # calls the traced program answered (_hand_over); auto_backend.py reads it
        self.hand_over_reason = ""   # why the last one was (_hand_over): auto_backend.py's report says it
        self._refused = ""

    def _init_guard_outputs(self, proto) -> None:
        """Check the model's guard outputs (export/guard_outputs.py) after each run, where it has some."""
        checks = GuardOutputs(proto, self.graph, self.signature.split("(")[0])
        self._guard_outputs = checks if checks.count else None
        self._n_index = int(any(o.name == INDEX_OUTPUT for o in proto.graph.output))

    def _init_input_sums(self, proto) -> None:
        """Where this backend computes some op of the graph otherwise than eager on NaN / inf, the model ``proto``
        (not yet serialized) gets an input sum output per floating-point input (backends/input_sums.py): a run whose
        sums are not finite is answered by the traced program (``_safe``)."""
        differs = nonfinite_differs(self.backend, self.graph)
        self._n_sums = add_input_sums(proto) if differs else 0
        # no sum and no input that can hold NaN (token ids, masks): nothing to check (1 us a call on BERT)
        self._finite_in_torch = differs and not self._n_sums and not no_float_inputs(proto)

    def _tensors(self, args, kwargs):
        """The graph's input tensors, in order, from a call's arguments."""
        if self._flat and not kwargs and len(args) == self._n_inputs:
            return args
        return self._flatten(args, kwargs)

    def _answers(self, results: list) -> bool:
        """Do the runtime's ``results`` (a list) answer the call? Not where an input sum is not finite (input_sums.py)
        or a guard output is False (guard_outputs.py): the traced program (``_safe``) answers those calls, its guards
        computed by torch. The input sums are dropped from ``results``."""
        if self._n_sums:
            if not finite(results, self._n_sums):
                self._refused = NOT_FINITE
                return False
            del results[-self._n_sums:]
        if self._n_index:   # an index out of eager's range: eager raises IndexError (index_checks.py)
            if not results.pop(-1):
                self._refused = "an index was outside eager's range (index_checks.py)"
                return False
        if self._guard_outputs is None or self._guard_outputs.hold(results):
            return True
        self._refused = "a guard output was False: " + self._guard_outputs.first_failed(results)
        return False

    def _hand_over(self, *args, **kwargs):
        """The traced program (``_safe``) answers this call: the runtime's answer was dropped (a guard output
        failed, an input sum is not finite) or the run failed on a guard. Counted in ``handed_over`` (not
        atomically: a count to read, not to rely on under threads)."""
        self.handed_over += 1
        error = sys.exc_info()[1]   # called inside an except: the runtime's error, or a size guard's GuardError
        self.hand_over_reason = (f"{type(error).__name__}: {str(error).splitlines()[0][:240] if str(error) else ''}"
                                 if error is not None else self._refused)
        self._refused = ""
        return self._safe(*args, **kwargs)

    def _hand_over_sums(self, *args, **kwargs):
        """``_hand_over`` for a run whose input sums were not finite (the fast call paths check them inline)."""
        self._refused = NOT_FINITE
        return self._hand_over(*args, **kwargs)

    def _outputs(self, outs, plain: bool):
        """The traced output structure around the runtime's output tensors ``outs`` (guard outputs dropped)."""
        if self._guard_outputs is not None:
            outs = self._guard_outputs.strip(outs)
        if plain:
            return pytree.unflatten(self._out_spec, outs) if self._out_spec is not None else outs[0]
        it = iter(outs)
        leaves = [next(it) if isinstance(o, Value) else o for o in self._out_leaves]
        return pytree.unflatten(self._out_spec, leaves)

    def _after_failure(self, args, kwargs):
        """A call whose run failed, or whose shapes the runtime refused, is the traced program's (``_safe``): its
        guards decide and its ops compute in the call's dtypes (another dtype, rank or pinned size than the
        trace's; a guard output that failed where the traced branch's shapes no longer fit the data: Mask R-CNN
        pastes each mask at the traced box size), so the answer is eager's, or eager's own error with the traced
        line (an index out of range: IndexError, as eager), or the GuardError naming the line (a loaded program);
        never the runtime's message about ONNX nodes."""
        return self._hand_over(*args, **kwargs)

    def _run_error(self, tensors, e: Exception) -> RuntimeError:
        """The runtime's errors name ONNX nodes, not the user's call: say which call failed."""
        return RuntimeError(f"{self.signature}: {self.backend} could not run this call with {describe(tensors)}: {e}")

    def _checked_feed(self, tensors) -> dict:
        feed = {}
        for name, t in zip(self._names, tensors):
            if not isinstance(t, torch.Tensor):
                raise TypeError(f"{self.signature}: argument '{name}' should be a Tensor; got {type(t).__name__}")
            if t.device.type != "cpu":   # eager would answer on that device: a CPU engine's answer is not eager's
                raise RuntimeError(f"{self.signature}: the {self.backend} backend runs on the CPU and takes CPU "
                                   f"tensors; argument '{name}' is on {t.device}. Move the inputs to the CPU, or "
                                   f"use optimize_for_inference(backend='torch' or 'cuda_graphs') for a "
                                   f"{t.device.type} program")
            feed[name] = t.detach().numpy()
        return feed

    def _flatten(self, args, kwargs) -> list:
        if set(kwargs) != set(self._kw_keys):
            raise TypeError(f"{self.signature} was called with keyword arguments {sorted(kwargs)}; the trace had "
                            f"{sorted(self._kw_keys)}")
        leaves, spec = pytree.flatten((tuple(args), {k: kwargs[k] for k in self._kw_keys}))
        if spec != self._in_spec:
            raise TypeError(f"{self.signature} was called with arguments of another structure: "
                            f"{spec.describe(_kind(x) for x in leaves)}")
        tensors = [None] * self._n_inputs
        for slot, leaf, traced_leaf in zip(self._leaf_slots, leaves, self.graph.input_leaves):
            if slot is None:
                if leaf != traced_leaf:
                    raise ValueError(f"{self.signature}: an argument was traced as the constant {traced_leaf!r}; "
                                     f"got {leaf!r}. Trace again to use another value.")
            else:
                tensors[slot] = leaf
        return tensors


def signature(traced, graph) -> str:
    sig = getattr(traced, "signature", None)
    if sig is None:   # a module: its installed forward carries the signature text
        sig = getattr(getattr(traced, "forward", None), "signature", "forward(...)")
    return sig


def _kind(x) -> str:
    return "Tensor" if isinstance(x, torch.Tensor) else type(x).__name__


def describe(tensors) -> str:
    return ", ".join(f"Tensor(shape={tuple(t.shape)}, dtype={t.dtype})" if isinstance(t, torch.Tensor) else repr(t)
                     for t in tensors)
