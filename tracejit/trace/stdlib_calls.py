"""Traced sizes the user's code hands to standard-library Python functions that give them to C (hunt21): guarded.

``json.dumps(n)`` of a traced size (``TracedInt``, an ``int`` subclass) returned the trace's digits at every
call: json's Python code hands the number to its C encoder (or to ``int.__repr__``), which reads the value
without asking the number (c_readers.py's rule), and the profile hook only looked at C calls made by the
user's own frames. So frame_returns.py's hook reports each call of a standard-library Python function made
by a user frame; the traced sizes among its arguments (also inside tuples, lists and dicts, a few levels) are
guarded ``== value`` at the caller's line, unless the function's module is on ``PASS_MODULES`` (modules that
only ask the number's own methods, store it, or log it). Default-deny: a module nobody listed is guarded, too
strict at worst (a new size retraces or raises GuardError), never silently wrong.
"""
from __future__ import annotations

from ..ir import SourceLoc
from .symbolic import TracedInt

# top-level standard-library modules whose Python functions ask the number's methods (recorded or guarded by
# number_escapes.py / symbolic.py), only store or pass it, or only write it to a log / warning
PASS_MODULES = frozenset({
    "abc", "_collections_abc", "collections", "contextlib", "copy", "copyreg", "dataclasses", "enum", "functools",
    "inspect", "logging", "numbers", "operator", "reprlib", "threading", "traceback", "types", "typing",
    "typing_extensions", "warnings", "weakref", "_weakrefset", "linecache", "tokenize", "ast", "dis", "re",
    "string", "posixpath", "genericpath", "os", "textwrap", "sre_compile", "sre_parse",
    "heapq", "bisect", "queue", "importlib", "codecs", "encodings", "io",
})

_MAX_DEPTH = 3
_MAX_ITEMS = 64


def _traced(obj, depth: int = 0):
    if isinstance(obj, TracedInt):
        yield obj
    elif depth < _MAX_DEPTH and isinstance(obj, (tuple, list)) and len(obj) <= _MAX_ITEMS:
        for item in obj:
            yield from _traced(item, depth + 1)
    elif depth < _MAX_DEPTH and isinstance(obj, dict) and len(obj) <= _MAX_ITEMS:
        for item in list(obj.values()):
            yield from _traced(item, depth + 1)


def _arguments(frame) -> list:
    code = frame.f_code
    n = code.co_argcount + code.co_kwonlyargcount + bool(code.co_flags & 0x04) + bool(code.co_flags & 0x08)
    local = frame.f_locals
    return [local[name] for name in code.co_varnames[:n] if name in local]


def check_call(scanner, frame, guard) -> None:
    """``frame`` (a standard-library Python function) was just called by a user frame: guard the traced sizes
    among its arguments at the caller's line, unless its module passes (module docstring)."""
    module = str(frame.f_globals.get("__name__", "")).partition(".")[0]
    if module in PASS_MODULES:
        return
    caller = frame.f_back
    found = [ti for value in _arguments(frame) for ti in _traced(value)]
    if not found or caller is None:
        return
    loc = SourceLoc(caller.f_code.co_filename, caller.f_lineno, caller.f_code.co_name)
    what = f"{frame.f_globals.get('__name__', module)}.{frame.f_code.co_name}"
    for ti in found:
        if not scanner.first_guard(ti, caller.f_code.co_filename, caller.f_lineno, "stdlib"):
            continue
        guard(scanner.tracer, ti, f"passed to {what}() (standard-library code that may hand the number to C code "
                                  "reading its digits without asking it)", loc)
