"""What becomes of a traced program's guards (``tracejit::guard``) in an ONNX model.

- ``training``, ``rank``, ``state`` and ``global`` guards always hold in the exported model: it is the traced
  mode's program (and the global torch state's and the Python globals' at trace time: export_onnx refuses a
  program whose globals changed since, and the onnxruntime / OpenVINO programs check them before each run,
  backends/onnx_call.py), and every input has the traced rank (ONNX checks ranks at the entry).
- A ``size`` guard that pins an input dimension to a number (``x.size(1) == 3``, or
  ``x.size(1) != 3`` being False) makes that dimension static: onnxruntime checks it at the entry.
- Other size guards (``seq_len > 64``, sizes of intermediates: an unrolled ``range(h.shape[2])``) cannot be
  checked at the entry: the model checks them itself where the trace did (guard_checks.py: a run where one
  fails stops with an error naming its line, never the traced branch's answer), listed in the metadata
  ``tracejit.checked_guards``; a guard test without an ONNX form is listed in ``tracejit.unchecked_guards``
  with a warning. The onnxruntime / OpenVINO programs check the ones computed from input sizes themselves
  before each run (backends/onnx_call.with_size_guards).
- ``value`` guards (a tensor's values read in Python) make the export fail: the ONNX model
  would silently compute the traced branch for other values; with ``guard_outputs=True`` they are
  listed with the unchecked ones, which the model then computes as boolean outputs (guard_outputs.py). Except where the value is computed from
  the graph's constants and parameters alone, by ops that draw nothing at random (a guard on
  ``float(torch.tensor(0.25).log2())`` holds at every call of the exported model), and where it is computed
  from those and tensor sizes alone (torchvision's pooler scale, ``float(torch.tensor(h / H).log2().round())``):
  such a guard reads no tensor's values, so it is listed with the size guards ONNX cannot check, which the
  onnxruntime / OpenVINO programs check before each run.
- A ``meta`` guard on ``x.stride()`` (a dense layout) is listed with those size guards too: the model computes the
  layout's strides at the call's sizes (strided.py), and the onnxruntime / OpenVINO programs evaluate torch's own
  strides on meta tensors before each run. Other ``meta`` guards (contiguity, requires_grad) make export fail.
"""
from __future__ import annotations

import os
import sys
import warnings

from ..errors import TracerWarning
from ..ir import Graph, Value
from ..ops import draws_random, split_name
from ..ops.names import CAPTURE_OPS, SIZE_READS, STATE_READS, SYM_MATH
from ..support.global_guards import stale_global
from ..support.module_hooks import is_hook_guard
from .errors import ExportError

GUARD_OP = "tracejit::guard"
STRIDE_CALL = "method:stride"
# an ONNX model's input dtypes are fixed; it is the program of the global torch state at trace time (``state``:
# grad mode, autocast, default dtype... have no meaning in onnxruntime)
GUARD_OUTPUTS_HINT = ("export_onnx(..., guard_outputs=True) (tracejit export --guard-outputs) exports such guards "
                      "as boolean outputs the model computes, tracejit_guard_<k>, True where the guard holds: "
                      "a caller must check them, or it can get the traced branch's answer for other data")
ALWAYS_HOLD = ("training", "rank", "dtype", "device", "state", "global")


# metadata every tensor of an ONNX model has: a guard that expects it holds there (others make export fail)
ONNX_FACTS = {"attr:layout": "torch.strided", "attr:is_sparse": False, "attr:is_quantized": False,
              "attr:is_nested": False, "attr:is_mkldnn": False, "method:is_conj": False, "method:is_neg": False}


def _onnx_fact(node) -> bool:
    call = node.attrs.get("call")
    if call not in ONNX_FACTS or node.kwargs or len(node.args) != 1:
        return False
    want = ONNX_FACTS[call]
    return node.attrs.get("expected") is want or node.attrs.get("expected") == want


