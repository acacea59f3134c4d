"""Python state outside the traced modules that forward changes: globals, closure cells, input containers.

python_state.py compares the traced hierarchy's modules before and after forward. A traced program cannot
replay what forward does to other Python objects either, and three kinds were frozen silently (hunt19):

- **a module-level global** the user's code names (``_STEP += 1`` after ``global _STEP``, ``_CALLS["n"] += 1``,
  ``_SEEN.append(...)``): each user function (not tracejit's, torch's or the standard library's) is looked at
  when it is first called while tracing (the profile hook of frame_returns.py): every name of its code found
  in its globals is remembered with a fingerprint (python_state._fingerprint: plain values, containers by
  their items, other objects by identity), and compared after forward. A global memo cache filled by forward
  (``_GRID[n] = ...``) is a change too, as the same cache on a module is;
- **a closure cell** (``nonlocal n; n += 1``, ``hist.append(1)`` on a list the function closed over): the
  free variables of a user function's first frame are fingerprinted at its call and compared at its return;
- **an input container** (``batch.pop("labels")``, ``outputs.append(y)`` on a list argument): the dicts and
  lists forward receives are fingerprinted before forward and compared after (the program does not replay
  the caller's container changing).

As for modules: a global or a cell that was None and is set by forward is a lazy set-up (the first call
builds it, eager reuses it as the trace does: a ledger entry, no error); one that is rebound to another
tensor is a capture (the program keeps the trace's tensor, as for a plain tensor attribute of a module).
Each change is a python_state issue (a TraceError at the end of the trace naming the line, or with
``allow_frozen_python_state=True`` a TracerWarning and a ledger entry).
Not covered: attributes of plain objects (only their identity is compared, as on modules), a closure cell
changed by a later frame of a function already seen, code without a source file (a notebook cell), and the
functions of installed packages (site-packages: a library's caches, such as einops' backend table, are its own).
"""
from __future__ import annotations

import inspect
import os
import re
import sys
import types

import torch

from ..ir import SourceLoc
from .not_forward import outside_forward
from .source import _TORCH_DIR
from .carried_state import carried
from . import held_state
from .python_state import _CONTAINERS, _MUTATORS, _NONE, _fingerprint, _write_patterns

# torch code that calls the user's code as forward's own (a submodule's forward, a custom autograd Function's
# forward, a parametrization, a checkpointed function): frames of it between forward and a function do not count
_TORCH_CALLS_USER = tuple(os.path.join(_TORCH_DIR, *p) for p in (
    ("nn", "modules", ""), ("nn", "utils", ""), ("autograd", "function.py"), ("utils", "checkpoint.py")))
_SKIP_TYPES = (types.ModuleType, types.FunctionType, types.BuiltinFunctionType, type)


def _fp(value):
    return ("tensor",) if isinstance(value, torch.Tensor) else _fingerprint(value)


