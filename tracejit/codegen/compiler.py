"""Generated source -> a Python function, registered with linecache so tracebacks show its lines.

Each function gets a file name tracejit mints (``<tracejit:BertModel#3>`` for a live trace,
``<tracejit:loaded#12>`` for a loaded program: never a string read from a file) and a table of
the user source line each generated line came from. ``add_trace_notes(exc)`` (called where a
traced program is entered) adds a note to an exception raised inside generated code: each
generated frame's line text and the original source line recorded for it. Notes print in every
traceback, the interpreter's default one too, which does not read linecache for ``<...>`` names.
"""
from __future__ import annotations

import itertools
import linecache
import re
import types

from ..errors import ArgumentTypeError, ArgumentValueError
from ..patterns import ascii_word

_counter = itertools.count()
_SOURCES: dict = {}   # file name -> (what the code is, [source location or None per line, from line 1])
NOTE_HEAD = "in the traced program:"


def compile_function(source: str, fn_name: str, globals_: dict, label: str):
    """Compile generated source; register it with linecache so tracebacks show it.

    ``globals_["_tj_line_sources"]``, when set (codegen/python.generate), is the source location
    of each line after the ``def`` line, for the notes of ``add_trace_notes``."""
    filename = _register(source, label, globals_.get("_tj_line_sources"))
    code = compile(source, filename, "exec")
    ns = dict(globals_)
    exec(code, ns)
    return ns[globals_.get("_tj_def_name", fn_name)]


def function_from_code(code, source: str, globals_: dict, label: str, def_name: str, defaults, kwdefaults):
    """The function ``compile_function`` would make of ``source``, from its code object compiled before
    (serialize/code_cache.py): registered with linecache under a file name minted here, like a compiled one."""
    filename = _register(source, label, globals_.get("_tj_line_sources"))
    fn = types.FunctionType(_renamed_code(code, filename), globals_, def_name, defaults)
    fn.__kwdefaults__ = kwdefaults
    globals_[def_name] = fn   # as exec defines it
    return fn


def _renamed_code(code, filename: str):
    consts = tuple(_renamed_code(c, filename) if isinstance(c, types.CodeType) else c for c in code.co_consts)
    return code.replace(co_filename=filename, co_consts=consts)


def _register(source: str, label, sources) -> str:
    """A file name for generated code (``<tracejit:LABEL#n>``), its lines in linecache and, given ``sources``,
    the user source line of each line (for ``add_trace_notes``)."""
    # ASCII word characters and dots only, whatever the label was made from (a loaded function's is minted)
    label = str(label)
    safe = label if ascii_word(label.replace(".", "_")) else re.sub(r"[^A-Za-z0-9_.]", "_", label)
    safe = safe[:80] or "program"
    filename = f"<tracejit:{safe}#{next(_counter)}>"
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    if sources is not None:
        _SOURCES[filename] = (safe, [None, *sources])
    return filename


def add_trace_notes(exc: BaseException) -> None:
    """Note on ``exc`` each generated frame it passed through: the generated line and the user source
    line it was traced from (once per exception)."""
    if isinstance(exc, (ArgumentTypeError, ArgumentValueError)):   # says what was expected and seen already
        return
    notes = getattr(exc, "__notes__", None) or ()
    if any(isinstance(n, str) and n.startswith(NOTE_HEAD) for n in notes):
        return
    lines = []
    tb = exc.__traceback__
    while tb is not None:
        filename = tb.tb_frame.f_code.co_filename
        if filename.startswith("<tracejit:"):
            lines.append(_frame_note(filename, tb.tb_lineno))
        tb = tb.tb_next
    if lines:
        exc.add_note("\n".join([NOTE_HEAD, *lines]))


def _frame_note(filename: str, lineno: int) -> str:
    text = linecache.getline(filename, lineno).strip()
    note = f"  {filename} line {lineno}: {text}"
    entry = _SOURCES.get(filename)
    loc = entry[1][lineno - 1] if entry is not None and 0 < lineno <= len(entry[1]) else None
    if loc is not None:
        where = f"{printable(loc.filename)}:{loc.lineno}"
        function = f" (in {printable(loc.function)})" if getattr(loc, "function", "") else ""
        note += f"\n    traced from {where}{function}"
    return note


def printable(text, limit: int = 200) -> str:
    """``text`` with control characters escaped and cut to ``limit`` characters (a loaded file's strings)."""
    text = str(text)
    out = "".join(c if c.isprintable() else repr(c)[1:-1] for c in text[:limit])
    return out + ("..." if len(text) > limit else "")
