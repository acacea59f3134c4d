"""The torch program every backend starts from: ``freeze`` (torch.jit's name: parameters and buffers become
constants) and ``optimized`` (freeze, then the inference passes of passes/pipeline.py, with the numpy / oneDNN
kernels unless ``in_memory=False``). The torch backend (torch_cpu.py) returns it; the ONNX backends export it
(onnx_call.py); cuda_graphs.py replays it. It imports no backend and not the backend table (protocol.py), so
the table's modules can import it without a cycle; ``tracejit.optimize_for_inference`` (inference.py) is the
front door that picks the backend.
"""
from __future__ import annotations

import types

from torch import nn

from ..ops.names import CALL_MODULE
from ..passes.freeze import freeze_attributes
from ..passes.graph_copy import copy_graph
from ..passes.lowered import Lowered
from ..passes import pipeline
from ..passes.pipeline import INLINE_PASSES, in_memory_passes, lower, run_passes, runs_on_cpu
from ..runtime import specialize
from ..runtime.traced import TracedFunction, TracedModule
from .cuda_pass_choice import lower_with_cuda_timing
from .fallback import captured_tensors, live_source
from .region_choice import lower_with_measured_regions
from .torch_kernels import FastTracedFunction, FastTracedModule, compile_for_inference


def freeze(traced, preserved_attrs=None):
    """A new traced module whose parameters and buffers (except ``preserved_attrs``) are constants.

    The module must be in eval mode (a frozen program has no training mode). A TracedFunction
    has nothing to freeze and is returned as a new TracedFunction over a copy of its graph.
    """
    if isinstance(traced, TracedFunction):
        out = _function_from(traced, copy_graph(traced.graph))
        out._live = live_source(traced)
        return out
    if not isinstance(traced, TracedModule):
        raise TypeError(f"freeze expects a traced module or function (tracejit.trace); got {type(traced).__name__}")
    if traced.training:
        raise RuntimeError(f"freeze: {traced.original_name} is in training mode; freezing is only for inference. "
                           "Call .eval() on it first.")
    preserved = tuple(preserved_attrs or ())
    for path in preserved:
        _lookup(traced, path)   # a clear error for a misspelt name
    frozen = _frozen_graph(traced._method("forward").graph, traced, preserved)
    out = _module_from(traced, frozen, preserved)
    _keep_specializations(traced, out, lambda g: _frozen_graph(g, traced, preserved), optimize=False)
    out.__dict__["_live"] = live_source(traced)   # answers a call no specialization fits (fallback.hand_over)
    return out


def optimized(traced, in_memory: bool = True):
    """The torch backend's program; ``in_memory=False`` skips ``IN_MEMORY_PASSES`` (numpy and oneDNN
    kernels), for the ONNX backends, which export the saved graph only. A program torch runs keeps eager's
    arithmetic where it decides on computed values (``pipeline.exact_only``); an exported one gets every
    inference pass: its engine fuses and reorders the arithmetic anyway (onnxruntime folds a batch norm into
    its conv at every optimization level), so leaving ours out would make it no closer to eager."""
    passes = run_passes if in_memory else _every_inference_pass
    if isinstance(traced, TracedModule):
        frozen = freeze(traced) if not _is_frozen(traced) else traced
        source = frozen._method("forward").graph
        out = _module_from(frozen, passes(source), getattr(frozen, "_preserved_attrs", ()), optimize=in_memory,
                           captured=captured_tensors(source))
        out.__dict__["_unoptimized"] = frozen
        out.__dict__["_live"] = live_source(frozen)
        _keep_specializations(frozen, out, passes, optimize=in_memory)
        return out
    if isinstance(traced, TracedFunction):
        out = _function_from(traced, passes(traced.graph), optimize=in_memory)
        out._captured = captured_tensors(traced.graph)
        out._unoptimized = traced
        out._live = live_source(traced)
        _keep_specializations(traced, out, passes, optimize=in_memory)
        return out
    raise TypeError(f"optimize_for_inference expects a traced module or function; got {type(traced).__name__}")


def _every_inference_pass(graph):
    return run_passes(graph, pipeline.INFERENCE_PASSES)   # read at each call, as run_passes reads it


def _frozen_graph(graph, traced, preserved):
    """``graph`` inlined (a pass of its own) and frozen, both stamped in ``.passes``."""
    flat = run_passes(graph, INLINE_PASSES) if any(n.op == CALL_MODULE for n in graph.nodes) else graph
    frozen = freeze_attributes(flat, lambda path: _lookup(traced, path), preserved)
    frozen.training = False
    frozen.passes = tuple(flat.passes) + (("freeze", len(flat.nodes), len(frozen.nodes)),)
    return frozen


