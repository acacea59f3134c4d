"""Each stored graph is compiled once at load (issue #21, item 4).

The same graph may serve many (module, method) pairs: 40 root methods naming one graph with a
100,000-element guard list cost 40 compilations (8.5 s) before. A compiled method depends on the
graph, whether it is a root method (input checks and guards), and the graphs its calls link to;
its *name* only colours the ``def`` line, the signature its input errors print and the GuardError
message. So one compilation per (graph, root?, callees) serves every name: another name gets a
copy of the function object sharing the compiled code, with its own globals for those three.
runtime/assemble.compile_loaded calls it for each (module, method) of a loaded Program.
Labels in tracebacks and warnings (``<tracejit:LABEL#n>``) are minted here, never read from the file.
"""
from __future__ import annotations

import types

from ..codegen.names import safe_identifier
from ..support.guards import GuardFailure
from ..runtime.traced import InputError, compile_method, signature_text


class MethodCompiler:
    """Compiles each (graph, root?) once; hands out a function per name. The decoder gives one Graph
    object to every (module, method) that stores the same graph with the same callees
    (serialize/program_decoder.py), so the Graph's identity is the stored graph and its links."""

    def __init__(self, compile=None):
        # ``compile(graph, name, label, guards=, display=)``: compile_method, or the code cache's recorder or
        # replayer (serialize/code_cache.py)
        self.compile = compile if compile is not None else compile_method
        self._compiled: dict[tuple, object] = {}
        self._named: dict[tuple, object] = {}
        self._graphs: list = []   # keeps each compiled graph alive, so its id stays its own

    def __call__(self, graph, name: str, is_root: bool):
        return self.method(graph, name, is_root)

    def method(self, graph, name: str, is_root: bool):
        key = (id(graph), is_root)
        fn = self._compiled.get(key)
        if fn is None:
            self._graphs.append(graph)
            fn = self.compile(graph, name, f"loaded.graph{len(self._graphs) - 1}", guards=is_root)
            self._compiled[key] = fn
            self._named[key + (name,)] = fn
        named = self._named.get(key + (name,))
        if named is None:
            named = self._named[key + (name,)] = renamed(fn, name)
        return named

    def entry_point(self, graph, name: str, label: str, display: str | None = None):
        """A function's method or a specialization: compiled on its own, with its guards."""
        return self.compile(graph, name, label, guards=True, display=display)


def renamed(fn, name: str):
    """``fn`` (from compile_method) as the method ``name``: same code object, globals of its own."""
    glob = dict(fn.__globals__)
    sig = signature_text(name, fn.graph)
    if isinstance(glob.get("_input_error"), InputError):
        glob["_input_error"] = InputError(sig)
    if isinstance(glob.get("_tj_guard"), GuardFailure):
        glob["_tj_guard"] = GuardFailure(glob["_tj_guard"].table, name)
    def_name = safe_identifier(name, limit=200)   # as codegen mints it
    new = types.FunctionType(fn.__code__, glob, def_name, fn.__defaults__, fn.__closure__)
    new.__kwdefaults__ = fn.__kwdefaults__
    new.graph, new.signature, new.by_position = fn.graph, sig, fn.by_position
    head = f"def {fn.__name__}("
    new.code = f"def {def_name}(" + fn.code[len(head):] if fn.code.startswith(head) else fn.code
    return new
