"""What an operator's operand that is a call holds, without calling it again (operand_scan.py's default-deny).

``math.sqrt(d) * n``, ``self.scale() * n``, ``torch.finfo(x.dtype).eps * n``, ``lambda k: math.sqrt(2.0) * k``: the
operand on the left of a traced size ``n`` is a call, which the source scan must not run again (side effects, dead
ops). Its value decides whether CPython's arithmetic asks ``n`` (an int, a tensor: recorded) or reads its digits (a
float, a complex, a Fraction: frozen). Three answers (hunt30):

- ``PURE``: a call of a side-effect free number function (``math.*``, ``abs``, ``min``, ``max``, ``round``, ``int``,
  ``float``, ``pow``, ``len``, a method of an int or a float: ``n.conjugate()``) whose arguments are themselves
  side-effect free: evaluated again, as names are;
- ``TENSOR``: a call whose result is a tensor by the callee's own declaration: an ``nn.Module`` instance, a torch
  function or Tensor method whose every ATen schema that takes a tensor returns exactly one ``Tensor``
  (``torch.relu``, ``x.sum(-1)``, ``F.softmax``, ``torch.arange(n).float()``, ``x[0].sum()``, ``(x * m).sum(1)``:
  a method of an operator whose left operand is a tensor, or a literal number beside one), and the conversions
  ``x.float()`` & co.;
- ``UNKNOWN``: anything else (a Python function, ``x.item()``, ``x.max(-1)`` (a tuple), an attribute of a call,
  a lambda's or a comprehension's call): the traced size beside it is guarded at the line. Too strict where the
  call gave an int or a float tracejit records (``torch.finfo(x.dtype).eps * n``: a guard where the size was
  recorded before), never silently wrong.
"""
from __future__ import annotations

import ast
import builtins
import math
import types

import torch
from torch import nn

from .numpy_calls import _callee_expr, _lookup

PURE, TENSOR, UNKNOWN = "pure", "tensor", "unknown"

_PURE_BUILTINS = frozenset(getattr(builtins, n) for n in ("abs", "min", "max", "round", "int", "float", "pow", "len"))
_CONVERSIONS = frozenset(("float", "double", "half", "bfloat16", "long", "int", "short", "bool", "byte", "char",
                          "cpu", "cuda", "contiguous", "detach", "clone", "type_as", "view_as", "expand_as"))
_schema_answers: dict[str, bool] = {}


def _aten_returns_one_tensor(name: str) -> bool:
    """Does every ATen overload of ``name`` that takes a tensor return exactly one ``Tensor``? (Unknown: False.)"""
    hit = _schema_answers.get(name)
    if hit is None:
        hit = False
        try:
            packet = getattr(torch.ops.aten, name)
            schemas = [getattr(packet, o)._schema for o in packet.overloads()]
            schemas = [s for s in schemas if any(str(a.type) == "Tensor" for a in s.arguments)]
            hit = bool(schemas) and all(len(s.returns) == 1 and str(s.returns[0].type) == "Tensor" for s in schemas)
        except Exception:  # noqa: BLE001  (no such op)
            hit = False
        _schema_answers[name] = hit
    return hit


def _is_torch_callable(fn) -> bool:
    owner = getattr(fn, "__self__", None)
    if isinstance(owner, torch.Tensor):
        return True
    module = getattr(fn, "__module__", None) or getattr(owner, "__name__", None) or ""
    return isinstance(module, str) and (module == "torch" or module.startswith(("torch.nn.functional",
                                                                                 "torch._C", "torch.special")))


def _tensor_expr(expr, frame, safe) -> bool:
    """Is ``expr`` (a method's receiver) a tensor, found without running anything: a name or attribute chain that
    holds one, an index of one, or a call of ``TENSOR`` kind (``torch.arange(n).float()``)?"""
    while isinstance(expr, ast.Subscript):
        expr = expr.value
    if isinstance(expr, ast.UnaryOp):   # -x, ~x: the tensor's own operator
        return not isinstance(expr.op, ast.Not) and _tensor_expr(expr.operand, frame, safe)
    if isinstance(expr, ast.BinOp):     # (ids * mask).sum(1): a tensor on the left answers; a literal number on
        left = expr.left                # the left hands over to the tensor on the right
        if isinstance(left, ast.Constant) and type(left.value) in (int, float):
            return _tensor_expr(expr.right, frame, safe)
        return _tensor_expr(left, frame, safe)
    if isinstance(expr, ast.Call):
        return kind(expr, frame, safe) == TENSOR
    if not _callee_expr(expr):
        return False
    try:
        return isinstance(_lookup(expr, frame), torch.Tensor)
    except Exception:  # noqa: BLE001  (a name not bound yet)
        return False


def _one_tensor_method(name: str) -> bool:
    return name in _CONVERSIONS or _aten_returns_one_tensor(name)


def kind(call: ast.Call, frame, safe) -> str:
    """``PURE``, ``TENSOR`` or ``UNKNOWN`` for the operand ``call`` (looked up in ``frame``, never called)."""
    if not _callee_expr(call.func):   # a method of an expression: ``torch.arange(n).float()``, ``x[0].sum()``
        func = call.func
        if isinstance(func, ast.Attribute) and _one_tensor_method(func.attr) and _tensor_expr(func.value, frame, safe):
            return TENSOR
        return UNKNOWN
    try:
        fn = _lookup(call.func, frame)
    except Exception:  # noqa: BLE001  (a name not bound yet)
        return UNKNOWN
    if isinstance(fn, nn.Module):
        return TENSOR
    args = list(call.args) + [k.value for k in call.keywords]
    if (fn in _PURE_BUILTINS if _hashable(fn) else False) or isinstance(getattr(fn, "__self__", None), (int, float)) \
            or \
            isinstance(fn, types.BuiltinFunctionType) and getattr(fn, "__module__", None) == "math" and \
            getattr(math, fn.__name__, None) is fn:
        return PURE if all(_pure_arg(a, frame, safe) for a in args) else UNKNOWN
    name = getattr(fn, "__name__", "")
    if _is_torch_callable(fn) and (name in _CONVERSIONS and isinstance(getattr(fn, "__self__", None), torch.Tensor)
                                   or _aten_returns_one_tensor(name)):
        return TENSOR
    return UNKNOWN


def _hashable(fn) -> bool:
    try:
        hash(fn)
    except TypeError:
        return False
    return True


def _pure_arg(expr, frame, safe) -> bool:
    """Side-effect free: ``safe`` syntax, or a ``PURE`` call of such arguments."""
    if safe(expr):
        return True
    if isinstance(expr, ast.Call):
        return kind(expr, frame, safe) == PURE
    if isinstance(expr, (ast.BinOp, ast.UnaryOp)):
        return all(_pure_arg(e, frame, safe) for e in ast.iter_child_nodes(expr) if isinstance(e, ast.expr))
    return False
