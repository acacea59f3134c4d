"""Which comes first in one traced call of a module: a read of an attribute, or a write? (hunt27)

python_state.py refuses a plain attribute that forward changes: the program cannot replay the write, and what
the next call reads would be frozen. One kind of write is no state at all: an attribute that forward WRITES
BEFORE ANY READ in the call (scratch state: transformers' ``FunnelAttentionStructure.seq_len``, set from the input
on every call and read later in the same call). Its value before the call never reaches the output, so the
trace is valid on every call; only the attribute's value after a call of the program differs from eager's (the
program does not replay Python writes: python_state.py's ledger entry says so).

Which access comes first is seen while tracing, not guessed from bytecode (a read in another method, a branch
around the write): for the modules of the traced hierarchy, each name that some method of the module's class
(torch's own classes left out) stores with ``self.<name> = ...`` gets, for the time of the recording, a data
descriptor on the class that passes every read and write through to the instance's ``__dict__`` (or the class
attribute it shadows) and notes, for the tracing thread only, whether the first access of each (instance, name)
was a read or a write. Default-deny: a name whose first access is not seen (a class with its own
``__getattribute__`` / ``__setattr__`` or ``__slots__``, a write straight into ``__dict__``, an access from another
thread) counts as read first, and stays refused.
"""
from __future__ import annotations

import dis
import threading
import types
from functools import lru_cache

import torch
from torch import nn

from . import rewrites
from .symbolic import TracedInt, get_tracer

MISSING = object()
_lock = threading.Lock()
_installed: dict = {}   # (class, name) -> [count, the class's own attribute it shadows or MISSING]


def _codes(code):
    yield code
    for c in code.co_consts:
        if isinstance(c, types.CodeType):
            yield from _codes(c)


@lru_cache(maxsize=1024)
def candidates(cls: type) -> frozenset:
    """The names a method of ``cls`` (its own classes along the MRO, not torch's) stores on ``self``."""
    if cls.__getattribute__ is not object.__getattribute__ or cls.__setattr__ not in (
            nn.Module.__setattr__, object.__setattr__):
        return frozenset()
    names: set = set()
    for klass in cls.__mro__:
        if klass.__module__.startswith("torch") or klass is object:
            continue
        if "__slots__" in vars(klass):
            return frozenset()
        for fn in vars(klass).values():
            code = getattr(getattr(fn, "__func__", fn), "__code__", None)
            if not isinstance(code, types.CodeType) or code.co_name == "__init__":
                continue
            for c in _codes(code):
                if not c.co_varnames or c.co_varnames[0] != "self":
                    continue
                ins = [i for i in dis.get_instructions(c) if i.opname not in ("CACHE", "EXTENDED_ARG", "NOP")]
                for k, i in enumerate(ins[1:], 1):   # `self.<name> = v`: LOAD_FAST self, STORE_ATTR name
                    if i.opname == "STORE_ATTR" and ins[k - 1].opname == "LOAD_FAST" and ins[k - 1].argval == "self":
                        names.add(i.argval)
    out = set()
    for name in names:
        if name.startswith("__") or name == "training":
            continue
        found = next((vars(k)[name] for k in cls.__mro__ if name in vars(k)), MISSING)
        if found is MISSING or not (hasattr(type(found), "__set__") or hasattr(type(found), "__delete__")):
            out.add(name)   # a property / slot of the class's own is its business: not looked at
    return frozenset(out)


