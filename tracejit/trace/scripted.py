"""TorchScript met while tracing is traced through its Python original, never frozen.

A ``torch.jit.ScriptFunction`` (also what ``torch.jit._script_if_tracing``
helpers compile to) keeps its Python function; a scripted module keeps its
Python class. While tracing, calling either runs that Python code, so its ops
are recorded. Without an original the call is refused with the line that made it
(its result would otherwise be captured as a constant).
"""
from __future__ import annotations

import types

import torch

from ..errors import TraceError
from .source import user_location
from .symbolic import get_tracer


def python_original_of_function(fn):
    return getattr(fn, "_torchdynamo_inline", None)


def python_class_of_module(module):
    concrete = getattr(module, "_concrete_type", None)
    cls = getattr(concrete, "py_class", None) if concrete is not None else None
    if cls is None or not isinstance(cls, type) or "forward" not in _mro_dict(cls):
        return None
    return cls


def _mro_dict(cls) -> dict:
    merged: dict = {}
    for c in reversed(cls.__mro__):
        if c is torch.nn.Module or c is object:
            continue
        merged.update(c.__dict__)
    return merged


def stand_ins() -> list:
    """(owner, attribute, make_stand_in) for trace/patches.register: ScriptFunction calls and scripted
    modules' ``forward`` go to their Python originals while the calling thread traces."""
    return [(torch._C.ScriptFunction, "__call__", _script_function_call),
            (torch.jit.RecursiveScriptModule, "__getattribute__", _scripted_module_getattribute)]


def _script_function_call(original_call):
    def __call__(fn, *args, **kwargs):
        if _recording() is None:
            return original_call(fn, *args, **kwargs)
        original = python_original_of_function(fn)
        if original is None:
            raise TraceError(f"a TorchScript function ({getattr(fn, 'qualified_name', fn)}) was called while tracing "
                             f"at {user_location(2)} and its Python original is not available, so tracejit cannot "
                             "record its ops; call the Python function instead")
        return original(*args, **kwargs)
    return __call__


def _scripted_module_getattribute(original_getattribute):
    """``forward`` of a scripted module, looked up while tracing, is its Python class's forward (a scripted
    module caches its ScriptMethod in its instance dict, which a class attribute would not override)."""
    def __getattribute__(module, name):
        if name != "forward" or _recording() is None:
            return original_getattribute(module, name)
        cls = python_class_of_module(module)
        if cls is None:
            raise TraceError(f"a scripted module ({getattr(module, 'original_name', type(module).__name__)}) was "
                             f"called while tracing at {user_location(2)} and its Python class is not "
                             "available, so tracejit cannot record its ops; trace the Python module instead")
        return types.MethodType(_mro_dict(cls)["forward"], module)
    return __getattribute__


def _recording():
    tracer = get_tracer()
    return tracer if tracer is not None and tracer.frames else None
