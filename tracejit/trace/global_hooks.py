r"""torch's global module hooks (``torch.nn.modules.module.register_module_forward_hook`` and its kin): a trace
records what the ones registered then did; a call checks that the same ones are registered.

Eager runs the global hooks on every module call. A trace records what the hooks registered at trace time did
(their tensor ops are in the graph) and nothing of one registered later, so without a check a traced program
would keep applying a hook since removed and never apply one registered since (torch.jit's traced modules do
both, silently). So:

- a trace made with global forward hooks registered gets a ``global`` guard on them (their handles' ids, which
  torch never reuses; support/module_hooks.py): once they are removed a live program traces again (eager's
  answer); ``save`` and ``export_onnx`` refuse such a program (their effect is in the graph, and neither a file
  nor an ONNX model can check them where it runs: serialize/encode.py, export/guards.py);
- a call made while global hooks are registered that the first trace did not see is a LateHookError (every
  program kind asks, runtime/late_hooks.check_global: four dict tests per call when none is registered);
- a global backward hook is refused at trace time, as a module's own backward hooks are (trace/calls.py).

>>> import torch, tracejit
>>> from torch import nn
>>> traced = tracejit.trace(nn.Linear(2, 2), torch.ones(1, 2))
>>> handle = nn.modules.module.register_module_forward_hook(lambda mod, args, out: out * 0)
>>> try:
...     traced(torch.ones(1, 2))
... except tracejit.TraceError as e:   # a LateHookError (runtime/late_hooks.py)
...     print(str(e).split(";")[0])
the global module hooks registered now (1 global forward hook
>>> handle.remove()
"""
from __future__ import annotations

from ..errors import BackwardHookError
from ..ir import GUARD, Node
from ..support.global_guards import guardable
from ..support.module_hooks import NAME, SPACE, describe, hooks_now


def guard_node() -> Node:
    """The ``global`` guard on the global module hooks registered now (a trace's last look at them)."""
    value = SPACE[NAME]
    expected = guardable(value)
    return Node(GUARD, "", (), attrs={
        "kind": "global", "test": "global", "expected": expected, "seen": expected, "space": SPACE,
        "owner": "torch.nn.modules.module", "name": NAME,
        "what": f"the global module hooks (torch.nn.modules.module.register_module_*_hook) were "
                f"{describe(value)} when traced", "line": ""}, effectful=True)


def refuse_backward_hooks() -> None:
    """A global backward hook would run in eager's backward and never in the traced program's: refused."""
    for what, *_ in hooks_now():
        if what.startswith("backward"):
            raise BackwardHookError(
                f"a global module {what} is registered (torch.nn.modules.module.register_module_"
                f"{'full_backward_pre_hook' if 'pre' in what else 'full_backward_hook'}), and backward hooks "
                "cannot be traced: eager runs it in every module's backward, the traced program would not. "
                "Remove it before tracing")
