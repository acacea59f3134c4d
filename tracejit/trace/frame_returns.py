"""While a trace runs, see user frames return, so index_reads scans the lines after their last event.

A subscript like ``SCALES[n]`` in a helper that records no op, or on the last lines of
``forward``, runs after the last event its frame records; the scanner (index_reads.py) only
looks at a frame's lines when an event happens in it. A per-thread profile hook
(``sys.setprofile``, this thread only) calls ``IndexScanner.returning`` when a user frame
(not tracejit's, torch's or the standard library's) returns. A profiler already installed as a Python callable is
called through and restored after; a C-level one (``cProfile``) is left alone, and the tail
scan is then off for that trace. The same hook sees each C function a user frame is about to call
(``c_call``): a numpy one has its traced-size arguments guarded (numpy_calls.check_at_call), whatever
expression gave its receiver. Its ``call`` and ``return`` events of user frames also go to outer_state.OuterState
(the globals and closure cells forward changes). A method of a ``torch.Generator`` made outside forward called by
user code goes to python_state.generator_call (refused: the program cannot read or reseed it).

Cost: the hook runs for every call while tracing (CPython 3.11 has no per-event monitoring);
tracing BERT-base took about +20% longer (7 interleaved rounds, median +20%, best +18%)
(bench/bench_trace_returns.py); the scans themselves are ~3% of that trace.

A module first imported while a trace runs (``_find_and_load`` of the import system on the stack) runs its body
unwatched, with the hook's only work counting that call's nesting. An installed package's code counts as user code,
so before session 32 each standard-library and C call of a module body went through the checks above:
``import sympy`` took 9.4 s inside a trace against 0.31 s outside, ``import torch._dynamo`` (which torch 2.15
imports the first time a Python meta kernel runs) 14 s against 1.3. A module body cannot hold the traced values:
they reach it only through state the forward set before the import, and such a module would run that body
once, at the first trace, and never at a call of the program, whatever the hook saw.
"""
from __future__ import annotations

import contextlib
import os
import sys
import sysconfig

import torch

from . import numpy_calls, python_state
from .source import _TORCH_DIR, _skipped

_GENERATOR = torch._C.Generator   # its methods called by user code: python_state.generator_call
_FIND_AND_LOAD = getattr(getattr(sys.modules.get("_frozen_importlib"), "_find_and_load", None), "__code__", None)
_user_files: dict[str, bool] = {}
_STDLIB = os.path.abspath(sysconfig.get_paths()["stdlib"]) + os.sep
_SITE = tuple(os.path.abspath(p) + os.sep for p in {sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]})


_callers: dict[str, bool] = {}




def _is_numpy_caller(filename: str) -> bool:
    """Code whose numpy calls are guarded: any but tracejit's, torch's, numpy's and the standard library's
    (also code without a file: a notebook cell, a function compiled from text, when linecache holds its source)."""
    r = _callers.get(filename)
    if r is None:
        r = _callers[filename] = not _skipped(filename) and not filename.startswith(_TORCH_DIR)
    return r


def _is_user(filename: str) -> bool:
    r = _user_files.get(filename)
    if r is None:
        r = not filename.startswith("<") and not _skipped(filename) and not filename.startswith(_TORCH_DIR) and (
            not filename.startswith(_STDLIB) or filename.startswith(_SITE))   # not the standard library
        _user_files[filename] = r
    return r


_outer_files: dict[str, bool] = {}


def _is_outer_code(filename: str) -> bool:
    """Code whose globals and closure cells outer_state.OuterState watches: the user's files, and code without a
    file (``exec`` / ``compile`` of text, ``<stdin>``, a notebook cell): what cannot be told apart from the
    user's is the user's (default-deny); not ``<frozen ...>`` modules (the standard library) nor tracejit's."""
    r = _outer_files.get(filename)
    if r is None:
        r = _outer_files[filename] = _is_user(filename) or (
            filename.startswith("<") and not filename.startswith(("<frozen", "<tracejit")))
    return r


_stdlib_files: dict[str, bool] = {}


def _is_stdlib(filename: str) -> bool:
    """A standard-library Python file (not an installed package's, not a frozen module's)?"""
    r = _stdlib_files.get(filename)
    if r is None:
        r = _stdlib_files[filename] = filename.startswith(_STDLIB) and not filename.startswith(_SITE)
    return r


