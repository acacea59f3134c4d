"""The boundary rule at numpy's door: a traced number handed to numpy is guarded first.

numpy converts an ``int`` / ``float`` subclass to C without asking it (not even ``__index__``):
``np.arange(n)``, ``np.zeros((n, 2))``, ``np.linspace(0, 1, n)``, ``np.full(n, v)``,
``np.prod(x.shape)`` would freeze a traced size (symbolic.TracedInt) or a float computed from
sizes (provenance.TracedFloat) without a guard. So, written as a rule over numpy rather than a list
of its functions, while the calling thread traces:

- **every public numpy function** (each callable that is not a class or a ufunc, found at install
  time in ``numpy`` and in each public ``numpy.*`` module already imported: ``numpy.random``,
  ``numpy.linalg``, ``numpy.fft``, ...) is a stand-in (trace/patches.register_each) that specializes
  every traced number among its arguments, also inside tuples, lists and dicts (an equality guard at
  the user's line, as ``int(n)``), then calls numpy with plain numbers. A numpy function nobody
  listed is covered the same way;
- **every ufunc** (``np.sqrt(n)``, ``np.log2(n)``, ``arr * n``, ``np.float32(2.0) * n``), wherever it
  is bound: numpy asks an int subclass for ``__array_ufunc__``, which the traced numbers define here;
- **a Generator made inside forward** by ``np.random.default_rng(seed)``: its methods
  (``rng.normal(size=n)``) guard their arguments the same way.

Threads that do not trace call numpy itself (the stand-ins ask ``get_tracer()`` of the calling thread).
The methods of numpy arrays (``arr.reshape(n, -1)``: numpy's types cannot be patched) and numpy functions
bound to another name before tracing started (``from numpy import zeros`` at import time) are found in the
source instead (numpy_calls.py); ``arr[:n]`` by index_reads.py; numpy's scalar types ask the number.
"""
from __future__ import annotations

import functools
import importlib
import sys
import types

from . import patches, symfloat
from .provenance import TracedFloat
from .symbolic import TracedInt, get_tracer

try:
    import numpy as np
except ImportError:   # pragma: no cover - numpy is optional for torch
    np = None

_MAX_DEPTH = 6


def _plain(a, how: str, depth: int = 0):
    """``a`` with every traced number in it made plain, each guarded (or ``a`` itself if it holds none)."""
    if isinstance(a, TracedInt):
        return a._specialize(how)
    if isinstance(a, TracedFloat):
        return symfloat.guard_float(a, how)
    if depth >= _MAX_DEPTH:
        return a
    if isinstance(a, (tuple, list)):
        items = [_plain(i, how, depth + 1) for i in a]
        if all(x is y for x, y in zip(items, a)):
            return a
        if isinstance(a, list):
            return items
        if hasattr(a, "_fields"):   # a namedtuple
            return type(a)(*items)
        return type(a)(items) if type(a) is not tuple else tuple(items)
    if isinstance(a, dict):
        items = {k: _plain(v, how, depth + 1) for k, v in a.items()}
        return a if all(items[k] is a[k] for k in a) else items
    return a


def plain_arguments(what: str, args: tuple, kwargs: dict):
    """The arguments of a numpy call with their traced numbers specialized (guarded at the user's line)."""
    how = f"passed to {what} (numpy reads the number without asking it)"
    return tuple(_plain(a, how) for a in args), {k: _plain(v, how) for k, v in kwargs.items()}


def _guarding(original, what: str):
    """A stand-in for the numpy function ``original``: guards the tracing thread's traced numbers first."""
    @functools.wraps(original)
    def stand_in(*args, **kwargs):
        if get_tracer() is not None:
            args, kwargs = plain_arguments(what, args, kwargs)
        return original(*args, **kwargs)
    return stand_in


def _raw(a):
    if isinstance(a, TracedInt):
        return int.__int__(a)
    if isinstance(a, TracedFloat):
        return float.__float__(a)
    return a


