"""C callables that read a traced size's digits without asking it (hunt20 D): default-deny.

A traced size (``TracedInt``) is an ``int`` subclass; CPython's C code reads an int subclass's value directly
(``PyLong_AsLong``, ``_PyNumber_Index`` return it without calling ``__index__`` / ``__int__``), so
``struct.pack("<i", n)``, ``collections.deque(maxlen=n)``, ``itertools.islice(it, n)``, ``bytes(n)``,
``bin(n)``, ``chr(n)``, ``"a".ljust(n)``, ``lst.insert(n, v)``, ``itertools.repeat(v, n)`` froze the trace's
value silently. Every C callable (a builtin function or method, or a type implemented in C) that is not
torch's counts as such a reader, except those on ``PASSES`` below, which only store the number or ask its own
methods (each of which the number rule guards or records: number_escapes.py). numpy's are numpy_calls.py's.

index_reads.py / numpy_calls.py find the calls (the source scan at each event: callees looked up by name;
frame_returns.py's profile hook: each C function a user frame calls) and guard each traced size among a
reader's side-effect-free arguments ``== value`` at the call's line. A callable missing from ``PASSES`` is
guarded too: too strict (a new shape raises GuardError or retraces), never silently wrong.
"""
from __future__ import annotations

import builtins
import types

# (owner, name): owner is "builtins", a module name, or a type's qualified name ("list", "dict")
PASSES = frozenset(
    [("builtins", n) for n in (
        # ask the number's own methods (guarded / recorded by number_escapes.py, symbolic.py)
        "abs", "bool", "complex", "divmod", "float", "format", "hash", "int", "max", "min", "pow", "repr", "round",
        "sorted", "str", "sum", "print", "ascii",
        # store or pass the object without reading its value
        "dict", "frozenset", "list", "set", "slice", "tuple", "zip", "map", "filter", "reversed", "iter", "next",
        "object", "type", "super", "property", "staticmethod", "classmethod",
        # ask about the object, not its value
        "callable", "dir", "getattr", "hasattr", "id", "isinstance", "issubclass", "len", "setattr", "delattr",
        "vars", "any", "all")]
    + [("list", n) for n in ("append", "extend", "index", "count", "remove", "copy", "__contains__", "__setitem__")]
    + [("dict", n) for n in ("get", "setdefault", "pop", "update", "__getitem__", "__setitem__", "__contains__",
                             "keys", "values", "items", "copy", "fromkeys")]
    + [("set", n) for n in ("add", "discard", "remove", "update", "__contains__", "union", "intersection")]
    + [("tuple", n) for n in ("index", "count", "__contains__")]
    + [("str", n) for n in ("format", "join", "__mod__")]   # "%d" % n: index_reads.py guards the operand
    + [("collections.deque", n) for n in ("append", "appendleft", "extend", "extendleft")]
    + [("functools", n) for n in ("reduce", "partial")]   # reduce calls its function (operator.mul: the dunder)
    + [("operator", n) for n in ("add", "sub", "mul", "floordiv", "truediv", "mod", "neg", "pos", "abs", "eq", "ne",
                                 "lt", "le", "gt", "ge", "getitem", "itemgetter", "attrgetter", "not_", "truth")]
    + [("math", n) for n in ("ceil", "floor", "trunc", "prod", "sqrt", "log", "log2", "log10", "exp", "fsum",
                             "isclose", "isfinite", "isinf", "isnan")]   # dunders / __float__ (guarded)
)

# torch.Size's methods that hand its items on or ask them (not read their digits in C); any other is a reader
SIZE_PASSES = frozenset(("__getitem__", "__len__", "__iter__", "__add__", "__radd__", "__mul__", "__rmul__",
                         "__contains__", "__eq__", "__ne__", "__lt__", "__le__", "__gt__", "__ge__", "__hash__",
                         "__repr__", "__str__", "__reduce__", "__getnewargs__", "index", "count"))

# builtins that only iterate their first positional arguments (the items are never read as numbers by the
# builtin): those are not guarded; the rest are (``enumerate(sizes, n)``'s ``start``). torchvision's detection
# transform runs ``enumerate(sublist)`` over each image's traced sizes: guarding them pinned every image size.
ITERATED_FIRST = {"enumerate": 1}

_cache: dict = {}


def _owner_name(fn) -> tuple | None:
    """(owner, name) of a C callable, or None when ``fn`` is Python code (its reads are its own lines')."""
    if isinstance(fn, type):
        if getattr(fn, "_tj_range", False):   # symbolic.traced_range stands for range: range(20)[n]
            return ("builtins", "range")
        if _python_class(fn):
            return None
        return (fn.__module__, fn.__name__)
    if isinstance(fn, (types.BuiltinFunctionType, types.BuiltinMethodType)):
        owner = fn.__self__
        if owner is None or isinstance(owner, types.ModuleType):
            return (getattr(fn, "__module__", None) or getattr(owner, "__name__", "builtins"), fn.__name__)
        cls = owner if isinstance(owner, type) else type(owner)
        return (_qualified(cls), fn.__name__)
    if isinstance(fn, (types.MethodDescriptorType, types.WrapperDescriptorType, types.MethodWrapperType,
                       types.ClassMethodDescriptorType)):
        cls = getattr(fn, "__objclass__", None) or type(getattr(fn, "__self__", None))
        return (_qualified(cls), fn.__name__)
    return None


def _python_class(cls) -> bool:
    """A class whose construction runs Python code (its own methods, __init__ or __new__ in Python)? (C types of
    extension modules are heap types too in CPython 3.11: array.array, so the flag cannot tell.)"""
    if isinstance(vars(cls).get("__init__"), types.FunctionType) or isinstance(getattr(cls, "__new__", None),
                                                                              types.FunctionType):
        return True
    if isinstance(getattr(cls, "__init__", None), types.FunctionType):
        return True
    return any(isinstance(v, types.FunctionType) for v in vars(cls).values())


def _qualified(cls) -> str:
    mod = cls.__module__
    return cls.__qualname__ if mod == "builtins" else f"{mod}.{cls.__qualname__}"


def c_callable_outside_torch(fn) -> bool:
    """Is ``fn`` C code (a builtin or a C type) that is neither torch's nor numpy's?"""
    on = _owner_name(fn)
    return on is not None and not (on[0] or "").lstrip("_").startswith(("torch", "numpy", "tracejit", "Tensor"))


def reads_digits(fn) -> bool:
    """Is ``fn`` a C callable that may read a traced size's value without asking it (see the module)?"""
    key = fn if isinstance(fn, type) or getattr(fn, "__self__", None) is None or \
        isinstance(getattr(fn, "__self__", None), types.ModuleType) else (type(fn.__self__), fn.__name__)
    try:
        hit = _cache.get(key)
    except TypeError:   # unhashable
        return False
    if hit is None:
        hit = _cache[key] = _decide(fn)
    return hit


def _decide(fn) -> bool:
    on = _owner_name(fn)
    if on is None:
        return False
    owner, name = on
    if owner is not None and owner.startswith("_"):   # _functools, _operator, _collections: the public module
        owner = owner.lstrip("_")
    if owner is None:
        owner = "builtins" if getattr(builtins, name, None) is fn else ""
    if owner == "torch.Size":   # a C tuple: its methods are not recorded (``x.shape.numel()`` multiplies the
        return name not in SIZE_PASSES   # digits in C: hunt26); those that pass the items on are listed
    if owner.startswith(("torch", "numpy", "tracejit")) or owner in ("torch.Tensor", "Tensor"):
        return False   # recorded by the tracer / numpy_calls.py / tracejit's own
    return (owner, name) not in PASSES
