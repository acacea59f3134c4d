"""In-place writes in ONNX, which has none: the written tensor and every alias of it get new values.

An in-place op (``y.add_(x)``, ``F.dropout(y, inplace=True)``, ``y[:, :1].fill_(0.5)``) becomes its
functional form, and the result is written back through the chain of views it went through:
``slice`` becomes ``slice_scatter``, ``select`` ``select_scatter``, a reshape-like view
(``view``, ``flatten``, ``unsqueeze``, ...) a reshape back to the base's shape, ``transpose`` /
``permute`` their inverse. The lowering's map from IR values to ONNX values then points the base
and each view of the chain at their new values, so every later reader sees the write, as in eager.

Refused (an ExportError naming the op and the line), because ONNX cannot show the change:
- the written memory belongs to the caller (a program input) or to the module (a parameter, buffer
  or constant);
- the chain holds a view that has no inverse here (``expand``, ``as_strided``, ``unfold``, ...);
- another alias of the same memory, made before the write, is read after it (it would be stale).

>>> import torch, tracejit, onnxruntime as ort
>>> def f(x):
...     y = x * 2
...     y[:, 1:].add_(x[:, :-1])
...     return y
>>> proto = tracejit.export_onnx(tracejit.trace(f, torch.randn(2, 3)))
>>> x = torch.randn(4, 5)
>>> got = ort.InferenceSession(proto.SerializeToString()).run(None, {"x": x.numpy()})[0]
>>> bool(torch.allclose(torch.from_numpy(got), f(x)))
True
"""
from __future__ import annotations

import torch

from ..ir import Node, TensorType, Value
from ..ops import shares_memory
from ..ops.names import STATE_READS
from ._deps import require
from . import write_forms
from .schema_args import aten_schema, bind

ir = require("onnx_ir")
from onnxscript.onnx_opset import opset18 as op  # noqa: E402

def _is_view(node: Node) -> bool:
    """May ``node``'s result share memory with its first argument? ``ops.shares_memory`` (the schema's alias
    sets), less what the traced types rule out: a conversion to another dtype or device (``to``) copies."""
    if not (shares_memory(node.name) and node.args and isinstance(node.args[0], Value)):
        return False
    src = node.args[0].type
    out = node.outputs[0].type if node.outputs and node.outputs[0] is not None else None
    return not (isinstance(src, TensorType) and isinstance(out, TensorType)
                and (src.dtype != out.dtype or src.device != out.device))


class WriteError(Exception):
    """Why an in-place write cannot be exported (the lowering turns it into an ExportError)."""


def alias_roots(graph) -> dict[int, tuple[Value, int]]:
    """id(view) -> (the tensor whose memory it views, the position of the node that made the view). A view is
    any op whose result may share memory with its first argument (``ops.shares_memory``: schema alias info)."""
    roots: dict[int, tuple[Value, int]] = {}
    for i, node in enumerate(graph.nodes):
        if _is_view(node):
            base = node.args[0]
            root = roots[id(base)][0] if id(base) in roots else base
            for out in node.outputs:
                if out is not None:
                    roots[id(out)] = (root, i)
    return roots


def view_chain(target: Value) -> tuple[Value, list[Node]]:
    """(the base tensor, the view nodes from the base to ``target``, outermost first)."""
    chain = []
    while target.producer is not None and _is_view(target.producer):
        chain.append(target.producer)
        target = target.producer.args[0]
    chain.reverse()
    return target, chain


def check_writable(cx, node: Node, target: Value) -> list[Node]:
    """The chain of views to write back through; raises WriteError where eager's write cannot be shown."""
    base, chain = view_chain(target)
    if base.producer is None:
        raise WriteError("the written tensor is (a view of) an input of the traced program (the caller would "
                         "see the change)")
    if base.producer.op in STATE_READS:
        raise WriteError("the written tensor is (a view of) a parameter, buffer or constant of the module")
    for view in chain:
        if view.name not in _INVERSES:
            raise WriteError(f"the written tensor is a view ({view.op}) that has no inverse in ONNX")
        if view.name == "to" and not _returns_self(view):
            raise WriteError(f"the written tensor is a to() that may copy ({view.op} with copy=True or a memory "
                             "format): eager's write may not reach the tensor it was made from")
        if view.name == "narrow" and not all(isinstance(a, int) for a in bind(view.op, view.args, view.kwargs)[0][2:4]):
            raise WriteError("the written tensor is a narrow() view with a traced start or length")
    rewritten = {id(base)} | {id(v.outputs[0]) for v in chain}
    here = cx.position[id(node)]
    for vid, (root, made_at) in cx.alias_roots.items():
        if root is base and vid not in rewritten and made_at < here < cx.last_use.get(vid, -1):
            raise WriteError("another view of the written tensor, made before the write, is read after it")
    return chain


