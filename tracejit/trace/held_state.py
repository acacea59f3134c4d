"""State forward may change outside a module's own ``__dict__`` (hunt25): the plain attributes of the objects
the modules hold (``self.state = SimpleNamespace(n=0)``; forward does ``self.state.n += 1``) and of the modules'
own classes (``type(self).calls += 1``, ``Model.seen.add(n)``).

python_state.py snapshots these beside the modules' own attributes and refuses a change the same way: the
program would keep the trace's value where eager's next call reads the new one. Default-deny: every held object
with a ``__dict__`` and every class along a module's MRO is looked at, except torch's and installed libraries'
(their counters and caches are theirs: a ``logging.Logger``'s ``_cache``, a library's warn-once flags) and the
private containers of a held object (``obj._cache``: a cache it fills as it is used, by convention). A class's
private container filled by forward (``Model._masks[n] = ...``) is refused as a module-level one is
(outer_state.py's ``_GRIDS``): the first trace that fills it, not the ones after.
"""
from __future__ import annotations

import os
import sys
import sysconfig
import types

import torch
from torch import nn

_TORCH_DIR = os.path.dirname(os.path.abspath(torch.__file__)) + os.sep
_TRACEJIT_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep
_SITE = tuple(os.path.abspath(p) + os.sep for p in {sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]})
_NOT_STATE = (nn.Module, torch.Tensor, type, types.ModuleType, types.FunctionType, types.MethodType,
              types.BuiltinFunctionType)
_libraries: dict = {}


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


def attributes(obj, fingerprint, containers) -> dict:
    """The fingerprints of ``obj``'s own plain attributes (a class: its data attributes, not its functions)."""
    out = {}
    for key, value in list(vars(obj).items()):
        if key.startswith("__") or isinstance(value, _NOT_STATE) or isinstance(value, (staticmethod, classmethod,
                                                                                        property)):
            continue
        if key.startswith("_") and isinstance(value, containers) and not isinstance(obj, type):
            continue   # a held object's private container: a cache it fills as it is used (module docstring)
        out[key] = fingerprint(value)
    return out
