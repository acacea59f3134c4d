"""``tracejit.export_onnx``: a traced program as an ONNX model, from tracejit's own IR.

The inlined graph of the traced method is lowered node by node (lowering.py) into an onnx-ir
graph through onnxscript's torch_lib; every input dimension becomes a named dynamic axis
(``<input>_dim<i>``), since the generated program itself accepts any size the ops accept (sizes
the trace froze are in its ledger). The model is checked with ``onnx.checker`` (full check) and
ONNX shape inference before it is returned or written.
"""
from __future__ import annotations

import os

import torch

from ..ir import Graph, Value, iter_values
from ..passes.inline import inline_calls
from ..program import Program
from ..runtime.traced import program_of
from ._deps import require
from . import guard_checks
from .annotate import SourceNotes
from .dtypes import onnx_dtype
from .errors import ExportError
from .guard_outputs import METADATA_KEY as GUARDS_METADATA, add_outputs as add_guard_outputs
from .guard_outputs import check_supported as checked_guard_form
from .index_checks import MODES as INDEX_MODES, add_output as add_index_output
from .guards import plan_guards, refuse_changed_globals, warn_pinned_batches, warn_unchecked
from .lowering import Lowering
from .model_check import check_and_infer
from .recorder import NamingGraphBuilder as GraphBuilder, Recorder
from onnxscript.onnx_opset import opset18 as op  # noqa: E402  (required by .lowering above: the onnx extra)
from .batch_norm_folding import fold_batch_norms
from .strided_slices import deinterleave_strided_slices
from .tidy import drop_identity_transposes, drop_unused_pool_indices, fold_constants, keep_pads_out_of_max_pool

DEFAULT_OPSET = 18   # torch_lib's functions are written against opset 18
# every input dimension becomes a dynamic axis, and each size read of one an ONNX Shape node: a
# file with 2,400 inputs of rank 8 (19,200 axes) took 13 s to export (onnxscript's builder costs
# ~0.3 ms a node); real programs have a few inputs of a few dimensions (docs/SECURITY.md)
MAX_INPUT_DIMENSIONS = 1024
# the default node budget of exporting a program loaded from a file (docs/SECURITY.md, "the export bound"):
# onnxscript lowers ~0.3-0.7 ms a node, so a valid file of 50,000 nodes took 15-35 s. Measured, inlined
# tracejit nodes: BERT-base 727 (1,192 ONNX nodes), ResNet-50 549 (440 ONNX nodes); 10,000 is over 10x
# both. A program traced in this process is the user's own and has no budget unless ``max_nodes`` asks.
MAX_FILE_NODES = 10_000


