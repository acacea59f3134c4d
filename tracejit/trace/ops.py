"""Name what a Python entry point into PyTorch runs: ATen op, overload, and how to call it again.

``describe(func, args, kwargs)`` returns ``(op, target)`` where ``op`` is the
qualified ATen name with overload (``aten::add.Tensor``) and ``target`` (a
``CallTarget``, ir/target.py) tells codegen how to emit the call:

    method:view              args[0].view(*args[1:], **kwargs)
    fn:torch.conv2d          torch.conv2d(*args, **kwargs)
    op:+                     args[0] + args[1]      (unary: -args[0])
    attr:T                   args[0].T
"""
from __future__ import annotations

import functools
import sys
import types

import torch

from ..ir.target import CallTarget, function, method, operator
from ..ops import schemas_of

# Python operator dunders -> (aten name, operator symbol or None for a method)
DUNDERS = {
    "__add__": ("add", "+"), "__radd__": ("add", "r+"), "__iadd__": ("add_", None),
    "__sub__": ("sub", "-"), "__isub__": ("sub_", None),
    "__mul__": ("mul", "*"), "__rmul__": ("mul", "r*"), "__imul__": ("mul_", None),
    "__truediv__": ("div", "/"), "__itruediv__": ("div_", None), "__div__": ("div", "/"),
    "__floordiv__": ("floor_divide", "//"), "__ifloordiv__": ("floor_divide_", None),
    "__mod__": ("remainder", "%"), "__imod__": ("remainder_", None),
    "__pow__": ("pow", "**"), "__ipow__": ("pow_", None),
    "__matmul__": ("matmul", "@"),
    "__and__": ("__and__", "&"), "__or__": ("__or__", "|"), "__xor__": ("__xor__", "^"),
    "__iand__": ("__iand__", None), "__ior__": ("__ior__", None), "__ixor__": ("__ixor__", None),
    "__lshift__": ("__lshift__", "<<"), "__rshift__": ("__rshift__", ">>"),
    "__eq__": ("eq", "=="), "__ne__": ("ne", "!="), "__lt__": ("lt", "<"), "__le__": ("le", "<="),
    "__gt__": ("gt", ">"), "__ge__": ("ge", ">="),
    "__neg__": ("neg", "u-"), "__pos__": ("positive", "u+"), "__abs__": ("abs", None),
    "__invert__": ("bitwise_not", "u~"),
}

# Tensor methods that are Python-binding shortcuts for another ATen op
METHOD_ALIASES = {
    "float": "to", "double": "to", "half": "to", "bfloat16": "to", "int": "to", "long": "to",
    "short": "to", "char": "to", "byte": "to", "bool": "to", "cpu": "to", "cuda": "to", "type": "to",
}

# property getters that produce tensors: property -> aten name
TENSOR_PROPERTIES = {
    "T": "numpy_T", "mT": "mT", "H": "matrix_H", "mH": "mH", "real": "real", "imag": "imag",
    "data": "detach", "grad": "grad",
}

_NAMESPACES = {}
for _attr, _path in (("_VariableFunctions", "torch"), ("_nn", "torch._C._nn"), ("_linalg", "torch._C._linalg"),
                     ("_special", "torch._C._special"), ("_fft", "torch._C._fft"), ("_nested", "torch._C._nested"),
                     ("_sparse", "torch._C._sparse")):
    _mod = getattr(torch._C, _attr, None)
    if _mod is not None:
        _NAMESPACES[id(_mod)] = _path


def describe(func, args, kwargs) -> tuple[str, CallTarget]:
    name = func.__name__
    if name in DUNDERS:
        aten, sym = DUNDERS[name]
        if sym is None:
            target = method(name if name.startswith('__i') and aten.startswith('__') else aten)
        else:
            target = operator(sym)
        call_args = (args[1], args[0]) + tuple(args[2:]) if sym and sym.startswith("r") else args
        return qualify(aten, call_args, kwargs), target
    if isinstance(func, (types.MethodDescriptorType, types.WrapperDescriptorType)) or (
            getattr(func, "__qualname__", "").startswith("Tensor.")):
        aten = METHOD_ALIASES.get(name, name)
        return qualify(aten, args, kwargs), method(name)
    owner = getattr(func, "__self__", None)
    path = _NAMESPACES.get(id(owner))
    if path is None:
        mod = getattr(func, "__module__", None) or "torch"
        path = mod if mod.startswith("torch") else "torch"
    if path == "torch" and getattr(torch, name, None) is not func:
        path = "torch._C._VariableFunctions"   # torch.<name> is a Python wrapper with another signature
    aten = name
    if path == "torch._C._linalg" and not name.startswith("linalg_"):
        aten = "linalg_" + name
    elif path == "torch._C._special" and not name.startswith("special_"):
        aten = "special_" + name
    elif path == "torch._C._fft" and not name.startswith("fft_"):
        aten = "fft_" + name
    return qualify(aten, args, kwargs), function(f"{path}.{name}")


