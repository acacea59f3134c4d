"""What a retrace of the original module borrows and gives back: the traced module's parameters and
buffers (``lend_tensors``), the forward hooks as they were at trace time (``hook_snapshot`` /
``swap_hooks``), example inputs in the module's current dtype and device (``like_module``); one retrace
at a time (``one_at_a_time``), since they all change the original module while it runs."""
from __future__ import annotations

import copy
import threading

import torch

from ..pytree import flatten, unflatten


_RETRACE_LOCK = threading.RLock()


def one_at_a_time(retrace):
    """Retraces lend tensors, hooks and the training flag to the original module: one thread at a time."""
    def run(*args):
        with _RETRACE_LOCK:
            return retrace(*args)
    return run


_HOOK_DICTS = ("_forward_hooks", "_forward_hooks_with_kwargs", "_forward_hooks_always_called",
               "_forward_pre_hooks", "_forward_pre_hooks_with_kwargs")


def hook_snapshot(mod) -> dict:
    """The forward hooks of every module, as they are now (a retrace must see the traced ones)."""
    return {m: {name: dict(getattr(m, name)) for name in _HOOK_DICTS if hasattr(m, name)} for m in mod.modules()}


def with_later_hooks(mod, snapshot: dict) -> dict:
    """``snapshot`` (the forward hooks at trace time) with the hooks ``mod``'s modules got since, in the order they
    were registered (a handle's id grows): a retrace keeps the traced hooks (one removed from the original since
    still runs in the traced program) and runs those the module installed after the trace (transformers installs
    its output-capturing hooks on the first call that asks for hidden states, and remembers it in an attribute the
    retrace reads as it is now)."""
    now = hook_snapshot(mod)
    merged = {}
    for m in set(snapshot) | set(now):
        before, after = snapshot.get(m, {}), now.get(m, {})
        merged[m] = {name: dict(sorted({**before.get(name, {}), **after.get(name, {})}.items()))   # by handle id
                     for name in set(before) | set(after)}
    return merged


def swap_hooks(snapshot: dict) -> dict:
    """Install the hook dicts of ``snapshot``; return the ones that were installed."""
    previous = {}
    for m, dicts in snapshot.items():
        previous[m] = {}
        for name, content in dicts.items():
            previous[m][name] = dict(getattr(m, name))
            target = getattr(m, name)
            target.clear()
            target.update(content)
    return previous


def swap_back(previous: dict, installed: dict) -> None:
    """Undo ``swap_hooks(installed)`` (``previous``: what it returned), keeping the hooks the modules got while
    ``installed`` was in place: the traced code registered them (transformers installs its output-capturing hooks on
    the first call asking for hidden states, and remembers it in an attribute that stays set). Dropping them left the
    user's model with the attribute and without its hooks: after one retrace that asked for hidden states (even a
    refused one), eager answered an empty ``hidden_states`` from then on, silently (hunt27)."""
    for m, dicts in previous.items():
        for name, content in dicts.items():
            target = getattr(m, name)
            put = installed.get(m, {}).get(name, {})
            added = {k: v for k, v in target.items() if k not in put}
            target.clear()
            target.update(content)
            target.update(added)


def lend_tensors(source, mod) -> dict:
    """Put ``source``'s parameters and buffers into ``mod`` (same paths); return what was there.

    ``source`` is a TracedModule or a dict returned by an earlier call (to put things back).
    """
    if isinstance(source, dict):
        incoming = source
    else:
        incoming = {}
        for path, sub in source.named_modules(remove_duplicate=False):
            incoming[path] = (dict(sub._parameters), dict(sub._buffers))
    previous = {}
    for path, sub in mod.named_modules(remove_duplicate=False):
        if path in incoming and path not in previous:
            previous[path] = (dict(sub._parameters), dict(sub._buffers))
            params, buffers = incoming[path]
            sub._parameters.update(params)
            sub._buffers.update(buffers)
    return previous


def float64_copy(source, mod, hooks: dict):
    """A float64 deep copy of ``mod`` holding ``source``'s (the traced module's) parameters and buffers and
    the forward hooks of ``hooks`` (a ``hook_snapshot`` taken at trace time), in ``source``'s training mode:
    the original computation in float64, which ``optimize_for_inference(backend="auto")`` measures its
    candidates' error against (auto_exactness.py). None where the original cannot be copied."""
    lent = lend_tensors(source, mod)
    now = swap_hooks(hooks)
    try:
        clone = copy.deepcopy(mod)
    except Exception:  # noqa: BLE001  (a module holding something deepcopy refuses: no reference)
        return None
    finally:
        swap_hooks(now)
        lend_tensors(lent, mod)
    for path, m in clone.named_modules():
        traced_sub = submodule_or_none(source, path)
        m.training = traced_sub.training if traced_sub is not None else source.training
    return clone.double()


def float64_original(traced):
    """``float64_copy`` for ``traced`` (api.py keeps it as ``_traced_float64``), or None: a loaded program, a
    traced function, a dropped original (specialize.drop_original), or a module deepcopy refuses."""
    make = traced.__dict__.get("_traced_float64")
    return make(traced) if make is not None else None


def like_module(example: tuple, mod) -> tuple:
    """Example inputs moved to the module's current float dtype and device (after ``.to()``)."""
    ref = next((p for p in list(mod.parameters()) + list(mod.buffers()) if p.is_floating_point()), None)
    if ref is None:
        return example
    leaves, spec = flatten(example)
    moved = [x.to(device=ref.device, dtype=ref.dtype) if isinstance(x, torch.Tensor) and x.is_floating_point()
             else x.to(ref.device) if isinstance(x, torch.Tensor) else x for x in leaves]
    return unflatten(spec, moved)


def submodule_or_none(module, path: str):
    """The submodule of ``module`` at ``path``, or None when there is none."""
    try:
        return module.get_submodule(path) if path else module
    except AttributeError:
        return None