def export_onnx(traced, f=None, opset: int | None = None, *, method: str = "forward", doc_strings: bool = False,
                graph: Graph | None = None, max_nodes: int | None = None, guard_outputs: bool = False,
                check_guards: bool = True, index_checks: str | None = None, loop_free: bool = False):
    """Write ``traced`` (a Program, tracejit/program.py, or a TracedModule / TracedFunction, whose Program is
    exported: ``program_of``) as an ONNX model to ``f`` (a path or a
    binary file object; None: only return it). Returns the ``onnx.ModelProto``. ``doc_strings``:
    each node's doc string names its ATen op, source line and ledger entries (annotate.py). ``graph``:
    export this graph of ``traced``'s (one of its specializations) instead of ``method``'s first trace.
    ``max_nodes``: refuse (ExportError) a program whose method has more nodes, submodule calls inlined;
    by default ``MAX_FILE_NODES`` for a program loaded from a file (tracejit.load), no limit otherwise.
    ``guard_outputs``: each guard the model cannot check at its entry (a value read in Python, the size of a
    tensor whose shape depends on the data, size math of inputs) becomes a boolean output
    ``tracejit_guard_<k>``, after the program's outputs, True where the guard holds; the metadata
    ``tracejit.guard_outputs`` names each one's source line. A caller must check them: where one is False, the
    other outputs are the traced branch's answer (export/guard_outputs.py). By default value guards refuse the
    export. ``check_guards``: the model checks the size guards it cannot check at its entry itself (a run where one
    fails stops with an error naming it: guard_checks.py); False leaves them unchecked, listed and warned about
    (for a caller that checks them before each run: the onnxruntime / OpenVINO backends). ``index_checks``
    (None, "raise" or "report"): how the model keeps eager's range check on gathered indices (export/index_checks.py:
    the backends' models). ``loop_free``: no ``Loop`` building an ONNX sequence where another form exists (a
    mixture of experts' grouped product computes every group and picks each row's: export/grouped_mm.py), for
    runtimes that do not run such loops right (OpenVINO's CPU plugin).

    >>> import torch, tracejit
    >>> traced = tracejit.trace(lambda x: torch.relu(x) * 2, torch.randn(2, 3))
    >>> proto = tracejit.export_onnx(traced)
    >>> [d.dim_param for d in proto.graph.input[0].type.tensor_type.shape.dim]
    ['x_dim0', 'x_dim1']
    """
    onnx = require("onnx")
    if graph is None:   # a method's own trace, as users export it (a backend's per-specialization graphs: per call)
        refuse_changed_globals(method_graph(program_of_traced(traced), method))
    proto = require("onnx_ir").serde.serialize_model(build_model(traced, opset, method=method,
                                                                      doc_strings=doc_strings, graph=graph,
                                                                      max_nodes=max_nodes,
                                                                      guard_outputs=guard_outputs,
                                                                      check_guards=check_guards,
                                                                      index_checks=index_checks,
                                                                      loop_free=loop_free))
    try:
        proto = check_and_infer(onnx, proto)   # on a copy without the weights' bytes (model_check.py)
    except Exception as e:  # noqa: BLE001  (named by its class too: a MemoryError's message is empty)
        raise ExportError(f"the exported ONNX model does not pass onnx.checker / shape inference: "
                          f"{type(e).__name__}{': ' if str(e) else ''}{e} ({proto.ByteSize() / 2**20:.0f} MB)") from e
    if f is not None:
        if isinstance(f, (str, os.PathLike)):
            onnx.save(proto, os.fspath(f))
        else:
            f.write(proto.SerializeToString())
    return proto


def program_of_traced(traced) -> Program:
    """The Program export reads: ``traced`` itself, or a traced object's (tracejit/program.py)."""
    if isinstance(traced, Program):
        return traced
    try:
        return program_of(traced)
    except TypeError:
        raise TypeError(f"export needs a traced module or function (tracejit.trace / trace_module); got "
                        f"{type(traced).__name__}") from None


def traced_graph(traced, method: str = "forward") -> Graph:
    """The inlined graph of ``method`` of ``traced`` (a Program or a traced object; a new Graph: the user's
    is never changed)."""
    return inline_calls(method_graph(traced, method))


def method_graph(traced, method: str = "forward") -> Graph:
    """The graph of ``method`` of ``traced`` (a Program or a traced object), its submodule calls not inlined."""
    program = program_of_traced(traced)
    if method not in program.root.method_names:
        raise TypeError(f"export needs a traced module or function (tracejit.trace / trace_module); got "
                        f"{type(traced).__name__} without a traced {method!r}")
    return program.root.method(method)


def inlined_size(graph: Graph) -> int:
    """The nodes ``graph`` has with every submodule call inlined, counted without inlining (each callee
    graph once: a file's calls may expand to millions of nodes)."""
    sizes: dict[int, int] = {}
    stack = [graph]
    while stack:
        g = stack[-1]
        callees = [g.callee(n) for n in g.nodes if n.op == "tracejit::call_module"]
        todo = [c for c in callees if id(c) not in sizes]
        if todo:
            stack.extend(todo)
            continue
        stack.pop()
        sizes[id(g)] = len(g.nodes) - len(callees) + sum(sizes[id(c)] for c in callees)
    return sizes[id(graph)]


