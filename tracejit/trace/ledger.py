"""The ledger: every value a trace froze, as data.

Each entry says what kind of value was frozen, where (the user's source line)
and what value was seen. Kinds:

    value_read   Python read a value out of a tensor (bool, item, int, float, tolist, numpy)
    iteration    iterating over a tensor fixed the number of items
    size         a size was used as a Python int (branch, int(), range, float math)
    constant     a tensor that is neither input, parameter nor buffer was captured
    device       a tensor's device was read
    training     the module's training flag at trace time
    nondeterministic  the trace holds a random op (checked outputs will differ)
    autograd_function a custom torch.autograd.Function was recorded as its forward's ops
    outplace_view     _force_outplace recorded an in-place op on a view out of place (its base is not updated)
    state        global torch state read by the traced code (guarded: trace/global_state.py)
    python_state Python state, a draw, a clock or a caught exception the trace froze, accepted with
                 allow_frozen_python_state=True (trace/python_state.py)
"""
from __future__ import annotations

from typing import Any

import torch

from ..ir import SourceLoc
from ..records import FrozenRecord
from .source import warn_at


INCORRECT = "might cause the trace to be incorrect"

# torch.jit's tracer warning for each way Python reads a value out of a tensor: users filter on these
# phrases (warnings.filterwarnings(message=...)), so tracejit's warnings start with the same words.
TORCH_PHRASES = {
    "__bool__": f"Converting a tensor to a Python boolean {INCORRECT}",
    "__int__": f"Converting a tensor to a Python integer {INCORRECT}",
    "__float__": f"Converting a tensor to a Python float {INCORRECT}",
    "__index__": f"Converting a tensor to a Python index {INCORRECT}",
    "item": f"Converting a tensor to a Python number {INCORRECT}",
    "tolist": f"Converting a tensor to a Python list {INCORRECT}",
    "numpy": f"Converting a tensor to a NumPy array {INCORRECT}",
    "iteration": f"Iterating over a tensor {INCORRECT}",
    "len": f"Using len to get tensor shape {INCORRECT}",
}


def torch_phrase(key: str) -> str:
    """torch.jit's opening words for a frozen value of this kind (a generic one when torch has none)."""
    return TORCH_PHRASES.get(key, f"Reading a Python value from a traced tensor {INCORRECT}")


class LedgerEntry(FrozenRecord):
    """A value the trace froze: ``kind``, ``message``, ``source`` (a SourceLoc or None), ``value`` (the value
    seen), ``guard`` (the tracejit::guard node checking it, or None: neither compared nor shown)."""
    __slots__ = _fields = ("kind", "message", "source", "value", "guard")
    _compared = _shown = ("kind", "message", "source", "value")

    def __init__(self, kind: str, message: str, source: SourceLoc | None, value: Any = None, guard: Any = None):
        object.__setattr__(self, "kind", kind)
        object.__setattr__(self, "message", message)
        object.__setattr__(self, "source", source)
        object.__setattr__(self, "value", value)
        object.__setattr__(self, "guard", guard)

    @property
    def filename(self) -> str | None:
        return self.source.filename if self.source else None

    @property
    def lineno(self) -> int | None:
        return self.source.lineno if self.source else None

    def __str__(self) -> str:
        where = f"{self.source}: " if self.source else ""
        return f"{where}[{self.kind}] {self.message} (value seen: {self.value!r})"


class Ledger:
    """Collects entries while tracing; warns for the kinds that can make a trace wrong.

    The ledger is a view of the trace's guards (an entry with ``guard`` set is checked at every
    call by that ``tracejit::guard`` node) plus the entries that need no check (constants,
    device reads, random ops, or guards switched off with ``guards=False``).
    """

    WARN_KINDS = ("value_read", "iteration", "size", "constant", "autograd_function", "outplace_view", "metadata",
                  "python_state")

    def __init__(self, emit_warnings: bool = True, warned: set | None = None):
        self.entries: list[LedgerEntry] = []
        self.emit_warnings = emit_warnings
        self.warned = set() if warned is None else warned   # warnings given (shared by a recording's runs)

    def add(self, kind: str, message: str, source: SourceLoc | None, value: Any = None, warn: bool = True) -> None:
        entry = LedgerEntry(kind, message, source, _plain(value))
        self.entries.append(entry)
        if warn and self.emit_warnings and kind in self.WARN_KINDS:
            said = message if INCORRECT in message else f"{message}; this {INCORRECT}"
            text = f"{said}. The trace fixed the value {entry.value!r}; it may be wrong for other inputs."
            if (text, repr(source)) not in self.warned:   # a recording run again (trace/attempts.py) warns once
                self.warned.add((text, repr(source)))
                warn_at(text, source, stacklevel=3)


def _plain(value):
    """A small, printable copy of a seen value (no tensors kept alive)."""
    if isinstance(value, torch.Tensor):
        if value.numel() <= 8:
            return value.detach().cpu().tolist()
        return f"tensor(shape={tuple(value.shape)}, dtype={value.dtype})"
    if isinstance(value, int) and not isinstance(value, bool):
        return int(value)
    return value


def attach_guard(ledger: Ledger, node) -> None:
    """Point the latest entry at the guard node made for it."""
    if ledger.entries and ledger.entries[-1].guard is None:
        ledger.entries[-1] = ledger.entries[-1].replace(guard=node)
