"""Regular expressions compiled on first use.

``re.compile`` costs 0.05-0.5 ms per pattern in a fresh process (the module cache is empty); a server's
``import tracejit; tracejit.load(f)`` imports ~15 module-level patterns of which a plain model's load
uses a few (bench/fresh_load.py). ``LazyPattern(text)`` stands where ``re.compile(text)`` stood and
compiles on the first ``match`` / ``fullmatch`` / ``search`` / ... (any attribute of a compiled pattern).
Two threads may both compile it the first time; each gets the same answer (re.compile is thread-safe).

The load path's name checks are string tests instead (``ascii_identifier``, ``ascii_word``, ``split_op_name``):
nothing to compile, and ~5x cheaper per call than a compiled pattern (tests/arch/test_name_tests.py holds
each to the pattern it replaced)."""
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


def ascii_identifier(text, limit: int | None = None) -> bool:
    """``re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", text)``, at most ``limit`` characters: for an ASCII string,
    ``str.isidentifier`` accepts exactly that (keywords too, as the pattern does)."""
    return isinstance(text, str) and text.isascii() and text.isidentifier() and (limit is None or len(text) <= limit)


def ascii_word(text, limit: int | None = None) -> bool:
    """``re.fullmatch(r"[A-Za-z0-9_]+", text)``, at most ``limit`` characters (a leading digit allowed)."""
    return isinstance(text, str) and text.isascii() and ("a" + text).isidentifier() and bool(text) and (
        limit is None or len(text) <= limit)


def split_op_name(op):
    """``(namespace, name, overload or None)`` of ``op`` when it fullmatches
    ``([a-z_]+)::([A-Za-z_][A-Za-z0-9_]*)(?:\\.([A-Za-z_][A-Za-z0-9_]*))?``, else None."""
    if not isinstance(op, str):
        return None
    ns, sep, rest = op.partition("::")
    if not sep or not ns or not ns.isascii() or not ns.replace("_", "a").isalpha() or not ns.replace("_", "a").islower():
        return None
    name, dot, overload = rest.partition(".")
    if not ascii_identifier(name) or (dot and not ascii_identifier(overload)):
        return None
    return ns, name, overload if dot else None
