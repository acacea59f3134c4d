"""``torch.backends`` flags read by traced code are guarded at the line that read them (hunt20 C).

``if torch.backends.cudnn.enabled:``, ``torch.backends.mkldnn.is_available()``,
``torch.backends.cuda.matmul.allow_tf32``, ``torch.backends.mha.get_fastpath_enabled()``: the answer is
process state the trace would freeze; after ``torch.backends.cudnn.enabled = False`` (or in another process,
after save / load) eager takes the other branch. global_state.py guards ``torch.is_*()`` / ``get_*()`` readers;
this module does the same for ``torch.backends``, found by kind rather than by a list of flags:

- every attribute read from a ``torch.backends`` flag module (``PropModule``: cudnn, mkldnn, opt_einsum,
  quantized, xnnpack, ...) whose answer is a bool, number, text or enum (a ``ContextProp``, any descriptor);
- every attribute of ``torch.backends.cuda.matmul`` (``cuBLASModule.__getattr__``);
- every reader function of a ``torch.backends`` module (a name starting with ``is_`` / ``are_`` / ``get_`` or
  ending with ``_enabled``, ``version``, ``preferred_*``), called with no argument.

Each becomes a ``state`` guard whose test is the read's text (``torch.backends.cudnn.enabled``,
``torch.backends.mkldnn.is_available()``; ``str(...)`` for an enum), evaluated again at every call
(ir/state_tests.py). Only reads made by user code count: torch's own (``F.batch_norm`` passes
``cudnn.enabled`` to the op as a kernel choice) and tracejit's are not guarded, and neither are reads of
a reader function bound to another name before the trace (``from torch.backends.mkldnn import is_available``).
"""
from __future__ import annotations

import enum
import importlib
import pkgutil
import sys

import torch
import torch.backends as _backends

from ..ir.state_tests import backends_reader_name
from . import patches
from .source import _skipped, user_location
from .symbolic import get_tracer


def _guard(path: str, call: bool, result) -> None:
    """Record a state guard on ``torch.backends.<path>`` (``()`` when ``call``) answering ``result``."""
    tracer = get_tracer()
    if tracer is None or not tracer.frames or not _user_read():
        return
    if isinstance(result, (bool, int, float, str)):
        expected, by_name = result, False
    elif isinstance(result, enum.Enum):
        expected, by_name = str(result), True
    else:
        return   # a module, a function, a cache object: no answer of its own
    text = f"torch.backends.{path}{'()' if call else ''}"
    test = f"str({text})" if by_name else text
    loc = user_location(3)
    tracer.ledger.add("state", f"`{test}` read a torch.backends flag", loc, expected, warn=False)
    tracer.guards.add("state", test, (), expected, expected, f"the trace read a torch.backends flag ({test})", loc)


def _user_read() -> bool:
    """Is the read made by user code (the first frame outside this module, the stand-ins and the backends)?"""
    f = sys._getframe(3)
    while f is not None and f.f_code.co_filename.startswith(_backends.__path__[0]):
        f = f.f_back
    return f is not None and not _skipped(f.f_code.co_filename)


def _short(module_name: str) -> str:
    return module_name[len("torch.backends."):]


def _prop_getattribute(original):
    def stand_in(self, name):
        value = original(self, name)
        if get_tracer() is not None and not name.startswith("_") and name != "m":
            path = f"{_short(object.__getattribute__(self, '__name__'))}.{name}"
            if callable(value) and backends_reader_name(name):
                return _reader(value, path)
            _guard(path, False, value)
        return value
    return stand_in


def _reader(fn, path: str):
    def read(*args, **kwargs):
        result = fn(*args, **kwargs)
        if not args and not kwargs:
            _guard(path, True, result)
        return result
    read.__name__ = getattr(fn, "__name__", path)
    read.__wrapped__ = fn
    return read


def _cublas_getattr(original):
    def stand_in(self, name):
        value = original(self, name)
        if get_tracer() is not None:
            _guard(f"cuda.matmul.{name}", False, value)
        return value
    return stand_in


def _function_stand_in(path: str):
    def make(original):
        def stand_in(*args, **kwargs):
            result = original(*args, **kwargs)
            if not args and not kwargs and get_tracer() is not None:
                _guard(path, True, result)
            return result
        stand_in.__name__ = getattr(original, "__name__", path)
        stand_in.__doc__ = getattr(original, "__doc__", None)
        stand_in.__wrapped__ = original
        return stand_in
    return make


def _plain_modules():
    """The torch.backends submodules that are plain modules (not PropModules) and their reader functions."""
    for info in pkgutil.iter_modules(_backends.__path__):
        if info.name.startswith("_"):
            continue
        try:
            mod = importlib.import_module(f"torch.backends.{info.name}")
        except Exception:  # noqa: BLE001  (a backend this build cannot import)
            continue
        mod = getattr(_backends, info.name, mod)
        if isinstance(mod, _backends.PropModule):
            continue
        for name, value in list(vars(mod).items()):
            if backends_reader_name(name) and callable(value) and not isinstance(value, type) and \
                    getattr(value, "__module__", "") == mod.__name__:
                yield mod, name, f"{info.name}.{name}"


patches.register(_backends.PropModule, "__getattribute__", _prop_getattribute)
for _mod, _name, _path in _plain_modules():
    patches.register(_mod, _name, _function_stand_in(_path))
_cuda = sys.modules.get("torch.backends.cuda")
if _cuda is not None and hasattr(_cuda, "cuBLASModule"):
    patches.register(_cuda.cuBLASModule, "__getattr__", _cublas_getattr)
