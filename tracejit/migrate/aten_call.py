"""One TorchScript ``aten::`` node -> the Python call tracejit's code generator emits for it.

TorchScript passes every schema argument positionally, with dtypes, layouts and memory formats
as ints; Python's bindings take ``torch.dtype`` objects, keyword-only arguments by name and
drop the arguments left at their defaults. ``plan_call`` builds the candidate Python calls
(``torch.<op>``, ``torch._C._nn.<op>``, ``Tensor.<op>``, ...) and keeps the first one that
gives the same result as the ATen overload itself on the example values, so the chosen call
is checked, not assumed.
"""
from __future__ import annotations

import torch

from ..ir import Value
from ..ir.target import function, indexing, method as tensor_method

_ENUMS = {"ScalarType": "dtype", "Layout": "layout", "MemoryFormat": "memory_format"}
_LAYOUTS = {0: torch.strided, 1: torch.sparse_coo}
_MEMORY_FORMATS = {0: torch.contiguous_format, 1: torch.preserve_format, 2: torch.channels_last,
                   3: torch.channels_last_3d}
# c10's ScalarType numbering, as TorchScript writes dtypes
_DTYPES = {0: torch.uint8, 1: torch.int8, 2: torch.int16, 3: torch.int32, 4: torch.int64, 5: torch.float16,
           6: torch.float32, 7: torch.float64, 9: torch.complex64, 10: torch.complex128, 11: torch.bool,
           15: torch.bfloat16}


def enum_value(arg_type: str, value):
    """An int TorchScript used for a dtype / layout / memory format -> the torch object."""
    base = arg_type[9:-1] if arg_type.startswith("Optional[") else arg_type
    kind = _ENUMS.get(base)
    if kind is None or not isinstance(value, int) or isinstance(value, bool):
        return value
    table = {"dtype": _DTYPES, "layout": _LAYOUTS, "memory_format": _MEMORY_FORMATS}[kind]
    if table.get(value) is None:
        raise ValueError(f"unknown {kind} number {value}")
    return table[value]


def _is_default(arg, value) -> bool:
    if not arg.has_default_value() or isinstance(value, Value) or _holds_value(value):
        return False
    default = arg.default_value
    if isinstance(value, (list, tuple)) and isinstance(default, (list, tuple)):
        return list(value) == list(default) and all(type(a) is type(b) for a, b in zip(value, default))
    return type(value) is type(default) and value == default


def _holds_value(x) -> bool:
    if isinstance(x, Value):
        return True
    if isinstance(x, (list, tuple)):
        return any(_holds_value(i) for i in x)
    return False


def split_arguments(schema, items):
    """Schema-ordered (ir, real) pairs -> (positional, keyword) pairs for a Python call.

    Enum ints become torch objects; keyword-only arguments go by name; arguments left at their
    defaults are dropped (trailing positional ones, and keywords)."""
    pos, kw = [], {}
    for arg, (ir, real) in zip(schema.arguments, items):
        t = str(getattr(arg, "real_type", arg.type))
        default = _is_default(arg, ir)
        ir, real = enum_value(t, ir), enum_value(t, real)
        if arg.kwarg_only:
            if not default:
                kw[arg.name] = (ir, real, arg.name)
        else:
            pos.append((ir, real, default, arg.name))
    while pos and pos[-1][2]:
        pos.pop()
    return pos, kw