def _keep_specializations(source, out, transform, optimize: bool) -> None:
    """Give ``out`` (frozen or optimized from ``source``) every specialization ``source`` chooses
    from, each transformed the same way (``transform(graph)``) and chosen per call by its guards.
    Specializations made in training mode are left out of a frozen program (eval mode only)."""
    sets = specialize.sets_of(source)
    if isinstance(out, TracedModule):
        specialize.enable_for_module(out, None)
    else:
        specialize.enable_for_function(out, None)
    target = specialize.sets_of(out).get("forward")
    if "forward" not in sets or target is None:
        return
    label = getattr(source, "original_name", None) or source.__name__
    for k, spec in enumerate(sets["forward"].extra(), 1):
        if isinstance(out, TracedModule) and _traced_in_train_mode(spec.graph):
            continue
        saved = transform(spec.graph)
        if isinstance(out, TracedModule):
            saved.training = False
        held = list(out.parameters()) + list(out.buffers()) if isinstance(out, TracedModule) else []
        display = None if isinstance(out, TracedModule) else label
        lowered = _lowered(out, saved, held, f"frozen.{label}#{k + 1}", display) if optimize else Lowered(saved)
        fn = compile_for_inference(saved, lowered, "forward", f"frozen.{label}#{k + 1}", display=display)
        target.add(specialize.Specialization("forward", fn, spec.reason, spec.source))


def _traced_in_train_mode(graph) -> bool:
    return any(n.op == "tracejit::guard" and n.attrs.get("test") == "training" and n.attrs.get("expected") is True
               and not n.attrs.get("path") for n in graph.nodes)


def _is_frozen(traced) -> bool:
    return getattr(traced, "_frozen", False)


def _lookup(module: nn.Module, path: str):
    obj = module
    for part in path.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise AttributeError(f"{type(module).__name__} has no attribute {path!r}") from None
    return obj


def _module_from(traced: TracedModule, graph, preserved, optimize: bool = False, captured=()) -> TracedModule:
    """A TracedModule running ``graph`` (after ``IN_MEMORY_PASSES`` when ``optimize``); it holds
    only the preserved parameters / buffers."""
    out = FastTracedModule(traced.original_name)
    out.training = False
    out.ledger = traced.ledger
    out._frozen = True
    out._preserved_attrs = tuple(preserved)
    out.__dict__["_captured"] = captured
    for path in preserved:
        _attach(out, traced, path)
    graph.training = False
    held = list(out.parameters()) + list(out.buffers())
    label = f"frozen.{traced.original_name}"
    lowered = _lowered(out, graph, held, label) if optimize else Lowered(graph)
    out._install("forward", compile_for_inference(graph, lowered, "forward", label))
    return out


def _lowered(out, graph, held, label: str, display=None) -> Lowered:
    """``graph``'s lowered program for ``out``: on CUDA the passes kept by timing the whole program each way
    (cuda_pass_choice.py); on the CPU a module's conv regions chosen by timing the whole program
    (region_choice.py), a function's by the region timing alone."""
    passes = in_memory_passes(graph, held)
    if isinstance(out, TracedModule):
        bind = lambda lowered: types.MethodType(   # noqa: E731
            compile_for_inference(graph, lowered, "forward", label, display=display), out)
    else:
        bind = lambda lowered: FastTracedFunction.from_compiled(   # noqa: E731
            label, compile_for_inference(graph, lowered, "forward", label, display=display), ())
    if passes and not runs_on_cpu(graph, held):
        return lower_with_cuda_timing(graph, passes, bind)
    if not isinstance(out, TracedModule):
        return lower(graph, passes)
    return lower_with_measured_regions(graph, passes, bind)


def _attach(out: nn.Module, source: nn.Module, path: str) -> None:
    *mods, last = path.split(".")
    dst, src = out, source
    for m in mods:
        src = src._modules[m]
        if m not in dst._modules:
            dst._modules[m] = TracedModule(type(src).__name__ if not isinstance(src, TracedModule)
                                           else src.original_name)
            dst._modules[m].training = False
        dst = dst._modules[m]
    if last in src._parameters:
        dst._parameters[last] = src._parameters[last]
    elif last in src._buffers:
        dst._buffers[last] = src._buffers[last]
    else:
        raise AttributeError(f"preserved attribute {path!r} is not a parameter or buffer")


def _function_from(traced: TracedFunction, graph, optimize: bool = False) -> TracedFunction:
    lowered = _lowered(None, graph, (), traced.__name__, traced.__name__) if optimize else Lowered(graph)
    fn = compile_for_inference(graph, lowered, "forward", traced.__name__, display=traced.__name__)
    return FastTracedFunction.from_compiled(traced.__name__, fn, traced.ledger)
