"""State forward may change outside a module's own ``__dict__`` (hunt25): the plain attributes of the objects
the modules hold (``self.state = SimpleNamespace(n=0)``; forward does ``self.state.n += 1``) and of the modules'
own classes (``type(self).calls += 1``, ``Model.seen.add(n)``).

python_state.py snapshots these beside the modules' own attributes and refuses a change the same way: the
program would keep the trace's value where eager's next call reads the new one. Default-deny: every held object
with a ``__dict__`` and every class along a module's MRO is looked at, except torch's and installed libraries'
(their counters and caches are theirs: a library's warn-once flags) and the private attributes of the standard
library's objects (a ``logging.Logger``'s ``_cache``). A private container filled by forward, a class's
(``Model._masks[n] = ...``) or a held object's (``self.helper._cache[n] = torch.zeros(n)``, later updated in
place), is refused as a module-level one is (outer_state.py's ``_GRIDS``): the first trace that fills it, not the
ones after (call the module once before tracing). Before hunt26 a held object's private containers were left
out as caches by convention; the program then kept making the trace's fresh tensor where eager reused and
updated the cached one.
"""
from __future__ import annotations

import inspect
import random
import os
import re
import sys
import sysconfig
import types

import numpy.random as npr   # numpy is a dependency (pyproject.toml)
import torch
from torch import nn

from ..ir import SourceLoc
from . import first_access

_TORCH_DIR = os.path.dirname(os.path.abspath(torch.__file__)) + os.sep
_TRACEJIT_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep
_SITE = tuple(os.path.abspath(p) + os.sep for p in {sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]})
_STDLIB = tuple(os.path.abspath(p) + os.sep for p in {sysconfig.get_paths()["stdlib"],
                                                      sysconfig.get_paths()["platstdlib"]})
_NOT_STATE = (nn.Module, torch.Tensor, type, types.ModuleType, types.FunctionType, types.MethodType,
              types.BuiltinFunctionType)
_libraries: dict = {}
_NP_RNGS = (npr.Generator, npr.RandomState, npr.BitGenerator)


def _library_class(cls: type) -> bool:
    """Is ``cls`` torch's, tracejit's or an installed library's (its module's file under site-packages)?"""
    name = cls.__module__
    r = _libraries.get(name)
    if r is None:
        file = getattr(sys.modules.get(name), "__file__", None) or ""
        path = os.path.abspath(file) if file else ""
        r = _libraries[name] = name.startswith(("torch.", "tracejit.")) or name in ("torch", "tracejit") or (
            bool(path) and (path.startswith((_TORCH_DIR, _TRACEJIT_DIR)) or path.startswith(_SITE)))
    return r


def held(module: nn.Module) -> dict:
    """``{path: object}``: each held object (``"head.state"``) and each user class of the hierarchy
    (``"<class Model>"``) whose attributes python_state fingerprints."""
    out: dict = {}
    for path, m in module.named_modules(remove_duplicate=True):
        for cls in type(m).__mro__:
            if cls is nn.Module or cls is object or _library_class(cls):
                continue
            out.setdefault(f"<class {cls.__qualname__}>", cls)
        for key, value in m.__dict__.items():
            if isinstance(value, _NOT_STATE) or not hasattr(value, "__dict__") or _library_class(type(value)):
                continue
            out.setdefault(f"{path}.{key}" if path else key, value)
    return out


def user_class(cls: type) -> bool:
    """Is ``cls`` a class of the user's own files (not torch's, tracejit's, an installed library's, the standard
    library's or a builtin's), and not a module class (those along the traced hierarchy are ``held``)?"""
    if issubclass(cls, nn.Module) or _library_class(cls) or _stdlib_class(cls):
        return False
    return bool(getattr(sys.modules.get(cls.__module__), "__file__", None))


def _stdlib_class(cls: type) -> bool:
    """Is ``cls`` defined in a file of the standard library (``logging.Logger``; ``types.SimpleNamespace`` too)?"""
    file = getattr(sys.modules.get(cls.__module__), "__file__", None) or ""
    path = os.path.abspath(file) if file else ""
    return bool(path) and path.startswith(_STDLIB) and not path.startswith(_SITE)


def attributes(obj, fingerprint) -> dict:
    """The fingerprints of ``obj``'s own plain attributes (a class: its data attributes, not its functions); a
    standard-library object's private attributes are left out (a ``logging.Logger``'s ``_cache``: the module
    docstring)."""
    private_ok = not isinstance(obj, type) and _stdlib_class(type(obj))
    out = {}
    for key, value in list(vars(obj).items()):
        if isinstance(value, first_access.Watch):   # a recording's pass-through (another thread's trace may put
            if value.shadowed is first_access.MISSING:   # it on or take it off meanwhile): the class's own value
                continue
            value = value.shadowed
        if key.startswith("__") or isinstance(value, _NOT_STATE) or isinstance(value, (staticmethod, classmethod,
                                                                                        property)):
            continue
        if private_ok and key.startswith("_"):
            continue
        out[key] = fingerprint(value)
    return out


def write_line(obj, key, patterns) -> SourceLoc | None:
    """The line of a held object's own class (not ``__init__``) that writes its attribute ``key`` (``self._cache[n] =
    ...`` in the helper's method); ``patterns(target, key)``: python_state's write regexes. None for a module, a
    class, or where the source cannot be read."""
    if isinstance(obj, (nn.Module, type)):
        return None
    return line_outside_init(type(obj), [re.compile(p) for p in patterns("self", key)])


def line_outside_init(cls, compiled) -> SourceLoc | None:
    """The first line of ``cls``'s source, outside ``__init__``, that one of the ``compiled`` regexes finds; None
    where none does or the source cannot be read."""
    try:
        lines, first = inspect.getsourcelines(cls)
        filename = inspect.getsourcefile(cls)
    except (OSError, TypeError):
        return None
    in_init = False
    for i, line in enumerate(lines):
        text = line.strip()
        if text.startswith("def "):
            in_init = text.startswith("def __init__")
        if not in_init and any(p.search(text) for p in compiled):
            return SourceLoc(filename, first + i, "")
    return None


def _rng_state(value):
    """The state of a random generator object of Python's or numpy's (``random.Random``, ``numpy.random.Generator`` /
    ``RandomState`` / a bit generator), as text; None for any other object. Its draws change that state in C, where
    no attribute shows it: a generator held by a module (``self.rng = random.Random(0)``; ``self.rng.random()`` in
    forward) or bound to a global is compared by its state (hunt27: the program kept the trace's draw, silently)."""
    if isinstance(value, random.Random):
        return repr(value.getstate())
    if isinstance(value, _NP_RNGS):
        state = value.bit_generator.state if hasattr(value, "bit_generator") else (
            value.get_state(legacy=False) if hasattr(value, "get_state") else value.state)
        return repr(state)
    return None


def object_fingerprint(value):
    """python_state's fingerprint of an object that is not plain data or a container: its identity, and a random
    generator's state (``_rng_state``)."""
    state = _rng_state(value)
    return ("o", id(value)) if state is None else ("rng", id(value), state)


def is_generator(value) -> bool:
    return _rng_state(value) is not None


class DrawnKey(str):
    """An attribute name whose generator forward drew from: its line is the draw (``self.rng.random()``), any call."""