class OuterState:
    """The globals and closure cells user code read while tracing, and the input containers; see the module."""

    def __init__(self):
        self.codes: dict = {}       # id(code) -> code object looked at (first call); by id: hashing a code object
        #                             hashes its names and constants, on every call event of the profile hook
        self.forward_codes: dict = {}   # user code called while tracing -> its globals (global_reads.py reads its loads)
        self.env_reads: dict = {}   # environment variable -> where the user's code first read it (env_reads.py)
        self._globals: dict = {}    # (id(globals), name) -> (globals dict, name, fingerprint, [codes naming it])
        self._frames: dict = {}     # id(frame) -> (frame, {free variable: fingerprint})
        self._inputs: list = []     # (where, container, fingerprint)
        self._input_code = None     # the code of the traced function or forward (to find a line)
        self.changes: list = []     # (what, SourceLoc | None)
        self.lazy: list = []        # descriptions of lazy set-ups
        self._exempt: set = set()   # names code outside forward (a finalizer, a gc callback) used: not compared
        self._stop = None           # the frame that runs forward (trace/api.record's): where forward's stack ends
        self._classes: dict = {}    # id(class) -> (user class named as a global, its attributes' fingerprints, codes)

    # ---- called by frame_returns' profile hook, for user frames only ----
    def called(self, frame) -> None:
        code = frame.f_code
        if self.codes.get(id(code)) is code:
            return
        self.codes[id(code)] = code   # looked at once: frame_returns' hook skips it from now on
        if _installed_library(code.co_filename):   # (by its file, before any walk of the stack)
            self._exempt.update(code.co_freevars + code.co_names)
            return
        g = frame.f_globals
        self.forward_codes[code] = g   # before the early return: its global loads may reach a settings module
        names = [n for n in code.co_names if n in g and ((id(g), n) in self._globals or not isinstance(
            g[n], _SKIP_TYPES))]
        classes = [g[n] for n in code.co_names if isinstance(g.get(n), type) and (
            id(g[n]) in self._classes or held_state.user_class(g[n]))]
        if not names and not code.co_freevars and not classes:
            return   # nothing to watch: neither the stack walks below nor a fingerprint (most functions)
        if outside_forward(frame) or _library_internal(frame, self._stop):   # not forward's own code, nor its changes
            self._exempt.update(code.co_freevars + code.co_names)
            return
        for cls in classes:   # user classes named as globals (``CountFn.calls += 1``): their attributes
            if id(cls) not in self._classes:
                self._classes[id(cls)] = (cls, held_state.attributes(cls, _fingerprint), [])
            self._classes[id(cls)][2].append(code)
        for name in names:
            seen = self._globals.get((id(g), name))
            if seen is not None:
                seen[3].append(code)
            else:
                self._globals[(id(g), name)] = (g, name, _fp(g[name]), [code])
        if code.co_freevars:
            local = frame.f_locals
            cells = {n: _fp(local[n]) for n in code.co_freevars if n in local}
            if cells:
                self._frames[id(frame)] = (frame, cells)

    def returned(self, frame) -> None:
        hit = self._frames.pop(id(frame), None)
        if hit is None or hit[0] is not frame:
            return
        local = frame.f_locals
        for name, before in hit[1].items():
            if name not in local or name in self._exempt:
                continue
            now = _fp(local[name])
            if now == before and now != ("tensor",):
                continue
            if (now == ("tensor",) and before == ("tensor",) or before == _NONE) and carried(
                    name, (frame.f_code,), "cell"):   # read before set, or set twice: the next call reads it
                pass
            elif now == ("tensor",) and before == ("tensor",):
                continue
            elif before == _NONE:
                self.lazy.append(f"closure variable `{name}` of {frame.f_code.co_name}()")
                continue
            self.changes.append((f"forward changed closure variable `{name}` of {frame.f_code.co_name}() "
                                 f"({_kind(local[name], 'nonlocal')})", _write_line(frame.f_code, name)))

    def _input_line(self, where: str):
        return _write_line(self._input_code, _root_name(where)) if self._input_code is not None else None

    # ---- the input containers ----
    def watch_inputs(self, args, kwargs, fn) -> None:
        """Fingerprint the dicts and lists among forward's arguments (``fn``: what names the parameters)."""
        self._stop = sys._getframe(1)
        target = fn.forward if isinstance(fn, torch.nn.Module) else fn
        target = getattr(target, "__func__", target)
        self._input_code = getattr(target, "__code__", None)
        try:
            names = list(inspect.signature(target).parameters)
        except (TypeError, ValueError):
            names = []
        if names and names[0] == "self" and hasattr(fn, "__self__"):
            names = names[1:]
        def walk(value, where):
            if isinstance(value, (dict, list)):
                self._inputs.append((where, value, _fingerprint(value)))
                items = value.items() if isinstance(value, dict) else enumerate(value)
                for k, v in items:
                    walk(v, f"{where}[{k!r}]")
        for i, a in enumerate(args):
            walk(a, names[i] if i < len(names) else f"argument {i}")
        for k, v in kwargs.items():
            walk(v, k)

    def finish(self) -> tuple:
        """``(changes, lazy)``: each change as ``(what, SourceLoc or None)``, each lazy set-up described."""
        for where, container, before in self._inputs:
            if _fingerprint(container) != before:
                self.changes.append((f"forward changed the items of its input `{where}` (a "
                                     f"{type(container).__name__}: the caller's container would change, the program "
                                     "does not replay that)", self._input_line(where)))
        for g, name, before, codes in self._globals.values():
            if name in self._exempt:
                continue
            if name not in g:
                now = ("deleted",)
            else:
                now = _fp(g[name])
            if now == before:
                continue
            if before == _NONE and not carried(name, codes, "global"):
                self.lazy.append(f"global `{name}` of {g.get('__name__', '?')}")
                continue
            self.changes.append((f"forward changed global `{name}` of module {g.get('__name__', '?')} "
                                 f"({_kind(g.get(name))})", _first_write(codes, name)))
        for cls, before, codes in self._classes.values():
            now = held_state.attributes(cls, _fingerprint)
            for key in sorted(set(before) | set(now)):
                if before.get(key) == now.get(key) or key in self._exempt:
                    continue
                if before.get(key) == _NONE:
                    self.lazy.append(f"class attribute `{cls.__qualname__}.{key}`")
                    continue
                self.changes.append((f"forward changed class attribute `{cls.__qualname__}.{key}` (a class the "
                                     f"traced code names as a global; {_class_kind(cls, key)})",
                                     _class_write_line(codes, cls, key)))
        return self.changes, self.lazy

    def globals_read(self) -> list:
        """``(globals dict, name, [codes naming it])`` of every global user code named while tracing that forward
        did not change and did not set up lazily (after ``finish``): what global_reads.py may guard."""
        out = []
        for g, name, before, codes in self._globals.values():
            if name in self._exempt or before == _NONE or name not in g or _fp(g[name]) != before:
                continue
            out.append((g, name, codes))
        return out