def plan_guards(graph: Graph, guard_outputs: bool = False) -> tuple[dict, list]:
    """({(input index, dim): size} pinned by guards, [guard nodes ONNX cannot check]). ``guard_outputs``: a
    value guard is one of those (the model computes it as an output: guard_outputs.py) instead of an error."""
    index = {id(v): i for i, v in enumerate(graph.inputs)}
    pinned: dict = {}
    unchecked = []
    for node in graph.nodes:
        if node.op != GUARD_OP:
            continue
        kind = node.attrs.get("kind")
        if kind in ALWAYS_HOLD or (kind == "meta" and _onnx_fact(node)):
            continue
        if kind in ("value", "meta") and _constant_only(node.args, {}):
            continue   # computed from constants alone (torchvision's pooler scale from pinned sizes): always holds
        if kind == "value" and _constant_only(node.args, {}, sizes=True):
            unchecked.append(node)   # a function of sizes (torchvision's pooler scale): checked like a size guard
            continue
        if kind == "value" and guard_outputs:
            unchecked.append(node)
            continue
        if kind == "meta" and is_layout_guard(node):   # x.stride(): checked like a size guard (strided.py)
            unchecked.append(node)
            continue
        if kind in ("value", "meta"):
            raise ExportError(f"the trace relied on tensor values ({node.attrs.get('what')}{_read_from(graph, node)}"
                              "); ONNX has no way to "
                              "check them at the entry, so the exported model could silently take the traced branch "
                              "for other values. "
                              + (GUARD_OUTPUTS_HINT if kind == "value" else "Export of this guard is not supported"),
                              GUARD_OP, node.source or node.attrs.get("line"))
        if kind not in ("size", "length"):   # "meta" (strides, contiguity, requires_grad): ONNX has none of them
            raise ExportError(f"no ONNX form for a guard of kind {kind!r} ({node.attrs.get('what')})", GUARD_OP,
                              node.source or node.attrs.get("line"))
        pin = _pinned_input_dim(node, index)
        if pin is not None:
            pinned[pin[0]] = pin[1]
        else:
            unchecked.append(node)
    return pinned, unchecked


def is_layout_guard(node) -> bool:
    """Is ``node`` (a guard) a read of a tensor's strides, ``x.stride()`` or ``x.stride(d)``?"""
    return (node.attrs.get("kind") == "meta" and node.attrs.get("call") == STRIDE_CALL and not node.kwargs
            and 1 <= len(node.args) <= 2 and isinstance(node.args[0], Value)
            and (len(node.args) == 1 or isinstance(node.args[1], int)))


def _read_from(graph: Graph, node) -> str:
    """`` of <the line> = <what it saw>, computed from input 'mask'``: what a value guard read and which of the
    graph's inputs that value depends on (none: parameters / buffers alone), for the refusal's message."""
    inputs = {id(v): f"'{v.hint or f'input {i}'}'" for i, v in enumerate(graph.inputs)}
    found, seen, todo = [], set(), [a for a in _leaves(node.args) if isinstance(a, Value)]
    while todo:
        v = todo.pop()
        if id(v) in seen:
            continue
        seen.add(id(v))
        if id(v) in inputs:
            found.append(inputs[id(v)])
        elif v.producer is not None and v.producer.op not in SIZE_READS and v.producer.op not in CAPTURE_OPS:
            todo += [a for a in _leaves((v.producer.args, v.producer.kwargs)) if isinstance(a, Value)]
    line = str(node.attrs.get("line") or "").strip()
    read = f" in `{line}`" if line else ""
    seen_value = f", which gave {node.attrs.get('seen')!r}" if "seen" in node.attrs else ""
    origin = (f", computed from input {', '.join(sorted(found))}: a data dependence, not a size" if found
              else ", computed from no input")
    return f"{read}{seen_value}{origin}"


def refuse_changed_globals(graph: Graph) -> None:
    """ExportError where a module-level global the trace read (a ``global`` guard) has changed since: the ONNX
    model would hold the values of the trace, not the ones eager now reads."""
    for node in graph.nodes:
        changed = stale_global(node.attrs) if node.op == GUARD_OP and node.attrs.get("kind") == "global" else None
        if changed is None and node.op == GUARD_OP and is_hook_guard(node):   # trace/global_hooks.py
            raise ExportError(f"the program was traced with {node.attrs.get('what')}: their effect is in the graph "
                              "and an ONNX model cannot check them. Remove them and trace again to export",
                              GUARD_OP, node.source)
        if changed is not None:
            raise ExportError(f"the program was traced with a module-level global that has changed since "
                              f"({changed}): trace again to export the current values", GUARD_OP, node.source)


def pinning_guards(graph: Graph) -> list:
    """The guard nodes that pin an input dimension (plan_guards' ``pinned``): a program that checks the
    other guards before each run checks these too, in the graph's order, so a call with another size fails
    with the GuardError naming the line (the count ``unbind`` unpacks) before a later guard's slice runs."""
    index = {id(v): i for i, v in enumerate(graph.inputs)}
    return [n for n in graph.nodes if n.op == GUARD_OP and n.attrs.get("kind") in ("size", "length")
            and _pinned_input_dim(n, index) is not None]


