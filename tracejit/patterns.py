"""Regular expressions compiled on first use.

``re.compile`` costs 0.05-0.5 ms per pattern in a fresh process (the module cache is empty); a server's
``import tracejit; tracejit.load(f)`` imports ~15 module-level patterns of which a plain model's load
uses a few (bench/fresh_load.py). ``LazyPattern(text)`` stands where ``re.compile(text)`` stood and
compiles on the first ``match`` / ``fullmatch`` / ``search`` / ... (any attribute of a compiled pattern).
Two threads may both compile it the first time; each gets the same answer (re.compile is thread-safe)."""
from __future__ import annotations

import re


class LazyPattern:
    """``re.compile(pattern, flags)``, compiled the first time one of its attributes is read."""
    __slots__ = ("_pattern", "_flags", "_compiled")

    def __init__(self, pattern, flags: int = 0):
        self._pattern = pattern
        self._flags = flags
        self._compiled = None

    def __getattr__(self, name):
        compiled = self._compiled
        if compiled is None:
            compiled = self._compiled = re.compile(self._pattern, self._flags)
        return getattr(compiled, name)

    def __repr__(self) -> str:
        return f"LazyPattern({self._pattern!r})"