def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
    """numpy's override protocol: a ufunc given a traced number guards it, then runs on plain numbers."""
    what = f"numpy.{ufunc.__name__}" + ("" if method == "__call__" else f".{method}")
    if get_tracer() is not None:
        inputs, kwargs = plain_arguments(what, inputs, kwargs)
    else:
        inputs = tuple(_raw(i) for i in inputs)
    return getattr(ufunc, method)(*inputs, **kwargs)


TracedInt.__array_ufunc__ = __array_ufunc__
TracedFloat.__array_ufunc__ = __array_ufunc__


# ---- every public numpy function -----------------------------------------------------------------
_SKIPPED_MODULES = ("numpy.testing", "numpy.typing", "numpy.f2py", "numpy.distutils", "numpy.doc",
                    "numpy.conftest", "numpy.tests")


# numpy 2 imports these public submodules on first use (``np.fft.rfftfreq``): imported at the first trace so
# that their functions are covered too; the heavier ``numpy.ma`` / ``numpy.polynomial`` are covered once imported
_LAZY = ("fft", "linalg", "random", "strings", "char", "rec")


def public_modules() -> list:
    """``numpy`` and its public submodules imported so far (no part of the name starts with ``_``)."""
    for name in _LAZY:
        if f"numpy.{name}" not in sys.modules:
            importlib.import_module(f"numpy.{name}")
    found = []
    for name, module in list(sys.modules.items()):
        if module is None or not (name == "numpy" or name.startswith("numpy.")):
            continue
        if any(p.startswith("_") for p in name.split(".")) or name.startswith(_SKIPPED_MODULES) or ".tests" in name:
            continue
        found.append(module)
    return found


def _is_function(obj) -> bool:
    if isinstance(obj, type) or (np is not None and isinstance(obj, np.ufunc)):
        return False   # classes keep isinstance working; ufuncs are covered by __array_ufunc__
    if isinstance(obj, (types.FunctionType, types.BuiltinFunctionType, types.MethodType)):
        return True
    return type(obj).__name__ == "_ArrayFunctionDispatcher"


_made: dict = {}   # (module name, name) -> (original, its stand-in): made once, installed at every trace


def _stand_in_for(module_name: str, name: str, original):
    key = (module_name, name)
    made = _made.get(key)
    if made is None or made[0] is not original:
        made = _made[key] = (original, _guarding(original, f"{module_name}.{name}()"))
    return made[1]


def numpy_functions() -> list[tuple[object, str, object]]:
    """(module, name, make_stand_in) for every public numpy function: what the stand-ins cover."""
    out = []
    for module in public_modules():
        for name, obj in list(vars(module).items()):
            if name.startswith("_") or not _is_function(obj):
                continue
            make = functools.partial(_stand_in_for, module.__name__, name)
            if obj is _DEFAULT_RNG:
                make = _guarded_default_rng(make)
            out.append((module, name, make))
    return out


@functools.lru_cache(maxsize=1)
def _guarded_generator_class():
    gen = np.random.Generator
    methods = {}
    for name in dir(gen):
        if name.startswith("_") or not callable(getattr(gen, name)):
            continue
        methods[name] = _generator_method(getattr(gen, name), f"numpy.random.Generator.{name}()")
    return type("Generator", (gen,), {**methods, "__module__": "numpy.random", "__doc__": gen.__doc__})


def _generator_method(unbound, what: str):
    @functools.wraps(unbound)
    def method(self, *args, **kwargs):
        if get_tracer() is not None:
            args, kwargs = plain_arguments(what, args, kwargs)
        return unbound(self, *args, **kwargs)
    return method


def _guarded_default_rng(make):
    """``np.random.default_rng(seed)`` in the tracing thread gives a Generator whose methods guard sizes."""
    def make_stand_in(original):
        guarding = make(original)

        @functools.wraps(original)
        def stand_in(*args, **kwargs):
            rng = guarding(*args, **kwargs)
            if get_tracer() is None or type(rng) is not np.random.Generator:
                return rng
            return _guarded_generator_class()(rng.bit_generator)
        return stand_in
    return make_stand_in


_DEFAULT_RNG = np.random.default_rng if np is not None else None
if np is not None:
    patches.register_each(numpy_functions)
