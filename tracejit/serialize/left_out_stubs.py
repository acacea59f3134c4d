"""Submodule methods a saved file left out (docs/FORMAT.md, module entry ``left_out``): ``load``'s side.

``save`` leaves out a submodule method whose trace holds a Python object that is not data (serialize/left_out.py);
its callers hold its nodes. The file names each one with the reason, and the loaded module gets, in its place,
a method that raises a LoadError saying so: never the "not called while tracing" of a module the trace never
ran, never an answer. The entry is checked like the rest of the document: a list of [name, reason] pairs of
distinct method names a traced method may have, none of them a method the module holds, on a submodule only
(a root method is never left out), each reason a bounded string.
"""
from __future__ import annotations

from ..errors import LoadError
from . import limits
from .document_checks import method_name

LEFT_OUT_ATTR = "_tj_left_out"   # on a loaded module: {method: reason} (archive.py writes them again)
MAX_REASON = 1000                # characters of a reason
MAX_PER_MODULE = 256


def read(program: dict) -> dict:
    """``{module path: ((method, reason), ...)}`` of a module program document (its entries already checked by
    program_decoder.decode_module); LoadError for a malformed ``left_out`` entry."""
    out = {}
    for e in program.get("modules") or ():
        items = e.get("left_out") if isinstance(e, dict) else None
        if items is None:
            continue
        path = e["path"]
        where = f"module {path or '(root)'}, left_out"
        if not path:
            raise LoadError(f"{where}: a root method is never left out of a file")
        if not isinstance(items, list) or len(items) > MAX_PER_MODULE or not all(
                isinstance(p, list) and len(p) == 2 for p in items):
            raise LoadError(f"{where}: expected at most {MAX_PER_MODULE} [method, reason] pairs")
        taken = {p[0] for key in ("parameters", "buffers", "children") for p in e.get(key, ())}
        methods = {p[0] for p in e.get("methods", ())}
        names = set()
        for name, reason in items:
            method_name(name, where, taken)
            if name in methods or name in names:
                raise LoadError(f"{where}: names {name!r}, which the module also holds or names twice")
            names.add(name)
            limits.text(reason, f"{where} reason", MAX_REASON)
        out[path] = tuple((name, reason) for name, reason in items)
    return out


def install(loaded, notes: dict) -> None:
    """Put, on each module of ``loaded`` that ``notes`` (``read``'s) names, a method raising the LoadError."""
    for path, pairs in notes.items():
        module = loaded.get_submodule(path)
        for name, reason in pairs:
            object.__setattr__(module, name, _left_out(path, name, reason))
        module.__dict__[LEFT_OUT_ATTR] = dict(pairs)


def _left_out(path: str, name: str, reason: str):
    # the file's text, escaped (ascii): a reason or path holding terminal control sequences is printed as text
    message = (f"{ascii(path)[1:-1][:200]}.{name} is not in this file: tracejit.save left it out because its trace "
               f"holds an object that cannot be saved as data ({ascii(reason)[1:-1]}). The methods that call it hold "
               f"its nodes, so the root's methods run it; to call it on its own, trace and save it on its own")

    def left_out(*args, **kwargs):
        raise LoadError(message)

    left_out.__name__ = name if name.isidentifier() else "left_out"
    left_out.left_out_reason = reason
    return left_out
