"""Attributes the first recording run changed and the next run writes again, identically (reach30).

trace/attempts.py records forward a second time where the first run only set the module up, or where a tensor
escaped a submodule call. The second run starts from the state the first left; a Python attribute the first run
changed (other than a set-up from None or scratch state) used to refuse it, whatever it was. transformers' Swin
clamps its window on every call that sees a small resolution: ``self.window_size = min(input_resolution)`` (under a
tracer ``torch.min(torch.tensor(input_resolution))``), the same value on every call at that resolution. That write
is a fixed point: eager's next call starts from what the last one left, so a program recorded from that state is
eager's answer as long as each call writes the same value again.

The rule (default-deny): such an attribute is accepted where

- the next run assigns it (``self.<name> = ...``, seen by trace/first_access.py's descriptor; an item written
  into a container, a write through ``__dict__`` or an unseen write: refused), and
- after that run it holds a value identical to what the first run left: plain values equal and of the same type;
  tensors of the same type, dtype, shape and device with equal elements; tuples and lists item by item; any
  other object the same object; and
- what the program would write there at a call is the same value: a plain Python value is fixed by the trace's
  guards; a tensor made from constants alone needs nothing; a tensor computed from the inputs (their sizes or
  data) or the parameters gets a value guard at the line of the write (``tolist() == <the trace's value>``: a
  call that would make eager write anything else is a GuardError, and a live program traces again), if it holds
  at most ``MAX_GUARDED_ELEMENTS`` elements and the trace keeps value guards (``guards=True``); a traced size
  gets a size guard. Anything else is refused.

The program does not write the attribute (it reads what the trace read, which is what eager reads at every call
the guards let through).

The same fixed-point rule holds within one run (``ReadThenWritten``): a tensor attribute forward reads and then
assigns, seen while tracing (trace/carried_state.py's bytecode scan sees only a read and a write in one code
object), is accepted only where the value written is the one read; else refused at the line of the write. And a
buffer assigned a no-op conversion of itself (``BufferEntries``) is put back, as eager leaves it.
"""
from __future__ import annotations

import contextlib
import sys

import torch
from torch import nn

from ..ir import SourceLoc
from ..ops.names import CONSTANT
from .escapes import _reads_data
from .guards import policy_allows
from .source import _skipped
from .symbolic import TracedInt, get_tracer

_MISSING = object()
MAX_GUARDED_ELEMENTS = 16   # a written tensor checked by value at each call: small (a size, a window, a flag)


def _store_location() -> SourceLoc | None:
    """The line that assigned the attribute: the innermost frame outside tracejit and ``nn.Module.__setattr__``."""
    f = sys._getframe(1)
    while f is not None and (_skipped(f.f_code.co_filename) or f.f_code is _MODULE_SETATTR):
        f = f.f_back
    return None if f is None else SourceLoc(f.f_code.co_filename, f.f_lineno, f.f_code.co_name)


_MODULE_SETATTR = nn.Module.__setattr__.__code__


def same_value(a, b) -> bool:
    """Is ``b`` the value ``a`` is (module docstring): the next call would read the same thing?"""
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        if type(a) is not type(b) or a.dtype != b.dtype or a.shape != b.shape or a.device != b.device:
            return False
        if a.is_sparse or a.is_quantized or a.is_nested or a.requires_grad != b.requires_grad:
            return a is b
        with torch._C.DisableTorchFunction():
            return bool(torch.equal(a, b))
    if isinstance(a, (tuple, list)) and type(a) is type(b):
        return len(a) == len(b) and all(same_value(x, y) for x, y in zip(a, b))
    if isinstance(a, (bool, int, float, complex, str, bytes, type(None))):
        return type(a) is type(b) and a == b
    return a is b


