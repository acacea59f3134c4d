"""Submodule training flags read during forward become guards (issue #20: "submodule training flags as guards").

The root module's flag is guarded on every root method (codegen's training guard). A submodule's flag
can differ (``model.eval(); model.dropout.train()``) and can be flipped after tracing
(``traced.dropout.eval()``); the ops its forward recorded (``F.dropout(x, p, training=True)``,
batch norm's statistics) are those of the flag at trace time. So while a thread traces, ``training``
on ``nn.Module`` is a property (a data descriptor, which wins over the instance's ``__dict__``) that
notes each read of a submodule's flag by model or torch code (not by tracejit's), with the module's
path below the root (reads after forward set the flag itself, as in ``self.drop.train()`` ... ``.eval()``,
are not: every call sets it again). Each submodule whose flag was read gets a ``training`` guard with attribute
``path`` in the root method's graph, first: ``self._modules['seq']._modules['1'].training``. A call
after the flag flipped retraces (live) or raises GuardError naming the submodule (loaded, optimized).
Threads that do not trace read and write the instance's ``__dict__`` as before.
"""
from __future__ import annotations

import sys

from torch import nn

from ..ir import GUARD, Node
from . import patches
from .source import _TRACEJIT_DIR
from .symbolic import get_tracer


def _note(module, value, written: bool = False) -> None:
    tracer = get_tracer()
    if tracer is None or not tracer.frames:
        return
    reads = getattr(tracer, "training_reads", None)
    if reads is None:
        return
    caller = sys._getframe(3).f_code.co_filename   # _note <- get / set_ <- the descriptor <- the reader
    if caller.startswith(_TRACEJIT_DIR) and not caller.startswith(_TRACEJIT_DIR + "tests"):
        return   # tracejit's own bookkeeping (graph headers, the python-state watch)
    path = tracer.module_paths.get(id(module))
    if not path:   # "" is the root: its own guard
        return
    if written:   # forward sets the flag itself (switched and restored): reads after that need no guard
        tracer.training_written.add(path)
    elif path not in tracer.training_written:
        reads.setdefault(path, bool(value))


def _training_property(_original):
    def get(self):
        try:
            value = self.__dict__["training"]
        except KeyError:
            raise AttributeError(f"'{type(self).__name__}' object has no attribute 'training'") from None
        if get_tracer() is not None:
            _note(self, value)
        return value

    def set_(self, value):
        if get_tracer() is not None:
            _note(self, value, written=True)
        self.__dict__["training"] = value

    def delete(self):   # torch.jit.script's RecursiveScriptModule deletes it (its flag lives in C++)
        try:
            del self.__dict__["training"]
        except KeyError:
            raise AttributeError(f"'{type(self).__name__}' object has no attribute 'training'") from None

    return _DataDescriptor(get, set_, delete)


class _DataDescriptor:
    """A data descriptor (wins over the instance's ``__dict__``) that is not a ``property``: torch.jit.script
    compiles every ``property`` of a module's class, and would try to compile this one's getter (a module
    scripted while some thread traces, or inside a traced forward)."""
    __doc__ = "nn.Module.training, noted while this thread traces (trace/module_flags.py)"

    def __init__(self, get, set_, delete):
        self._get, self._set, self._delete = get, set_, delete

    def __get__(self, instance, owner=None):
        return self if instance is None else self._get(instance)

    def __set__(self, instance, value):
        self._set(instance, value)

    def __delete__(self, instance):
        self._delete(instance)


patches.register(nn.Module, "training", _training_property)


def submodule_training_guard(path: str, training: bool) -> Node:
    """The guard on submodule ``path``'s training flag, put first in the root method's graph."""
    mode = "train" if training else "eval"
    return Node(GUARD, "", (), attrs={"kind": "training", "test": "training", "expected": bool(training),
                                      "seen": bool(training), "path": path,
                                      "what": f"submodule '{path}' was traced in {mode} mode", "line": ""},
                effectful=True)


def add_guards(tracer, graph) -> None:
    """One guard per submodule whose flag the recording read, first in ``graph`` (in path order)."""
    reads = getattr(tracer, "training_reads", None) or {}
    graph.nodes[:0] = [submodule_training_guard(p, v) for p, v in sorted(reads.items())]