# numpy's names that torch's argument parser takes for its own (python_arg_parser.cpp's numpy compatibility):
# ``x.mean(axis=1, keepdims=True)`` (IBert's layer norm). A node holds torch's name, as the schema spells it.
NUMPY_KWARG_NAMES = {"axis": "dim", "keepdims": "keepdim"}


def torch_kwarg_names(name: str, kwargs: dict) -> dict:
    """``kwargs`` with numpy's names for ``dim`` / ``keepdim`` spelled as torch's schemas spell them (not for an op
    ``name`` whose own schema has such an argument: ``quantize_per_channel(axis)``)."""
    if not any(k in NUMPY_KWARG_NAMES for k in kwargs):
        return kwargs
    packet = aten_packet(name)
    try:
        own = {a.name for o in (packet.overloads() if packet is not None else ())
               for a in getattr(packet, o)._schema.arguments}
    except (AttributeError, RuntimeError):
        own = set(NUMPY_KWARG_NAMES)   # unknown: leave the names as they are
    if own & set(kwargs) & set(NUMPY_KWARG_NAMES):
        return kwargs
    return {NUMPY_KWARG_NAMES.get(k, k) if NUMPY_KWARG_NAMES.get(k) not in kwargs else k: v for k, v in kwargs.items()}


def qualify(aten: str, args, kwargs) -> str:
    overload = resolve_overload(aten, _kinds(args), tuple(sorted((k, _kind(v)) for k, v in kwargs.items())))
    if overload is None:
        return f"aten::{aten}"
    return f"aten::{aten}.{overload}"


def _kind(v) -> str:
    if isinstance(v, torch.Tensor):
        return "T"
    if isinstance(v, bool):
        return "b"
    if isinstance(v, int):
        return "i"
    if isinstance(v, float):
        return "f"
    if isinstance(v, complex):
        return "c"
    if v is None:
        return "N"
    if isinstance(v, str):
        return "s"
    if isinstance(v, torch.dtype):
        return "d"
    if isinstance(v, (torch.device,)):
        return "D"
    if isinstance(v, (torch.layout, torch.memory_format)):
        return "e"
    if isinstance(v, (list, tuple)):
        return "[" + "".join(sorted(set(_kind(x) for x in v))) + "]"
    return "?"


def _kinds(args) -> tuple:
    return tuple(_kind(a) for a in args)


def aten_packet(name: str):
    try:
        return getattr(torch.ops.aten, name)
    except (AttributeError, RuntimeError):
        return None


@functools.lru_cache(maxsize=4096)
def resolve_overload(name: str, kinds: tuple, kw: tuple) -> str | None:
    """The overload of ``aten::name`` that positional argument kinds ``kinds`` and keyword arguments ``kw``
    ((name, kind) pairs: ``repeats=4`` binds ``self_int``, not ``self_Tensor``) bind to, exactly, else leniently."""
    schemas = schemas_of(f"aten::{name}")
    if not schemas:
        return None
    names, kw_kinds = tuple(k for k, _ in kw), dict(kw)
    for lenient in (False, True):
        for ov, schema in schemas:
            if "out" in (a.name for a in schema.arguments) and "out" not in names:
                continue
            if _binds(schema, kinds, names, lenient, kw_kinds):
                return ov
    return None


def _binds(schema, kinds, kw, lenient, kw_kinds: dict | None = None) -> bool:
    """Do positional argument kinds ``kinds`` and keyword names ``kw`` bind to ``schema``?

    ``kw_kinds`` (name -> kind) also checks the keyword values' kinds (not a kind ``_kind`` does not know: a
    ``torch.Generator``). Python's varargs form
    for an int list (``x.view(2, 3)``) binds the trailing ints to that list.
    """
    params = list(schema.arguments)
    positional = [a for a in params if not a.kwarg_only]
    supplied = set()
    ki = 0
    for p in positional:
        if ki >= len(kinds):
            break
        t = str(p.type)
        if t in ("List[int]", "List[SymInt]") and len(kinds) - ki > 1 and all(k == "i" for k in kinds[ki:]):
            supplied.add(p.name)
            ki = len(kinds)
            break
        if not _fits(kinds[ki], t, lenient):
            return False
        supplied.add(p.name)
        ki += 1
    if ki < len(kinds):
        return False
    by_name = {a.name: a for a in params}
    for k in kw:
        if k not in by_name or k in supplied:
            return False
        if kw_kinds is not None and kw_kinds[k] != "?" and not _fits(kw_kinds[k], str(by_name[k].type), lenient):
            return False
        supplied.add(k)
    for a in params:
        if a.name not in supplied and not a.has_default_value() and not str(a.type).endswith("?"):
            return False
    return True