def check_node_count(graph: Graph, max_nodes: int | None = None) -> Graph:
    """``graph`` if its inlined size is within ``max_nodes`` (default: ``MAX_FILE_NODES`` for a program
    loaded from a file, whose graphs carry a call budget; no limit for one traced here), else ExportError."""
    limit = max_nodes if max_nodes is not None else (
        MAX_FILE_NODES if getattr(graph, "call_budget", None) is not None else None)
    if limit is not None:
        n = inlined_size(graph)
        if n > limit:
            raise ExportError(f"the program has {n} nodes (submodule calls inlined), more than the {limit} ONNX "
                              f"export takes from a file by default (about 0.5 ms a node); raise the limit with "
                              f"--max-nodes N (export_onnx(..., max_nodes=N))")
    return graph


def input_names(graph: Graph) -> list[str]:
    """An ONNX input name per graph input: the traced callable's argument name for that leaf."""
    names = {}
    for leaf, arg_name in zip(graph.input_leaves, graph.arg_names or ()):
        if isinstance(leaf, Value):
            names[id(leaf)] = arg_name
    out, used = [], set()
    for i, v in enumerate(graph.inputs):
        base = _identifier(names.get(id(v)) or v.hint or f"input_{i}")
        name, k = base, 1
        while name in used:
            name, k = f"{base}_{k}", k + 1
        used.add(name)
        out.append(name)
    return out


def _check_input_dimensions(graph: Graph) -> None:
    dims = sum(len(v.type.shape) for v in graph.inputs if hasattr(v.type, "shape"))
    if dims > MAX_INPUT_DIMENSIONS:
        raise ExportError(f"the program's {len(graph.inputs)} inputs have {dims} dimensions in all; ONNX export "
                          f"makes each a dynamic axis and takes at most {MAX_INPUT_DIMENSIONS}")


def _identifier(text: str) -> str:
    out = "".join(c if c.isalnum() or c == "_" else "_" for c in str(text))
    return out if out and not out[0].isdigit() else "_" + out