_libraries: dict = {}


def _installed_library(filename: str) -> bool:
    """Is ``filename`` a file of an installed package (site-packages / dist-packages)? Such code's globals are the
    library's own (einops fills ``_loaded_backends`` on its first call, transformers its lazy tables): what it
    changes is not forward's state, as for torch's internals."""
    hit = _libraries.get(filename)
    if hit is None:
        parts = filename.replace("\\", "/").split("/")
        hit = _libraries[filename] = "site-packages" in parts or "dist-packages" in parts
    return hit


def _library_internal(frame, stop) -> bool:
    """Is ``frame`` run by an import (a module body, a package's set-up), by torch's internals (torch calling
    sympy, a library's caches filling) or is it an installed library's own function, rather than forward's code?
    torch's module-call machinery (_TORCH_CALLS_USER) and tracejit's stand-ins sit between forward and a
    submodule's forward: they do not count."""
    if _installed_library(frame.f_code.co_filename):
        return True
    f = frame
    while f is not None and f is not stop:
        name = f.f_code.co_filename
        if name.startswith("<frozen importlib") or f.f_code.co_name == "<module>":
            return True
        if name.startswith(_TORCH_DIR) and not name.startswith(_TORCH_CALLS_USER):
            return True
        f = f.f_back
    return False


def _root_name(where: str) -> str:
    return where.split("[", 1)[0]


def _kind(value, statement: str = "global") -> str:
    if isinstance(value, _CONTAINERS):
        return f"a {type(value).__name__} whose items changed: a cache or a log?"
    return f"e.g. a counter: `{statement} n; n += 1`"


def _class_kind(cls: type, key: str) -> str:
    value = vars(cls).get(key)
    return _kind(value) if isinstance(value, _CONTAINERS) else f"e.g. a counter: `{cls.__name__}.{key} += 1`"


def _class_write_line(codes, cls: type, key: str):
    """The line of ``codes`` that writes ``Cls.key`` (``CountFn.calls += 1``), else of the class's own code."""
    patterns = [re.compile(p) for p in _write_patterns(cls.__name__, key)]
    for code in codes:
        try:
            lines, first = inspect.getsourcelines(code)
            filename = inspect.getsourcefile(code)
        except (OSError, TypeError):
            continue
        for i, line in enumerate(lines):
            if filename and any(p.search(line.strip()) for p in patterns):
                return SourceLoc(filename, first + i, "")
    return held_state.write_line(cls, key, _write_patterns)


def _first_write(codes, name: str):
    found = [_write_line(c, name, fallback=False) for c in codes]
    return next((loc for loc in found if loc is not None), _write_line(codes[0], name))


def _write_line(code, name: str, fallback: bool = True):
    """The line of ``code`` (or of a function nested in it) that writes ``name``; else the function's first line."""
    try:
        lines, first = inspect.getsourcelines(code)
        filename = inspect.getsourcefile(code)
    except (OSError, TypeError):
        return None
    if filename is None:
        return None
    n = re.escape(name)
    patterns = [re.compile(p) for p in (
        rf"(?<![\w.]){n}\s*(\[[^\]]*\])?\s*([-+*/%&|^@]|//|\*\*|<<|>>)?=(?!=)", rf"(?<![\w.]){n}\.({_MUTATORS})\(",
        rf"\b(shuffle|sort|heappush|heappop|insort)\(\s*{n}\b")]
    for i, line in enumerate(lines):
        text = line.strip()
        if not text.startswith(("global ", "nonlocal ", "#")) and any(p.search(text) for p in patterns):
            return SourceLoc(filename, first + i, "")
    return SourceLoc(filename, first, "") if fallback else None
