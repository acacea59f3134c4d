"""Frozen records: the plain, immutable data classes of the load path, without ``@dataclass``.

``@dataclass(frozen=True)`` writes each class's ``__init__``, ``__repr__``, ``__eq__``, ``__hash__`` and
``__setattr__`` as source text and ``exec``s it when the module is imported: ~0.6 ms a class, ~8.5 ms for
the 14 classes ``import tracejit; tracejit.load(f)`` used to import (bench/fresh_load.py). A record class
names its fields in ``_fields`` (with ``__slots__``) and writes its own ``__init__`` (setting the fields with
``_set_fields``, or each with ``object.__setattr__`` on a hot path); this base gives it what the dataclass
did, with the same behaviour:

- assigning or deleting a field raises ``dataclasses.FrozenInstanceError``;
- ``==`` compares the fields in ``_compared`` (default: all) when both sides are the same class;
  ``hash`` hashes them; ``repr`` shows ``Cls(field=value, ...)`` for those in ``_shown`` (default: all);
- ``record.replace(**changes)`` is ``dataclasses.replace``; copy, deepcopy and pickle rebuild the record
  through its ``__init__`` (``__reduce__``).
"""
from __future__ import annotations

from dataclasses import FrozenInstanceError


class FrozenRecord:
    """Base of a frozen record: subclasses set ``__slots__ = _fields = (...)`` and write ``__init__``."""
    __slots__ = ()
    _fields: tuple = ()
    _compared: tuple | None = None   # the fields == and hash compare (None: all)
    _shown: tuple | None = None      # the fields repr shows (None: all)

    def _set_fields(self, *values) -> None:
        """Set the fields, in ``_fields`` order (an ``__init__`` calls it once)."""
        for name, value in zip(self._fields, values, strict=True):
            object.__setattr__(self, name, value)

    def __setattr__(self, name, value):
        raise FrozenInstanceError(f"cannot assign to field {name!r}")

    def __delattr__(self, name):
        raise FrozenInstanceError(f"cannot delete field {name!r}")

    def _key(self) -> tuple:
        return tuple(getattr(self, f) for f in (self._fields if self._compared is None else self._compared))

    def __eq__(self, other):
        if other.__class__ is self.__class__:
            return self._key() == other._key()
        return NotImplemented

    def __hash__(self):
        return hash(self._key())

    def __repr__(self) -> str:
        shown = self._fields if self._shown is None else self._shown
        return f"{type(self).__qualname__}({', '.join(f'{f}={getattr(self, f)!r}' for f in shown)})"

    def replace(self, **changes):
        """A copy with ``changes`` (field name -> value), as ``dataclasses.replace`` makes it."""
        unknown = set(changes) - set(self._fields)
        if unknown:
            raise TypeError(f"{type(self).__name__} has no field {sorted(unknown)[0]!r}")
        return type(self)(**{f: changes[f] if f in changes else getattr(self, f) for f in self._fields})

    def __reduce__(self):
        return type(self), tuple(getattr(self, f) for f in self._fields)