class Rewrites:
    """The attributes one run changed, checked against the next run (module docstring)."""

    def __init__(self, changed: list):
        # (id(object), name) -> (path, object, name, the value the first run left)
        self.wanted = {(id(obj), key): (path, obj, key, vars(obj).get(key)) for path, obj, key in changed}
        self.stored: set = set()
        self.refused: dict = {}   # (id(object), name) -> why, in words

    def store(self, inst, name: str, value) -> None:
        """``inst.<name> = value`` in the run being recorded (trace/first_access.Watch)."""
        key = (id(inst), name)
        if key not in self.wanted:
            return
        self.stored.add(key)
        why = self._check_written(value)
        if why is not None:
            self.refused.setdefault(key, why)

    @staticmethod
    def _check_written(value) -> str | None:
        tracer = get_tracer()
        if tracer is None:
            return "it was written outside the recording"
        loc = _store_location()
        if isinstance(value, TracedInt):
            tracer.guards.size(value, "written to an attribute the next call reads", int.__int__(value), loc)
            return None
        if isinstance(value, (tuple, list)):
            return None if not any(isinstance(v, (TracedInt, torch.Tensor)) for v in value) else \
                "it holds traced sizes or tensors"
        if not isinstance(value, torch.Tensor):
            return None   # a plain value: fixed by the trace's guards
        v = tracer.frames[-1].env.get(id(value)) if tracer.frames else None
        if v is None:
            return "the tensor written was not made where the trace saw it"
        if v.producer is not None and v.producer.op == CONSTANT:
            return None
        if v.producer is not None and not _reads_data(v):
            return None   # made from constants alone
        with torch._C.DisableTorchFunction():   # (not recorded)
            elements = value.numel()
            expected = value.tolist() if elements <= MAX_GUARDED_ELEMENTS else None
        if expected is None or not policy_allows(tracer.guards.policy, "value"):
            return (f"the tensor written depends on the inputs or parameters and cannot be checked by value at "
                    f"each call ({elements} elements, guards={tracer.guards.policy!r})")
        tracer.guards.add("value", "tolist", (v,), expected, expected,
                          "the value forward writes to a module attribute that the next call reads (the trace "
                          "holds for calls that write the value the trace found there)", loc)
        return None

    def held(self) -> list:
        """``(path, module, attribute, value)`` of each attribute as the recorded run left it."""
        return [(path, obj, name, vars(obj).get(name)) for path, obj, name, _ in self.wanted.values()]

    @classmethod
    def again(cls, held: list) -> "Rewrites | None":
        """The same attributes, for another recording from the state ``held`` names (the checker's retrace)."""
        return cls([(path, obj, name) for path, obj, name, _ in held]) if held else None

    def problem(self) -> str | None:
        """After the next run: why an attribute the first run changed is not rewritten identically (None: none)."""
        for key, (path, obj, name, first) in self.wanted.items():
            where = f"attribute {name!r} of {'the module' if not path else repr(path)}"
            if key in self.refused:
                return f"{where} changed, and the next run's write cannot be checked: {self.refused[key]}"
            if key not in self.stored:
                return f"{where} changed, and the next run did not assign it again"
            if not same_value(first, vars(obj).get(name)):
                return f"{where} changed, and the next run wrote another value"
        return None


@contextlib.contextmanager
def held(rewritten):
    """Inside: each ``(path, module, attribute, value)`` of ``rewritten`` holds that value again (the state the trace
    recorded from: the checker's retrace starts there); on leaving, what it held before."""
    kept = [(m, key, vars(m).get(key, _MISSING)) for _, m, key, _ in rewritten]
    for _, m, key, value in rewritten:
        m.__dict__[key] = value
    try:
        yield
    finally:
        for m, key, value in kept:
            if value is _MISSING:
                m.__dict__.pop(key, None)
            else:
                m.__dict__[key] = value


def exact_alias(new, old) -> bool:
    """Is ``new`` the tensor ``old`` is, seen through another object (its memory, offset, sizes, strides, dtype):
    what trace/self_results.py hands back for an op that returned its input (``x.to(x.dtype)``)?"""
    if not (isinstance(new, torch.Tensor) and isinstance(old, torch.Tensor)) or type(new) is not type(old):
        return False
    with torch._C.DisableTorchFunction():
        try:
            return (new.dtype == old.dtype and new.device == old.device and new.shape == old.shape and
                    new.stride() == old.stride() and new.storage_offset() == old.storage_offset() and
                    new.requires_grad == old.requires_grad and
                    new.untyped_storage().data_ptr() == old.untyped_storage().data_ptr() and
                    new.untyped_storage().nbytes() == old.untyped_storage().nbytes())
        except (RuntimeError, NotImplementedError):   # no storage (meta, sparse, a subclass): not known the same
            return False