def _fits(kind: str, t: str, lenient: bool) -> bool:
    """Does an argument of ``kind`` (see _kind) fit the schema type ``t`` (``List[int]``, ``Optional[Tensor]``)?"""
    if t.startswith("Optional[") and t.endswith("]"):
        return kind == "N" or _fits(kind, t[9:-1], lenient)
    if t.startswith("List[") and t.endswith("]"):
        elem = t[5:-1]
        if kind.startswith("["):
            return all(_fits(k, elem, lenient) for k in kind[1:-1])
        return elem in ("int", "SymInt") and kind == "i"    # an int where a size list is expected
    if t == "Any":
        return True
    if t == "Tensor":
        return kind == "T" or (lenient and kind in "ifbc")
    if t in ("int", "SymInt"):   # also ScalarType, Layout, MemoryFormat (ints in schemas)
        return kind in "ide" or (lenient and kind == "b")
    if t == "float":
        return kind in "if"
    if t == "complex":
        return kind in "ifc"
    if t in ("number", "Scalar"):
        return kind in "ifbc" or (lenient and kind == "T")
    if t == "bool":
        return kind == "b" or (lenient and kind == "i")
    if t == "str":
        return kind == "s"
    if t == "Device":
        return kind in "Dsi"
    return lenient


def reentered_from_python() -> bool:
    """Did this call of the mode come from ``torch.overrides.handle_torch_function``, i.e. a Python helper of
    torch dispatching a call of its own (``torch.einsum(eq, (a, b))`` calls ``torch.einsum(eq, a, b)``), and
    not from the C++ twin the helper runs (which reports the helper as the function, with the twin's arguments)?
    The first frame outside tracejit's recorder says."""
    frame = sys._getframe(1)
    while frame is not None and frame.f_globals.get("__name__", "").startswith("tracejit.trace"):
        frame = frame.f_back
    return frame is not None and frame.f_code is torch.overrides.handle_torch_function.__code__


def cpp_twin(func):
    """The C++ function a Python helper of torch wraps under the same name (for the twin call)."""
    name = func.__name__
    if getattr(func, "__qualname__", "").startswith("Tensor."):
        twin = getattr(torch._C.TensorBase, name, None)
    elif (getattr(func, "__module__", "") or "").startswith("torch.nn"):
        twin = getattr(torch._C._nn, name, None) or getattr(torch._C._VariableFunctions, name, None)
    else:
        twin = getattr(torch._C._VariableFunctions, name, None)
    if twin is None:
        raise NotImplementedError(f"tracejit cannot find the C++ function behind torch's Python helper {name!r}")
    return twin


_OPERATOR_ATEN = {"+": {"add"}, "r+": {"add"}, "-": {"sub", "rsub"}, "r-": {"rsub", "sub"}, "*": {"mul"},
                  "r*": {"mul"}, "/": {"div"}, "r/": {"div", "reciprocal"}, "//": {"floor_divide", "floordiv"},
                  "r//": {"floor_divide", "floordiv"}, "%": {"remainder"}, "r%": {"remainder"}, "**": {"pow"},
                  "r**": {"pow"}, "@": {"matmul"}, "r@": {"matmul"}, "&": {"__and__", "bitwise_and"},
                  "r&": {"__and__", "bitwise_and"}, "|": {"__or__", "bitwise_or"}, "r|": {"__or__", "bitwise_or"},
                  "^": {"__xor__", "bitwise_xor"}, "r^": {"__xor__", "bitwise_xor"}, "<<": {"__lshift__"},
                  ">>": {"__rshift__"}, "==": {"eq"}, "!=": {"ne"}, "<": {"lt"}, "<=": {"le"}, ">": {"gt"},
                  ">=": {"ge"}, "u-": {"neg"}, "u+": {"positive"}, "u~": {"bitwise_not"}}
_INDEX_ATEN = {"select": {"select"}, "slice": {"slice"}, "index": {"index"}, "setitem_index": {"index_put_"}}


def aten_names_for_target(target: CallTarget | None) -> set:
    """The ATen op names a call target may carry out (to check a node's target against its op)."""
    if target is None:
        return set()
    kind, what = target.kind, target.name
    if kind == "op":
        return _OPERATOR_ATEN.get(what, set())
    if kind == "index":
        return _INDEX_ATEN.get(what, set())
    if kind == "attr":
        return {TENSOR_PROPERTIES[what]} if what in TENSOR_PROPERTIES else set()
    name = target.short_name
    names = {name, METHOD_ALIASES.get(name, name)}
    if name in DUNDERS:
        names.add(DUNDERS[name][0])
    if kind == "fn":
        namespace = target.namespace
        prefix = {"torch._C._linalg": "linalg_", "torch._C._special": "special_", "torch._C._fft": "fft_"}.get(namespace)
        if prefix and not name.startswith(prefix):
            names.add(prefix + name)
    return names
