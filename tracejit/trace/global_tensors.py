"""Module-level tensors the user's code read while tracing are checked by identity, in memory only.

``MEAN = torch.tensor([0.485, 0.456, 0.406])`` at the top of a file, read by forward: the trace captures the tensor
as a constant (the ledger notes it), eager reads the name again at every call. An update in place
(``MEAN.mul_(2)``) is the captured object itself and the program reads it; a rebinding (``MEAN = MEAN.to(...)``,
``MEAN = torch.load(...)``, a test's monkeypatch) was silently missed: the program kept the old tensor
(torch.jit.trace does too). Now each such global (a ``LOAD_GLOBAL`` of user code, module-level or in code run
by ``exec``) is held with the tensor it was bound to in the graph's ``memory_checks``
(support/global_guards.IdentityChecks), which the callers of the compiled method run before its code
(runtime/traced.py, runtime/specialize.py, backends/torch_kernels.py): a live or optimized program traces
again (eager's answer), one whose original was dropped raises GuardError naming the line that read it.

Why outside the graph: a file keeps no check of Python globals (it is loaded where the user's modules need not
exist: serialize/encode.py), and a loaded program must print the same graph and code as the one saved, so the
check is held beside the graph, not in it. ``allow_frozen_python_state=True`` keeps the captured tensor
whatever the name is bound to later (no check).

>>> import sys, types, warnings, torch, tracejit
>>> stats = sys.modules["stats"] = types.ModuleType("stats")   # a module of the user's
>>> stats.__dict__.update(torch=torch)
>>> exec(compile("MEAN = torch.ones(2)\\ndef centred(x):\\n    return x - MEAN", "stats.py", "exec"), stats.__dict__)
>>> with warnings.catch_warnings():
...     warnings.simplefilter("ignore")
...     traced = tracejit.trace(stats.centred, torch.zeros(2))
...     stats.MEAN = torch.full((2,), 3.0)
...     traced(torch.zeros(2))
tensor([-3., -3.])
"""
from __future__ import annotations

import linecache

import torch

from ..ir import GUARD, Node, SourceLoc
from ..support.global_guards import IdentityChecks
from .global_reads import KIND, _global_loads, _module_of


def add_checks(outer, graph, allowed: bool) -> None:
    """Give ``graph`` (the root method's) the identity checks of the module-level tensors read (module docstring);
    none where the caller allowed frozen Python state."""
    if allowed:
        return
    items = []
    for g, name, codes in outer.globals_read():
        value = g.get(name)
        if not isinstance(value, torch.Tensor) or name.startswith("__"):
            continue
        reads = [(c, _global_loads(c)[name]) for c in codes if name in _global_loads(c)]
        if not reads:
            continue
        code, line = reads[0]
        module = _module_of(g)
        where = f"module {module}" if module is not None else f"code run by exec ({code.co_filename})"
        loc = SourceLoc(code.co_filename, line, code.co_name)
        node = Node(GUARD, "", (), attrs={
            "kind": KIND, "test": KIND, "expected": True, "seen": True,
            "name": name, "line": linecache.getline(code.co_filename, line).strip(),
            "what": f"global `{name}` of {where} was a tensor (shape {tuple(value.shape)}, dtype {value.dtype}) "
                    "the trace captured, and eager reads the name again at each call"},
            source=loc, effectful=True)
        items.append((g, name, value, node))
    if items:
        graph.memory_checks = IdentityChecks(items)