def write_back(cx, target: Value, chain: list[Node], new_value) -> None:
    """Point ``target``, the views of ``chain`` (innermost last) and their base at their values after
    the write of ``new_value`` into ``target``."""
    cx.env[id(target)] = new_value
    for view in reversed(chain):
        new_value = _inverse(cx, view, cx.arg(view.args[0]), new_value)
        cx.env[id(view.args[0])] = new_value


def _inverse(cx, view: Node, parent, child):
    """The value of ``view``'s base once ``child`` (the view's new value) is written into it."""
    args, _ = bind(view.op, view.args, view.kwargs)
    return _INVERSES[view.name](cx, [cx.arg(a) for a in args], len(view.args[0].type.shape), parent, child)


def _returns_self(view: Node) -> bool:
    """Does ``x.to(...)`` (the same dtype and device: ``_is_view``) return ``x`` itself? Yes unless it asks for a
    copy or a memory format (then it may copy, and a write into it does not reach ``x``)."""
    schema = aten_schema(view.op)
    if schema is None:
        return False
    positional, kwargs = bind(view.op, view.args, view.kwargs)
    names = [a.name for a in schema.arguments if not a.kwarg_only]
    args = {**dict(zip(names, positional)), **kwargs}
    return not args.get("copy", False) and args.get("memory_format") in (None, torch.preserve_format)


def _reshaped_back(cx, args, rank, parent, child):
    return op.Reshape(child, op.Shape(parent))


def _slice(cx, args, rank, parent, child):
    dim, start, end, step = args[1:5]
    return write_forms.slice_scatter(cx, parent, child, dim, start, end, step, rank)


def _narrow(cx, args, rank, parent, child):
    dim, start, length = args[1:4]
    return write_forms.slice_scatter(cx, parent, child, dim, start, start + length, 1, rank)


def _select(cx, args, rank, parent, child):
    return write_forms.select_scatter(cx, parent, child, args[1], args[2], rank)


def _transpose(cx, args, rank, parent, child):
    return cx.call_aten("aten::transpose.int", [child, args[1], args[2]])


def _reversed_dims(cx, args, rank, parent, child):
    return child if rank < 2 else cx.call_aten("aten::permute.default", [child, list(range(rank))[::-1]])


def _last_two(cx, args, rank, parent, child):
    return cx.call_aten("aten::transpose.int", [child, -2, -1])


def _permute(cx, args, rank, parent, child):
    dims = [d % rank for d in args[1]]   # the inverse permutation
    return cx.call_aten("aten::permute.default", [child, sorted(range(rank), key=dims.__getitem__)])


# the write-back this module implements for each view (an implementation table: which views ONNX can write
# through, and how); a view not listed refuses the write (default-deny). A reshape-like view (the same
# elements in the same order) is written back by reshaping to its base's shape; ``to`` that returns its tensor
# itself (the same dtype and device, no copy asked: ``_returns_self``) is that tensor (Informer's
# ``context = v.cumsum(-2, dtype=torch.float32).to(v.dtype); context[i, top, :] = out``).
_INVERSES = {
    **{name: _reshaped_back for name in ("view", "reshape", "flatten", "unflatten", "view_as", "reshape_as",
                                         "unsqueeze", "squeeze", "alias", "detach", "to")},
    "slice": _slice, "narrow": _narrow, "select": _select, "transpose": _transpose, "swapaxes": _transpose,
    "swapdims": _transpose,
    "t": _reversed_dims, "numpy_T": _reversed_dims, "mT": _last_two, "permute": _permute,
}