def build_model(traced, opset: int | None = None, *, method: str = "forward", doc_strings: bool = False,
                graph: Graph | None = None, max_nodes: int | None = None, guard_outputs: bool = False,
                check_guards: bool = True, index_checks: str | None = None, loop_free: bool = False):
    """The onnx-ir Model of ``traced``'s ``method`` (or of ``graph``, one of its specializations);
    ``max_nodes``: see export_onnx."""
    if opset is not None and not (isinstance(opset, int) and opset >= DEFAULT_OPSET):
        raise ValueError(f"export_onnx: opset {opset!r} is not supported; use {DEFAULT_OPSET} or later "
                         "(onnxscript's torch_lib writes opset 18)")
    if max_nodes is not None and not (isinstance(max_nodes, int) and max_nodes > 0):
        raise ValueError(f"export_onnx: max_nodes must be a positive int; got {max_nodes!r}")
    program = program_of_traced(traced)
    graph = inline_calls(check_node_count(method_graph(program, method) if graph is None else graph, max_nodes))
    _check_input_dimensions(graph)
    ir = require("onnx_ir")

    pinned, unchecked = plan_guards(graph, guard_outputs=guard_outputs)
    if guard_outputs:
        for guard in unchecked:
            checked_guard_form(guard)
    onnx_graph = ir.Graph([], [], nodes=[], opset_imports={"": DEFAULT_OPSET}, name=method)
    builder = GraphBuilder(onnx_graph)
    lowering = Lowering(builder, _tensor_source(program, graph), graph)
    lowering.loop_free = loop_free
    if guard_outputs:
        lowering.guard_values = {id(g): None for g in unchecked}
    else:   # the graph checks each size guard it can compute; the others are listed (guard_checks.py)
        checked = [g for g in unchecked if check_guards and guard_checks.has_form(g)]
        unchecked = [g for g in unchecked if not (check_guards and guard_checks.has_form(g))]
        lowering.guard_checks = guard_checks.GuardChecks(checked, graph)
    if index_checks not in (None, *INDEX_MODES):
        raise ValueError(f"export_onnx: index_checks must be None, 'raise' or 'report'; got {index_checks!r}")
    lowering.index_checks = index_checks
    notes = SourceNotes(onnx_graph, program, graph, method) if doc_strings else None
    for k, (v, name) in enumerate(zip(graph.inputs, input_names(graph))):
        if not hasattr(v.type, "shape"):
            raise ExportError(f"input '{name}' is a traced Python number ({v.type}); ONNX export needs tensor inputs")
        dims = [pinned.get((k, i), ir.SymbolicDim(f"{name}_dim{i}")) for i in range(len(v.type.shape))]
        lowering.env[id(v)] = builder.input(name, dtype=onnx_dtype(v.type.dtype), shape=ir.Shape(dims))
    with Recorder(builder):
        for node in graph.nodes:
            lowering.lower(node)
            if notes is not None:
                notes.after(node)
        _add_outputs(builder, lowering, graph)
        if guard_outputs and unchecked:
            guards_text = add_guard_outputs(builder, [lowering.guard_values[id(g)] for g in unchecked], unchecked)
        if lowering.index_flags:
            add_index_output(builder, lowering.index_flags)
    drop_unused_pool_indices(onnx_graph)
    keep_pads_out_of_max_pool(onnx_graph)
    drop_identity_transposes(onnx_graph)   # torch_lib's index / slice_scatter on the first axes (tidy.py)
    model = ir.Model(onnx_graph, ir_version=10, producer_name="tracejit")
    fold_constants(model)
    deinterleave_strided_slices(onnx_graph)   # every k-th element of a last axis: a transposed row (strided_slices.py)
    fold_batch_norms(onnx_graph)   # an eval-mode norm after a conv: into its weights, as torch.onnx does
    if notes is not None:
        model.doc_string = notes.model_doc(program)
    if guard_outputs and unchecked:
        model.metadata_props[GUARDS_METADATA] = guards_text
    if not guard_outputs and checked:
        model.metadata_props[guard_checks.METADATA_KEY] = guard_checks.metadata(checked)
    unchecked_text = "" if guard_outputs else warn_unchecked(unchecked)
    pinned_text = warn_pinned_batches(graph, pinned, input_names(graph)) if check_guards else ""
    if pinned_text:
        model.metadata_props["tracejit.pinned_batches"] = pinned_text
    if unchecked_text:
        model.metadata_props["tracejit.unchecked_guards"] = unchecked_text
    if opset is not None and opset != DEFAULT_OPSET:
        from onnxscript import version_converter   # optional dependency (the onnx extra), for another opset only
        version_converter.convert_version(model, opset)
    return model


def _add_outputs(builder, lowering, graph: Graph) -> None:
    seen = set()
    index = 0
    for leaf in graph.outputs:
        for v in iter_values(leaf):
            value = lowering.env[id(v)]
            if not hasattr(v.type, "shape"):
                raise ExportError("the traced program returns a Python number; ONNX outputs are tensors")
            if lowering.guard_checks is not None:   # no output without every check before it (guard_checks.py)
                value = lowering.guard_checks.read(v, value, lowering.env)
            if id(value) in seen or value.is_graph_input() or value.is_initializer() or value.producer() is None:
                value = op.Identity(value)
            seen.add(id(value))
            builder.add_output(value, f"output_{index}" if len(graph.outputs) > 1 or index else "output")
            index += 1


def _tensor_source(program: Program, graph: Graph):
    """node -> the tensor a get_attr / constant node reads (the program's own tensors)."""
    def tensor_of(node):
        if node.op == "tracejit::constant":
            return graph.constants[node.attrs["index"]]
        if program.kind == "function":
            raise ExportError(f"get_attr {node.attrs.get('path')!r} in a traced function", node.op, node.source)
        *mods, last = node.attrs["path"].split(".")
        entry = program.root
        for part in mods:
            entry = program.module(dict(entry.children)[part])
        t = dict(entry.parameters if node.attrs.get("kind") == "parameter" else entry.buffers).get(last)
        if not isinstance(t, torch.Tensor):
            raise ExportError(f"attribute {node.attrs['path']!r} is not a tensor", node.op, node.source)
        return t
    return tensor_of
