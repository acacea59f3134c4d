"""torch's global module hooks as a ``global`` guard reads them (trace/global_hooks.py).

``hooks_now()`` is ``()`` while no global forward or backward hook is registered (four dict tests, ~0.1 us: the
check every traced program makes per call), else ``((what, handle id, ...), ...)``: a handle's id is never
reused, so the tuple changes whenever a hook is registered or removed.

>>> import torch
>>> hooks_now()
()
>>> handle = torch.nn.modules.module.register_module_forward_hook(lambda mod, args, out: None)
>>> [entry[0] for entry in hooks_now()]
['forward hook']
>>> handle.remove(); hooks_now()
()
"""
from __future__ import annotations

from collections.abc import Mapping

from torch.nn.modules import module as _m

NAME = "hooks"
# (what, the dict of torch.nn.modules.module holding them)
DICTS = (("forward pre-hook", "_global_forward_pre_hooks"), ("forward hook", "_global_forward_hooks"),
         ("backward pre-hook", "_global_backward_pre_hooks"), ("backward hook", "_global_backward_hooks"))


def any_registered() -> bool:
    """Is any global forward or backward module hook registered? (Four dict tests: each traced program's call
    asks, runtime/late_hooks.check_global.)"""
    return bool(_m._global_forward_pre_hooks or _m._global_forward_hooks or _m._global_backward_pre_hooks
                or _m._global_backward_hooks)


def hooks_now() -> tuple:
    """The global module hooks registered now (module docstring)."""
    if not any_registered():
        return ()
    return tuple((what, *getattr(_m, attr)) for what, attr in DICTS if getattr(_m, attr))


def describe(value: tuple) -> str:
    """``hooks_now()``'s value in words: ``1 global forward hook, 2 global forward pre-hooks``."""
    return ", ".join(f"{len(entry) - 1} global {entry[0]}{'s' if len(entry) > 2 else ''}" for entry in value) \
        or "no global module hook"


def is_hook_guard(node) -> bool:
    """Is ``node`` the ``global`` guard on the global module hooks (trace/global_hooks.py)?"""
    return node.attrs.get("kind") == "global" and node.attrs.get("name") == NAME and \
        node.attrs.get("owner") == "torch.nn.modules.module"


def traced_value(expected) -> tuple:
    """``hooks_now()``'s value at trace time, from the guard's ``expected`` (support/global_guards.guardable's)."""
    return tuple(tuple(item[1] for item in entry[1]) for entry in expected[1])


class HookSpace(Mapping):
    """The one-entry namespace ``{NAME: hooks_now()}`` a ``global`` guard node holds (``attrs["space"]``)."""

    def __getitem__(self, name):
        if name != NAME:
            raise KeyError(name)
        return hooks_now()

    def __iter__(self):
        return iter((NAME,))

    def __len__(self):
        return 1


SPACE = HookSpace()
