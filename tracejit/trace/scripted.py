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


def install() -> tuple:
    """Route ScriptFunction calls and scripted modules' forward to their Python originals while a trace
    records (``get_tracer()``); returns what to restore. Installed once for all traces (capture.patches)."""
    script_fn_type = torch._C.ScriptFunction
    saved_call = script_fn_type.__dict__["__call__"]
    rsm = torch.jit.RecursiveScriptModule
    saved_forward = rsm.__dict__.get("forward")
    inherited_forward = torch.jit.ScriptModule.__dict__.get("forward")

    def traced_call(fn, *args, **kwargs):
        if _recording() is None:
            return saved_call(fn, *args, **kwargs)
        original = python_original_of_function(fn)
        if original is None:
            raise TraceError(f"a TorchScript function ({getattr(fn, 'qualified_name', fn)}) was called while tracing "
                             f"at {user_location(2)} and its Python original is not available, so tracejit cannot "
                             "record its ops; call the Python function instead")
        return original(*args, **kwargs)

    class TracedForward:
        """A data descriptor, so it wins over the ScriptMethod a scripted module caches in its __dict__."""

        def __get__(self, module, owner=None):
            if module is None:
                return self
            if _recording() is None:
                if "forward" in module.__dict__:
                    return module.__dict__["forward"]
                return inherited_forward.__get__(module, owner)
            cls = python_class_of_module(module)
            if cls is None:
                raise TraceError(f"a scripted module ({getattr(module, 'original_name', type(module).__name__)}) was "
                                 f"called while tracing at {user_location(2)} and its Python class is not "
                                 "available, so tracejit cannot record its ops; trace the Python module instead")
            return types.MethodType(_mro_dict(cls)["forward"], module)

        def __set__(self, module, value):
            module.__dict__["forward"] = value

    script_fn_type.__call__ = traced_call
    rsm.forward = TracedForward()
    return saved_call, saved_forward


def uninstall(saved: tuple) -> None:
    saved_call, saved_forward = saved
    torch._C.ScriptFunction.__call__ = saved_call
    if saved_forward is None:
        del torch.jit.RecursiveScriptModule.forward
    else:
        torch.jit.RecursiveScriptModule.forward = saved_forward


def _recording():
    tracer = get_tracer()
    return tracer if tracer is not None and tracer.frames else None
