"""``float(size)`` and ``int(float of sizes)`` recorded in the reviewed modules whose size arithmetic uses them.

CPython's ``float(x)`` returns a plain float whatever ``x.__float__`` returns, and ``int(x)`` a plain int, so a
traced size passed to ``float()`` and a traced float passed to ``int()`` are guarded (``size == 64``). In
torchvision's detection models that pinned the image size of every program built without the original (ONNX,
a loaded file): the transform pads each image to ``int(math.ceil(float(h) / stride) * stride)``, the pooler
infers each level's scale from ``float(feature size) / float(image size)``.

While a thread traces, the name ``float`` (and ``int``) in each module of ``MODULES`` is a stand-in type, found
before the builtin by the module's own code only: for the tracing thread ``float(traced size)`` is a traced
float (recorded as ``size * 1.0``, the same double), ``int(traced float)`` is ``math.trunc`` of it (recorded:
``int()`` of a float truncates), ``int(traced size)`` the size itself; every other call, ``isinstance`` and
``issubclass`` are the builtin's. A traced float is as safe anywhere as ``h / 2`` is: every way it becomes a
plain value is guarded (number_escapes.py). The list is default-deny: a module joins it once each of its
``float(`` / ``int(`` calls was read (none feeds code that reads a float subclass's value without asking it).
"""
from __future__ import annotations

import builtins
import math
import sys

from . import patches
from .provenance import TracedFloat
from .symbolic import TracedInt, get_tracer
from .symfloat import float_op

# module -> why it is listed (each read by hand, torchvision 0.28)
MODULES = {
    "torchvision.models.detection.transform": "batch_images pads to int(math.ceil(float(size) / stride) * stride)",
    "torchvision.ops.poolers": "_infer_scale: float(feature size) / float(image size)",
}


class _Builtin(type):
    """The metaclass of a stand-in for a builtin type: isinstance, issubclass and attributes are the builtin's."""

    def __getattr__(cls, name):
        return getattr(cls._builtin, name)

    def __instancecheck__(cls, obj):
        return isinstance(obj, cls._builtin)

    def __subclasscheck__(cls, sub):
        return issubclass(sub, cls._builtin)

    def __call__(cls, *args, **kwargs):
        if len(args) == 1 and not kwargs and isinstance(args[0], (TracedInt, TracedFloat)) and get_tracer() is not None:
            return cls._of_traced_number(args[0])
        return cls._builtin(*args, **kwargs)


class traced_float(metaclass=_Builtin):
    """``float`` in a module of ``MODULES`` while tracing."""
    _builtin = builtins.float

    @staticmethod
    def _of_traced_number(x):
        return x if isinstance(x, TracedFloat) else float_op("mul", x, 1.0, depth=4)


class traced_int(metaclass=_Builtin):
    """``int`` in a module of ``MODULES`` while tracing."""
    _builtin = builtins.int

    @staticmethod
    def _of_traced_number(x):
        return x if isinstance(x, TracedInt) else math.trunc(x)


def _entries():
    """(module, name, make stand-in) for each module of ``MODULES`` imported by now."""
    out = []
    for name in MODULES:
        module = sys.modules.get(name)
        if module is not None:
            out += [(module, "float", lambda _original: traced_float), (module, "int", lambda _original: traced_int)]
    return out


patches.register_each(_entries)
