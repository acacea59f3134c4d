"""Hooks registered on a traced submodule after the trace: refused at the next call, never silently skipped.

A traced module's code calls its submodules' generated code directly (their calls were recorded, or inlined),
so a forward or backward hook registered later on one of its traced submodules would never run, where eager
runs it on every call (torch.jit's traced modules skip it silently too). Hooks on the traced object itself run
(``TracedModule.__call__`` goes through ``nn.Module.__call__`` for them).

Every hook registration on a traced module bumps ``EPOCH``; a traced module's call compares one int with the
epoch it last checked, and only where it moved looks at its submodules: one with a hook is a
``LateHookError`` naming it. Register the hook on the original module and trace again (the trace records
what it does), or call the submodule itself (``traced.block(x)`` runs its own hooks).

>>> import torch, tracejit
>>> from torch import nn
>>> m = nn.Sequential(nn.Linear(3, 3), nn.ReLU())
>>> traced = tracejit.trace(m, torch.randn(2, 3))
>>> handle = traced._modules["0"].register_forward_hook(lambda mod, args, out: out * 0)
>>> try:
...     traced(torch.randn(2, 3))
... except LateHookError as e:
...     print(str(e).split(":")[0])
forward hook on submodule '0' registered after the trace
>>> handle.remove()
>>> traced(torch.randn(2, 3)).shape
torch.Size([2, 3])
"""
from __future__ import annotations

from ..errors import TraceError
from ..support.module_hooks import describe, hooks_now, is_hook_guard, traced_value

EPOCH = [0]   # registrations on traced modules so far (a list: one mutable cell, read without a lock)
_HOOK_DICTS = (("forward pre-hook", "_forward_pre_hooks"), ("forward hook", "_forward_hooks"),
               ("backward pre-hook", "_backward_pre_hooks"), ("backward hook", "_backward_hooks"))


class Seen:
    """The epoch a traced module's last check saw: an object of its own, so a check made while an outer trace
    records the module (a traced module used inside another model) changes none of the module's attributes."""
    __slots__ = ("epoch",)

    def __init__(self):
        self.epoch = -1


class LateHookError(TraceError):
    """A hook on a traced submodule that its traced parent's code would not run."""


def registered(handle):
    """Count one registration (called by TracedModule's register_* methods); returns ``handle``."""
    EPOCH[0] += 1
    return handle


def check(module) -> None:
    """Raise LateHookError where a submodule of the traced ``module`` holds a hook; else remember the epoch."""
    epoch = EPOCH[0]
    for path, sub in module.named_modules():
        if sub is module:
            continue
        for what, attr in _HOOK_DICTS:
            if getattr(sub, attr, None):
                raise LateHookError(
                    f"{what} on submodule '{path}' registered after the trace: the traced code of "
                    f"{type(module).__name__ if not hasattr(module, 'original_name') else module.original_name} "
                    f"calls it without hooks, so eager's answer would differ. Register the hook on the original "
                    f"module and trace again, or remove it")
    seen = module.__dict__.get("_hook_seen")
    if seen is None:
        seen = module.__dict__["_hook_seen"] = Seen()
    seen.epoch = epoch


def check_global(owner, graph) -> None:
    """Called where a global module hook is registered now (``support.module_hooks.any_registered()``): the
    hooks must be those registered when ``owner``'s first trace (``graph``) was recorded, else LateHookError.
    (Its ``global`` guard on them, trace/global_hooks.py, makes a live program trace again once they are all
    removed; a specialization traced then has none, so a hook registered after that is refused here too.)"""
    traced = owner.__dict__.get("_tj_traced_global_hooks")
    if traced is None:
        found = [n for n in graph.nodes if n.op == "tracejit::guard" and is_hook_guard(n)]
        traced = owner.__dict__["_tj_traced_global_hooks"] = traced_value(found[0].attrs["expected"]) if found else ()
    now = hooks_now()
    if now != traced:
        name = getattr(owner, "original_name", None) or getattr(owner, "__name__", None) or type(owner).__name__
        raise LateHookError(
            f"the global module hooks registered now ({describe(now)}; torch.nn.modules.module."
            f"register_module_*_hook) are not those registered when {name} was traced ({describe(traced)}): eager "
            "runs them on every module call, the traced code runs what the trace recorded. Remove the new ones, "
            "or trace again with them registered (the trace records what they do)")