class BufferEntries:
    """The buffers of a hierarchy before a run: a buffer forward assigned a no-op conversion of itself
    (``self.pos_encoding = self.pos_encoding.to(device, dtype)``: CTRL) is the same tensor in eager (``to`` returns
    its input); while tracing, self_results hands back a view, which would replace the buffer. ``restore`` puts the
    original back where the new entry is an exact alias of it: eager's state, and no change to refuse."""

    def __init__(self, module: nn.Module | None):
        self.before = [] if module is None else [(m, dict(m._buffers)) for m in module.modules()]

    def restore(self) -> None:
        for m, buffers in self.before:
            for name, old in buffers.items():
                new = m._buffers.get(name, _MISSING)
                if new is not old and exact_alias(new, old):
                    m._buffers[name] = old


def close_value(a, b) -> bool:
    """``same_value``, or a Python number and a 0-d tensor of that value (Swin's window: ``min(res)`` in eager, a
    0-d tensor while tracing): eager's next call computes the same with either."""
    if same_value(a, b):
        return True
    for n, t in ((a, b), (b, a)):
        if isinstance(n, (int, float)) and not isinstance(n, bool) and isinstance(t, torch.Tensor) and \
                t.dim() == 0 and not t.is_complex() and not t.requires_grad:
            with torch._C.DisableTorchFunction():
                return t.item() == n
    return False


class ReadThenWritten:
    """Attributes one run READ and then assigned a tensor (or assigned over a tensor), outside the rules above:
    the program keeps the value the run read, eager's next call reads the one it wrote. Accepted only as a fixed
    point (the value written is ``close_value`` to the one read, checked at each call where it depends on the
    inputs, as ``Rewrites`` checks it); anything else is refused with the line (hunt-style silent case before
    session 30: a running maximum kept in a tensor attribute, set in a helper method, answered the trace's)."""

    def __init__(self):
        self.entries: dict = {}   # (id(object), name) -> [object, name, the value read, why refused or None, loc]

    def store(self, inst, name: str, value, old) -> None:
        key = (id(inst), name)
        if key not in self.entries:
            self.entries[key] = [inst, name, old, None, _store_location()]
        why = Rewrites._check_written(value)
        if why is not None and self.entries[key][3] is None:
            self.entries[key][3] = why

    def problems(self) -> list:
        """``(what, loc)`` of each attribute whose last write is not the value the run read (or not checkable)."""
        out = []
        for inst, name, old, why, loc in self.entries.values():
            where = f"`{name}` of {type(inst).__name__}"
            if why is not None:
                out.append((f"forward read {where} and then wrote it, and the value written cannot be checked at "
                            f"each call: {why}", loc))
            elif not close_value(old, vars(inst).get(name, _MISSING)):
                out.append((f"forward read {where} and then wrote another value (eager's next call reads the new "
                            "one; the program would keep the one this trace read)", loc))
        return out


def note_store(inst, name: str, value) -> None:
    """Called by trace/first_access.Watch on every attribute store it sees while a trace is on."""
    tracer = get_tracer()
    watch = getattr(tracer, "python_state", None) if tracer is not None else None
    if watch is None:
        return
    rewrites = watch.rewrites
    if rewrites is not None and (id(inst), name) in rewrites.wanted:
        rewrites.store(inst, name, value)
        return
    old = vars(inst).get(name, _MISSING)
    if watch.first_access.get((id(inst), name)) != "load" or old is _MISSING or old is None:
        return   # written before any read (scratch), or set up from None / added: python_state's own rules
    if value is old:
        return   # the same object assigned again: nothing changes
    if (isinstance(old, torch.Tensor) or isinstance(value, torch.Tensor)) and not exact_alias(value, old):
        watch.read_then_written.store(inst, name, value, old)
