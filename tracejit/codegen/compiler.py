"""Generated source -> a Python function, registered with linecache so tracebacks show its lines."""
from __future__ import annotations

import itertools
import linecache
import re

_counter = itertools.count()


def compile_function(source: str, fn_name: str, globals_: dict, label: str):
    """Compile generated source; register it with linecache so tracebacks show it."""
    # the label shows in tracebacks and warnings: ASCII word characters and dots only, whatever it was
    # made from (a loaded function's name is the file's)
    filename = f"<tracejit:{re.sub(r'[^A-Za-z0-9_.]', '_', str(label))[:100]}#{next(_counter)}>"
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    code = compile(source, filename, "exec")
    ns = dict(globals_)
    exec(code, ns)
    return ns[globals_.get("_tj_def_name", fn_name)]
