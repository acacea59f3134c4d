"""Grad-mode regions: ``torch.no_grad()``, ``enable_grad()``, ``set_grad_enabled(b)`` and
``inference_mode()`` inside traced code are recorded on each node and replayed.

Each node recorded while traced code had set a grad mode of its own carries
``attrs["grad"]``: ``"no_grad"``, ``"enable_grad"`` or ``"inference"``. Codegen
wraps runs of nodes with the same mode in the matching ``with`` block, so the
traced program builds (or does not build) autograd history where eager does.

A mode is "set by the traced code" while one of torch's grad-mode context
managers (or decorators, which use them) entered during the trace is open, or
when the current mode differs from the one the trace started in (a bare
``torch.set_grad_enabled(False)`` call, or the forward of a custom autograd
Function, which autograd runs without grad). Nodes without the attribute run in
the caller's mode, as eager code would.
"""
from __future__ import annotations

import sys

import torch
from torch.autograd import grad_mode as _gm

from ..errors import TraceError
from ..ir.regions import ENABLE_GRAD, INFERENCE, NO_GRAD
from . import autocast_mode
from .symbolic import get_tracer

_CONTEXTS = (_gm.no_grad, _gm.enable_grad, _gm.set_grad_enabled, _gm.inference_mode)


def current_mode() -> str:
    if torch.is_inference_mode_enabled():
        return INFERENCE
    return ENABLE_GRAD if torch.is_grad_enabled() else NO_GRAD


class GradModeState:
    """Per trace: the mode the trace started in and how many grad-mode blocks are open."""

    def __init__(self):
        self.entry = current_mode()
        self.autocast_entry = autocast_mode.current()
        self.autocast_open: list = []   # device of each torch.autocast block the traced code has open
        self.depth = 0
        self.bare: list = []   # block depth of each bare ``torch.set_grad_enabled(b)`` call: the mode stays explicit
        #                        from then on, until the block it was made in exits (which restores the mode)
        self.exit = None   # the mode the last bare call outside any grad-mode block set: forward leaves it so

    def region(self) -> str | None:
        mode = current_mode()
        if self.depth > 0 or self.bare or mode != self.entry:
            return mode
        return None


def refuse_free_tensor_needing_grad(t, loc) -> None:
    """A tensor that requires grad, met outside the inputs, parameters and buffers, cannot become a constant."""
    if t.requires_grad and torch.is_grad_enabled():
        shape = "nested" if t.is_nested else tuple(t.shape)
        raise TraceError(
            "Cannot insert a Tensor that requires grad as a constant. Consider making it a parameter or input, or "
            f"detaching the gradient (the words of torch.jit's tracer). The tensor (shape {shape}, dtype {t.dtype}) is used "
            f"at {loc} and is neither an input nor a parameter or buffer of the traced module; as a constant its "
            "gradient would be lost.")


def mark(tracer, node) -> None:
    """Write the grad mode the traced code set (if any) on a freshly recorded node."""
    state = getattr(tracer, "grad_state", None)
    if state is None or getattr(tracer, "autograd_fn_depth", 0):
        return   # a custom Function's forward: autograd turns grad off there, the Function node stands for it
    region = state.region()
    if region is not None:
        node.attrs["grad"] = region
    autocast = autocast_mode.region(state.autocast_entry, state.autocast_open)
    if autocast is not None:
        node.attrs["autocast"] = autocast


def _state():
    """The grad-mode state of the trace recording on this thread, if any."""
    tracer = get_tracer()
    return getattr(tracer, "grad_state", None) if tracer is not None else None


def stand_ins() -> list:
    """(owner, attribute, make_stand_in) for trace/patches.register: torch's grad-mode and autocast context
    managers count the blocks traced code opens. Each stand-in acts only for the calling thread's trace."""
    amp = autocast_mode.AUTOCAST
    entries = [(cls, "__enter__", _counting_enter) for cls in _CONTEXTS]
    entries += [(cls, "__exit__", _counting_exit) for cls in _CONTEXTS]
    entries += [(_gm.set_grad_enabled, "__init__", _bare_counting_init),
                (amp, "__enter__", _autocast_enter), (amp, "__exit__", _autocast_exit)]
    return entries


def _counting_enter(enter):
    def traced_enter(self):
        state = _state()
        if state is not None and self.__dict__.pop("_tracejit_bare", False):
            if state.bare:
                state.bare.pop()     # a set_grad_enabled used as a context manager after all
            state.exit = self.__dict__.pop("_tracejit_exit_before", state.exit)   # its exit restores the mode
        result = enter(self)
        if state is not None:
            state.depth += 1
        return result
    return traced_enter


def _counting_exit(exit_):
    def traced_exit(self, *exc):
        state = _state()
        if state is not None and state.depth > 0:
            state.depth -= 1
            state.bare = [d for d in state.bare if d <= state.depth]   # bare calls inside the block: undone
        return exit_(self, *exc)
    return traced_exit


def _autocast_enter(enter):
    def traced_enter(self):
        result = enter(self)
        state = _state()
        if state is not None:
            state.autocast_open.append(getattr(self, "device", "cpu"))
        return result
    return traced_enter


def _autocast_exit(exit_):
    def traced_exit(self, *exc):
        state = _state()
        if state is not None and state.autocast_open:
            state.autocast_open.pop()
        return exit_(self, *exc)
    return traced_exit


def _bare_counting_init(init):
    def traced_init(self, mode):
        init(self, mode)
        state = _state()
        # bare until it is entered as a context manager (no_grad.__enter__ makes one internally: not user code)
        if state is not None and sys._getframe(1).f_code.co_filename != _gm.__file__:
            self._tracejit_bare = True
            state.bare.append(state.depth)
            if state.depth == 0:   # not undone by a block's exit: the caller is left in this mode (eager)
                self._tracejit_exit_before = state.exit
                state.exit = bool(mode)
    return traced_init