class Watch:
    """A data descriptor passing ``name`` through to the instance and noting its first access (module docstring)."""

    def __init__(self, name: str, shadowed):
        self.name, self.shadowed = name, shadowed

    @staticmethod
    def _note(inst, name, kind) -> None:
        tracer = get_tracer()
        log = getattr(getattr(tracer, "python_state", None), "first_access", None) if tracer is not None else None
        if log is not None:
            log.setdefault((id(inst), name), kind)

    def __get__(self, inst, owner=None):
        if inst is None:
            if self.shadowed is not MISSING:
                return self.shadowed.__get__(None, owner) if hasattr(self.shadowed, "__get__") else self.shadowed
            raise AttributeError(self.name)
        self._note(inst, self.name, "load")
        space = inst.__dict__
        if self.name in space:
            return space[self.name]
        if self.shadowed is not MISSING:
            s = self.shadowed
            return s.__get__(inst, type(inst)) if hasattr(type(s), "__get__") else s
        for klass in type(inst).__mro__[1:]:   # a base class's attribute (below the class that holds this)
            if self.name in vars(klass) and not isinstance(vars(klass)[self.name], Watch):
                s = vars(klass)[self.name]
                return s.__get__(inst, type(inst)) if hasattr(type(s), "__get__") else s
        raise AttributeError(self.name)   # nn.Module.__getattr__ then looks at parameters / buffers / submodules

    def __set__(self, inst, value):
        self._note(inst, self.name, "store")
        rewrites.note_store(inst, self.name, value)   # an attribute the first run changed, written again?
        inst.__dict__[self.name] = value

    def __delete__(self, inst):
        self._note(inst, self.name, "store")
        try:
            del inst.__dict__[self.name]
        except KeyError:
            raise AttributeError(self.name) from None


def install(module: nn.Module | None) -> list:
    """Put the descriptors on the classes of ``module``'s hierarchy; returns what ``remove`` takes back."""
    if module is None:
        return []
    done = []
    classes = {type(m) for m in module.modules()}
    with _lock:
        for cls in classes:
            for name in candidates(cls):
                key = (cls, name)
                entry = _installed.get(key)
                if entry is None:
                    own = vars(cls).get(name, MISSING)
                    if isinstance(own, Watch):   # someone else's copy: leave it
                        continue
                    entry = _installed[key] = [0, own]
                    setattr(cls, name, Watch(name, own))
                entry[0] += 1
                done.append(key)
    return done


def remove(done: list) -> None:
    """Take back what ``install`` put on (the last recording using a (class, name) restores the class)."""
    with _lock:
        for key in done:
            entry = _installed.get(key)
            if entry is None:
                continue
            entry[0] -= 1
            if entry[0] == 0:
                cls, name = key
                del _installed[key]
                if entry[1] is MISSING:
                    if isinstance(vars(cls).get(name), Watch):
                        delattr(cls, name)
                else:
                    setattr(cls, name, entry[1])


def plain_size(m, key) -> None:
    """A traced size left in a scratch attribute (``self.seq_len = x.size(1)``) becomes the plain int it is: the
    TracedInt names a value of a finished recording."""
    value = m.__dict__.get(key)
    if isinstance(value, TracedInt):
        m.__dict__[key] = int.__int__(value)


def plain_sizes(objects) -> None:
    """After a recording run: each traced size left in an attribute of ``objects`` (the hierarchy's modules and held
    objects), directly or as an item of a tuple / list / torch.Size (``self.n0 = x.shape[0]`` set up on a first
    call, ``self.hw = x.shape[-2:]``), becomes the plain int eager leaves there (hunt29: a set-up's TracedInt stayed
    on the original, and ``torch.save(model)`` / ``pickle.dumps(model)`` then failed; it names a finished recording)."""
    for obj in objects:
        space = getattr(obj, "__dict__", None)
        if not isinstance(space, dict):
            continue
        for key, value in list(space.items()):
            plain = _plain(value)
            if plain is not value:
                space[key] = plain


def _plain(value):
    if isinstance(value, TracedInt):
        return int.__int__(value)
    if type(value) in (tuple, list, torch.Size) and any(isinstance(v, TracedInt) for v in value):
        items = [int.__int__(v) if isinstance(v, TracedInt) else v for v in value]
        if isinstance(value, list):
            value[:] = items   # the same list: other holders see it too
            return value
        return type(value)(items)
    return value
