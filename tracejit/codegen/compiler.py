"""Generated source -> a Python function, registered with linecache so tracebacks show its lines."""
from __future__ import annotations

import itertools
import linecache

_counter = itertools.count()


def compile_function(source: str, fn_name: str, globals_: dict, label: str):
    """Compile generated source; register it with linecache so tracebacks show it."""
    filename = f"<tracejit:{label}#{next(_counter)}>"
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    code = compile(source, filename, "exec")
    ns = dict(globals_)
    exec(code, ns)
    return ns[globals_.get("_tj_def_name", fn_name)]