_file_kinds: dict[str, int] = {}


def _file_kind(filename: str) -> int:
    """What a ``call`` event of code in ``filename`` is for the hook: 1 outer_state's (``_is_outer_code``),
    2 the standard library's Python (stdlib_calls.py), 0 neither (torch's, tracejit's: most calls)."""
    kind = _file_kinds[filename] = 1 if _is_outer_code(filename) else 2 if _is_stdlib(filename) else 0
    return kind


@contextlib.contextmanager
def watching(scanner, outer=None):
    """Report user frames' returns to ``scanner`` on this thread until the block ends; their calls and returns
    to ``outer`` (outer_state.OuterState: the globals and closure cells they read), when given."""
    previous = sys.getprofile()
    if previous is not None and not callable(previous):   # a C profiler: do not replace it
        yield
        return
    returning, numpy_call = scanner.returning, scanner.numpy_call
    user = _user_files
    numpy_callee = numpy_calls.is_checked_c_callable   # numpy's, or another C reader of int digits

    called = outer.called if outer is not None else (lambda frame: None)
    returned = outer.returned if outer is not None else (lambda frame: None)
    watched = outer._frames if outer is not None else {}   # frames whose closure cells outer compares at return
    looked_at = outer.codes if outer is not None else None   # id(code) -> code outer has seen: skipped at once
    callers = _callers
    kinds, stdlib_call = _file_kinds, scanner.stdlib_call
    loading = [0]   # the nesting of the import system's _find_and_load calls now running (module docstring)

    def importing(frame, event) -> bool:
        """Is a module body being loaded (count ``_find_and_load``'s calls and returns)?"""
        if frame.f_code is _FIND_AND_LOAD:
            if event == "call":
                loading[0] += 1
                return True
            if event == "return":
                loading[0] = max(0, loading[0] - 1)   # (a load that began before the hook: not counted)
                return True
        return loading[0] > 0

    if previous is None:
        def hook(frame, event, arg):
            if (loading[0] or frame.f_code is _FIND_AND_LOAD) and importing(frame, event):
                return
            if event == "return":
                if user.get(frame.f_code.co_filename, None) is not False and _is_user(frame.f_code.co_filename):
                    returning(frame)
                    if watched:
                        returned(frame)
            elif event == "call":
                code = frame.f_code
                kind = kinds.get(code.co_filename)   # one lookup for most calls (torch's own: 0)
                if kind is None:
                    kind = _file_kind(code.co_filename)
                if kind:
                    if kind == 1:
                        if looked_at is not None and looked_at.get(id(code)) is not code:
                            called(frame)
                    elif frame.f_back is not None and _is_numpy_caller(frame.f_back.f_code.co_filename):
                        stdlib_call(frame)   # a user frame calls json.dumps(n): stdlib_calls.py
            elif event == "c_call" and callers.get(frame.f_code.co_filename, None) is not False \
                    and _is_numpy_caller(frame.f_code.co_filename):   # (the caller first: most C calls are torch's)
                if numpy_callee(arg):
                    numpy_call(frame, arg)
                elif type(getattr(arg, "__self__", None)) is _GENERATOR:
                    python_state.generator_call(frame, arg)
    else:
        def hook(frame, event, arg):
            if (loading[0] or frame.f_code is _FIND_AND_LOAD) and importing(frame, event):
                previous(frame, event, arg)
                return
            if event == "return" and _is_user(frame.f_code.co_filename):
                returning(frame)
                returned(frame)
            elif event == "call" and _is_outer_code(frame.f_code.co_filename):
                called(frame)
            elif event == "call" and _is_stdlib(frame.f_code.co_filename) and frame.f_back is not None \
                    and _is_numpy_caller(frame.f_back.f_code.co_filename):
                stdlib_call(frame)
            elif event == "c_call" and _is_numpy_caller(frame.f_code.co_filename):
                if numpy_callee(arg):
                    numpy_call(frame, arg)
                elif type(getattr(arg, "__self__", None)) is _GENERATOR:
                    python_state.generator_call(frame, arg)
            previous(frame, event, arg)
    sys.setprofile(hook)
    try:
        yield
    finally:
        sys.setprofile(previous)