def candidates(name: str, pos, kw):
    """``(target, args, kwargs)`` forms to try, ir and real side by side: ``[(target, ir_args,
    ir_kwargs, callable, real_args, real_kwargs)]``."""
    ir_pos = [p[0] for p in pos]
    real_pos = [p[1] for p in pos]
    ir_kw = {k: v[0] for k, v in kw.items()}
    real_kw = {k: v[1] for k, v in kw.items()}
    # the all-keyword form (but the first argument) for bindings whose Python signature differs
    ir_kw_all = dict({p[3]: p[0] for p in pos[1:]}, **ir_kw)
    real_kw_all = dict({p[3]: p[1] for p in pos[1:]}, **real_kw)
    out = []
    fns = []
    vf = torch._C._VariableFunctions
    if callable(getattr(vf, name, None)):
        fns.append(("torch" if getattr(torch, name, None) is getattr(vf, name) else "torch._C._VariableFunctions",
                     name, getattr(vf, name)))
    if callable(getattr(torch._C._nn, name, None)):
        fns.append(("torch._C._nn", name, getattr(torch._C._nn, name)))
    for prefix, ns_name in (("linalg_", "_linalg"), ("special_", "_special"), ("fft_", "_fft")):
        ns = getattr(torch._C, ns_name, None)
        if name.startswith(prefix) and ns is not None and callable(getattr(ns, name[len(prefix):], None)):
            fns.append((f"torch._C.{ns_name}", name[len(prefix):], getattr(ns, name[len(prefix):])))
    first_is_tensor = pos and isinstance(pos[0][1], torch.Tensor)
    method = getattr(torch._C.TensorBase, name, None) if first_is_tensor else None
    for path, short, fn in fns:
        target = function(f"{path}.{short}")
        out.append((target, ir_pos, ir_kw, fn, real_pos, real_kw))
        if pos:
            out.append((target, ir_pos[:1], ir_kw_all, fn, real_pos[:1], real_kw_all))
    if method is not None:
        bound = (lambda *a, _n=name, **k: getattr(a[0], _n)(*a[1:], **k))
        out.append((tensor_method(name), ir_pos, ir_kw, bound, real_pos, real_kw))
        out.append((tensor_method(name), ir_pos[:1], ir_kw_all, bound, real_pos[:1], real_kw_all))
    # some Python bindings hide the arguments a strided, unpinned tensor leaves at their neutral values
    # (Tensor.to takes no layout or pin_memory)
    for target, ia, ik, fn, ra, rk in list(out):
        if any(k in ik and ik[k] in _NEUTRAL[k] for k in _NEUTRAL):
            keep = [k for k in ik if not (k in _NEUTRAL and ik[k] in _NEUTRAL[k])]
            out.append((target, ia, {k: ik[k] for k in keep}, fn, ra, {k: rk[k] for k in keep}))
    return out


_NEUTRAL = {"layout": (None, torch.strided), "pin_memory": (None, False)}


def same(a, b) -> bool:
    """Do two op results agree exactly (tensors: dtype, shape and values, NaN where NaN)?"""
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        if not (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)):
            return False
        if a.dtype != b.dtype or a.shape != b.shape or a.device != b.device:
            return False
        if a.is_floating_point() or a.is_complex():
            return bool(((a == b) | (a.isnan() & b.isnan())).all())
        return bool(torch.equal(a, b))
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    return type(a) is type(b) and (a == b or (a != a and b != b))


def same_kind(a, b) -> bool:
    """Same structure, dtypes and shapes (for random ops, whose values differ run to run)."""
    if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor):
        return a.dtype == b.dtype and a.shape == b.shape
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(same_kind(x, y) for x, y in zip(a, b))
    return type(a) is type(b)


def is_mutating(schema) -> bool:
    return any(a.alias_info is not None and a.alias_info.is_write for a in schema.arguments)


def index_candidates(name: str, ins):
    """``aten::slice`` / ``aten::select`` / ``aten::index`` have no Python function: emit them as
    Python indexing (tracejit's ``index:`` targets), whose dim must be a constant >= 0."""
    if name not in ("slice", "select", "index") or not ins or not isinstance(ins[0][1], torch.Tensor):
        return []
    (x_ir, x), rest = ins[0], ins[1:]
    if name == "index":
        if len(rest) != 1:
            return []
        idx_ir, idx = rest[0]
        return [(indexing("index"), [x_ir, idx_ir], {}, lambda t, i: t[tuple(slice(None) if j is None else j for j in i)],
                 [x, idx], {})]
    dim_ir, dim = rest[0]
    if isinstance(dim_ir, Value) or not isinstance(dim, int):
        return []
    if dim < 0:
        dim += x.dim()
    if name == "select":
        (i_ir, i), = rest[1:]
        return [(indexing("select"), [x_ir, dim, i_ir], {}, lambda t, d, k: t[(slice(None),) * d + (k,)], [x, dim, i], {})]
    (s_ir, s), (e_ir, e), (st_ir, st) = rest[1:]
    return [(indexing("slice"), [x_ir, dim, s_ir, e_ir, st_ir], {},
             lambda t, d, a, b, c: t[(slice(None),) * d + (slice(a, b, c),)], [x, dim, s, e, st], {})]