def warn_pinned_batches(graph: Graph, pinned: dict, names: list) -> str:
    """Warn where a guard fixes an input's first dimension (its batch) in the exported model, naming the guard
    (torchvision's detectors: ``list(images.unbind(0))``, one unrolled branch per traced image); onnxruntime then
    refuses another batch with "Got invalid dimensions ... index: 0". Returns the model metadata's text."""
    index = {id(v): i for i, v in enumerate(graph.inputs)}
    lines = []
    for node in pinning_guards(graph):
        (k, dim), size = _pinned_input_dim(node, index)
        if dim != 0 or len(graph.inputs[k].type.shape) < 2 or pinned.get((k, 0)) != size:
            continue
        lines.append(f"input '{names[k]}' dimension 0 (its batch) is fixed to {size}: {node.attrs.get('what')} "
                     f"({node.source or node.attrs.get('line') or 'unknown line'})")
    if lines:
        warnings.warn(TracerWarning(f"export_onnx: {'; '.join(lines)}. The model takes only that batch (onnxruntime "
                                    "refuses another: 'Got invalid dimensions ... index: 0'); the program unrolled "
                                    "one branch per traced item, so the batch cannot stay dynamic. Export one model "
                                    "per batch size (trace with an example of that batch), or call it with one "
                                    "batch of that size at a time"), stacklevel=_user_stacklevel())
    return "\n".join(lines)


def _constant_only(args, memo: dict, sizes: bool = False) -> bool:
    """Are the Values in ``args`` computed from the graph's constants and parameters alone, by ops that draw
    nothing at random? Then a guard on them holds at every call (the exported model is the traced program
    of its constants: export keeps no other). With ``sizes``, from constants and tensor sizes (``x.size(d)``,
    ``x.numel()``, their ``sym_math``): then the guard reads no tensor's values, and the ONNX backends check it
    before each run on the call's shapes, as a size guard (backends/onnx_call.py)."""
    todo = [a for a in _leaves(args) if isinstance(a, Value)]
    while todo:
        v = todo.pop()
        if id(v) in memo:
            if not memo[id(v)]:
                return False
            continue
        p = v.producer
        size_read = sizes and p is not None and p.op in SIZE_READS
        ok = p is not None and (size_read or p.op in STATE_READS or (sizes and p.op == SYM_MATH) or (
            p.op.startswith("aten::") and not draws_random(split_name(p.op)[1], p.args, p.kwargs)))
        memo[id(v)] = ok
        if not ok:
            return False
        if not size_read and (p.op.startswith("aten::") or p.op == SYM_MATH):
            todo += [a for a in _leaves((p.args, p.kwargs)) if isinstance(a, Value)]
    return True


def _leaves(x):
    if isinstance(x, dict):
        x = list(x.values())
    if isinstance(x, (list, tuple)):
        for y in x:
            yield from _leaves(y)
    else:
        yield x


def _pinned_input_dim(node, index: dict):
    test, expected = node.attrs.get("test"), node.attrs.get("expected")
    if not ((test == "eq" and expected is True) or (test == "ne" and expected is False)) or len(node.args) != 2:
        return None
    size, const = node.args if isinstance(node.args[0], Value) else node.args[::-1]
    if not isinstance(size, Value) or not isinstance(const, int) or isinstance(const, bool):
        return None
    producer = size.producer
    if producer is None or not producer.op.startswith("aten::size.int") or len(producer.args) != 2:
        return None
    tensor, dim = producer.args
    if not isinstance(tensor, Value) or id(tensor) not in index or not isinstance(dim, int):
        return None
    rank = len(tensor.type.shape)
    return (index[id(tensor)], dim % rank if rank else 0), const


def warn_unchecked(unchecked: list) -> str:
    """Warn about guards the ONNX model does not check; returns the text kept in the model metadata."""
    if not unchecked:
        return ""
    lines = [f"{n.attrs.get('what') or n.attrs.get('test')} ({n.source or n.attrs.get('line') or 'unknown line'})"
             for n in unchecked]
    shown = "; ".join(lines[:3]) + (f"; and {len(lines) - 3} more" if len(lines) > 3 else "")
    warnings.warn(TracerWarning(f"export_onnx: {len(lines)} size guard(s) of the trace cannot be checked by the "
                                f"ONNX model, which keeps the traced branch for any size: {shown}. "
                                f"export_onnx(..., guard_outputs=True) makes the model compute them as boolean "
                                f"outputs its caller checks"),
                  stacklevel=_user_stacklevel())
    return "\n".join(lines)


def _user_stacklevel() -> int:
    """The stacklevel of the first caller outside the tracejit package (the user's line)."""
    package = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    frame, level = sys._getframe(1), 2
    while frame is not None and frame.f_code.co_filename.startswith(package):
        frame, level = frame.f_back, level + 1
    return level - 1
