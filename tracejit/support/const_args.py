"""The call-time check of an argument traced as a constant that is not a bool, int, float, str or None (hunt21).

The generated code compared only those with the traced value; any other non-tensor argument (a ``torch.dtype``,
a device, an enum member, a function, complex or bytes, a config object: ``SimpleNamespace``, a dataclass) was
not looked at: a call with another one answered with the traced one silently (torch.jit.trace's too). Now
``differs(value)`` decides (default-deny: a kind nobody listed is compared by identity):

- the traced object itself passes, unless it is an object whose plain attributes changed since the trace
  (support/global_guards.guardable's plain data; a mutable config passed again after ``o.k = 3.0``);
- plain data (complex, bytes, tuples / lists / dicts of them, enums) by value, as a ``global`` guard compares it;
- dtypes, devices, layouts and memory formats by equality (same type);
- another object of the same type with a ``__dict__`` by its plain attributes and the identity of the others;
- anything else (a function, a module): another object differs.

>>> import types
>>> check = ConstArgument(types.SimpleNamespace(k=2.0))
>>> check.differs(types.SimpleNamespace(k=2.0)), check.differs(types.SimpleNamespace(k=3.0))
(False, True)
>>> ConstArgument(torch.float32).differs(torch.float16), ConstArgument(abs).differs(abs)
(True, False)
"""
from __future__ import annotations

import torch

from .global_guards import guardable

_TORCH_VALUES = (torch.dtype, torch.device, torch.layout, torch.memory_format)


def _state(obj) -> tuple | None:
    """``obj``'s attributes: plain data by value, the rest by identity; None without a ``__dict__``."""
    attrs = getattr(obj, "__dict__", None)
    if not isinstance(attrs, dict):
        return None
    out = []
    for k, v in list(attrs.items()):
        plain = guardable(v)
        out.append((k, plain if plain is not None else ("object", id(v))))
    return tuple(out)


class ConstArgument:
    """The constant an argument was traced with, and what it was then (module docstring)."""
    __slots__ = ("const", "plain", "state")

    def __init__(self, const):
        self.const = const
        self.plain = guardable(const)
        self.state = _state(const) if self.plain is None else None

    def differs(self, value) -> bool:
        const = self.const
        if self.plain is not None:
            return type(value) is not type(const) or guardable(value) != self.plain
        if type(value) is not type(const):
            return True
        if isinstance(const, _TORCH_VALUES):
            return value != const
        if self.state is not None:
            return _state(value) != self.state
        return value is not const
